"""connected_components: every node gets the minimum node of its component, on any rank count."""

from __future__ import annotations

import json

import pytest

from corpus.dedup.union_find import UnionFind
from mpi_kernels.shuffle import stable_key_hash
from mpi_kernels.union_find import local_components
from tests.conftest import run_mpi
from tests.kernels.cc_worker import graph


def expected_labels(edges) -> dict[bytes, bytes]:
    """Plain sequential reference: components by breadth-first search, labelled by their minimum."""
    adj: dict[bytes, set[bytes]] = {}
    for u, v in edges:
        adj.setdefault(u, set()).add(v)
        adj.setdefault(v, set()).add(u)
    label: dict[bytes, bytes] = {}
    for start in adj:
        if start in label:
            continue
        comp, todo = {start}, [start]
        while todo:
            for w in adj[todo.pop()]:
                if w not in comp:
                    comp.add(w)
                    todo.append(w)
        m = min(comp)
        label.update(dict.fromkeys(comp, m))
    return label


def test_local_union_find_roots_at_the_minimum():
    uf = UnionFind()
    uf.union(b"c", b"d")
    uf.union(b"d", b"b")
    uf.union(b"x", b"a")
    assert uf.find(b"d") == b"b" and uf.find(b"x") == b"a"
    stars, alone = local_components([(b"c", b"d"), (b"d", b"b"), (b"z", b"z")])
    assert stars == [(b"c", b"b"), (b"d", b"b")] and alone == [b"z"]


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_components_are_labelled_by_their_minimum_on_any_rank_count(tmp_path, ranks):
    seed, n = ranks, 3000
    run_mpi(
        ranks,
        "tests/kernels/cc_worker.py",
        "--seed",
        str(seed),
        "--nodes",
        str(n),
        "--out",
        str(tmp_path),
        timeout=300,
    )
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(ranks)]
    got = {}
    for r, res in enumerate(results):
        pairs = [(bytes.fromhex(u), bytes.fromhex(lab)) for u, lab in res["labels"]]
        assert pairs == sorted(pairs)
        assert all(stable_key_hash(u) % ranks == r for u, _ in pairs), "each node is labelled by its owner"
        got.update(pairs)
    assert got == expected_labels(graph(seed, n))
    assert len({res["rounds"] for res in results}) == 1


def test_tiny_memory_budget_gives_the_same_components(tmp_path):
    run_mpi(
        3,
        "tests/kernels/cc_worker.py",
        "--seed",
        "9",
        "--nodes",
        "1500",
        "--budget",
        "30000",
        "--out",
        str(tmp_path),
        timeout=300,
    )
    got = {}
    for r in range(3):
        got.update(
            (bytes.fromhex(u), bytes.fromhex(v))
            for u, v in json.loads((tmp_path / f"rank{r}.json").read_text())["labels"]
        )
    assert got == expected_labels(graph(9, 1500))
