"""connected_components: every node gets the minimum node of its component, on any rank count."""

from __future__ import annotations

import json

import numpy as np
import pytest

from corpus.dedup.union_find import UnionFind
from mpi_kernels.union_find import local_components, owner_of, pair_dtype
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
    edges = np.frombuffer(b"cddbzz", dtype=pair_dtype(1))
    stars, alone = local_components([edges[:2], edges[2:]], 1)
    assert stars.tobytes() == b"cbdb" and alone.tobytes() == b"z"


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
        owners = owner_of(np.frombuffer(b"".join(u for u, _ in pairs), dtype="V9")) % np.uint64(ranks)
        assert (owners == r).all(), "each node is labelled by its owner"
        got.update(pairs)
    assert got == expected_labels(graph(seed, n))
    assert len({res["rounds"] for res in results}) == 1


def _labels(out, ranks: int) -> tuple[dict[bytes, bytes], set[int]]:
    got, resumed = {}, set()
    for r in range(ranks):
        res = json.loads((out / f"rank{r}.json").read_text())
        got.update((bytes.fromhex(u), bytes.fromhex(v)) for u, v in res["labels"])
        resumed.add(res["resumed_after"])
    return got, resumed


def test_a_run_killed_during_the_rounds_resumes_from_the_last_committed_round_on_other_ranks(tmp_path):
    """kill -9 of a rank after round 2, then a rerun on 3 ranks: it reads round 2's edges (written by
    2 ranks) in shares, computes only the later rounds and finds the same labels."""
    checkpoint, args = tmp_path / "rounds", ("tests/kernels/cc_worker.py", "--seed", "5", "--nodes", "3000")
    killed = run_mpi(
        2,
        *args,
        "--out",
        str(tmp_path / "a"),
        "--checkpoint",
        str(checkpoint),
        "--kill-after-round",
        "2",
        timeout=300,
        check=False,
    )
    assert killed.returncode != 0 and not (tmp_path / "a" / "rank0.json").exists()
    assert json.loads((checkpoint / "round.json").read_text())["round"] == 2
    run_mpi(3, *args, "--out", str(tmp_path / "b"), "--checkpoint", str(checkpoint), timeout=300)
    got, resumed = _labels(tmp_path / "b", 3)
    assert resumed == {2}, "the rerun must resume the committed round, not restart"
    assert got == expected_labels(graph(5, 3000))
    fresh = json.loads((tmp_path / "b" / "rank0.json").read_text())["rounds"]
    assert fresh > 3, "the graph must need rounds after the kill for the test to mean anything"


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


@pytest.mark.parametrize("large", [True, False])
def test_a_round_gives_the_same_edges_and_labels_whatever_the_batches(tmp_path, large):
    """A node's sorted neighbourhood may arrive in many batches (a hub's does): the round carries its
    m across them, so cutting the same rows into batches of 1-3 rows changes nothing."""
    import io
    import random

    from mpi_kernels.union_find import _star_round

    rnd = random.Random(5)
    dtype = pair_dtype(2)
    pairs = [(rnd.randrange(6), rnd.randrange(12)) for _ in range(80)] + [(3, v) for v in range(12)] * 2
    rows = np.frombuffer(b"".join(sorted(bytes([0, u, 0, v]) for u, v in pairs if u != v)), dtype=dtype)

    def run(batches):
        out, labels = io.BytesIO(), io.BytesIO()
        stars = _star_round(batches, 2, large, out, labels)
        return stars, sorted(np.frombuffer(out.getvalue(), dtype).tolist()), labels.getvalue()

    whole = run([rows])
    cuts, at = [], 0
    while at < len(rows):
        step = rnd.randint(1, 3)
        cuts.append(rows[at : at + step])
        at += step
    assert run(cuts) == whole
    assert whole[0] is False and len(whole[2]) == 2 * 2 * len(set(rows["u"].tolist()))  # a label per node
