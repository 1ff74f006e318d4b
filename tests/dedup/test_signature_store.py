"""The signature store's format (corpus.formats.signature_store): a part's rows sorted by (cluster,
doc_id) come back by cluster through the fence, block by block, and its bytes depend on its rows alone."""

from __future__ import annotations

import hashlib

import h5py
import numpy as np

from corpus.formats.signature_store import BLOCK_ROWS, SignatureStore, store_part, truncated, write_part
from hpc_jobs.minhash_dedup.signature_store import store_route

K = 16


def rows_of(clusters: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One row per entry of ``clusters`` ((n, 16) uint8), a random doc_id and signature each."""
    route = store_route(K)
    rows = np.empty(len(clusters), dtype=route)
    rows["cluster"] = np.ascontiguousarray(clusters).view(route["cluster"]).reshape(-1)
    rows["doc"] = rng.integers(0, 256, (len(clusters), 16), dtype=np.uint8).view(route["doc"]).reshape(-1)
    rows["sig"] = truncated(rng.integers(0, 2**63, (len(clusters), K), dtype=np.uint64))
    rows["part"] = store_part(rows["cluster"], 2)
    return np.sort(rows, order=["part", "cluster", "doc"])


def test_a_cluster_comes_back_whole_wherever_its_rows_fall_among_the_blocks(tmp_path):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 256, (300, 16), dtype=np.uint8)
    sizes = rng.integers(1, 5, 300)
    sizes[17] = 3 * BLOCK_ROWS  # one cluster spans four blocks
    rows = rows_of(np.repeat(ids, sizes, axis=0), rng)
    for p in (0, 1):
        mine = rows[rows["part"] == p]
        assert write_part(tmp_path / f"g{p:05d}.h5", p, 2, K, np.array_split(mine, 3)) == len(mine)
    store = SignatureStore(tmp_path)
    asked = np.sort(
        np.concatenate([ids[[3, 17, 250]], rng.integers(0, 256, (1, 16), dtype=np.uint8)])
        .view("V16")
        .reshape(-1)
    )
    got: dict[int, np.ndarray] = {}
    for which, sigs in store.members(asked):
        got.setdefault(int(which[0]), []).append(sigs)
    for i, cluster in enumerate(asked):
        expected = rows["sig"][rows["cluster"] == cluster]
        if not len(expected):
            assert i not in got, "a cluster the store never held yields nothing"
            continue
        assert np.array_equal(np.concatenate(got[i]), expected)
    assert sum(len(s) for v in got.values() for s in v) == sizes[[3, 17, 250]].sum()


def test_the_same_rows_give_the_same_bytes_and_a_sidecar_names_them(tmp_path):
    rng = np.random.default_rng(3)
    rows = rows_of(rng.integers(0, 256, (500, 16), dtype=np.uint8), rng)
    rows = rows[rows["part"] == 0]
    write_part(tmp_path / "a.h5", 0, 2, K, [rows])
    write_part(tmp_path / "b.h5", 0, 2, K, np.array_split(rows, 7))
    a, b = (tmp_path / "a.h5").read_bytes(), (tmp_path / "b.h5").read_bytes()
    assert a == b, "batching never shows in the bytes, and no time stamp is stored"
    sidecar = (tmp_path / "a.h5.json").read_text()
    assert hashlib.sha256(a).hexdigest() in sidecar and f'"records": {len(rows)}' in sidecar
    with h5py.File(tmp_path / "a.h5", "r") as f:
        assert f["sig"].dtype == np.uint32 and f["sig"].shape == (len(rows), K)
        assert f["sig"].chunks == (BLOCK_ROWS, K)


def test_no_cluster_has_no_part_and_an_empty_part_is_a_store_that_holds_nothing(tmp_path):
    assert store_part(np.empty(0, "V16"), 4).shape == (0,)
    assert write_part(tmp_path / "g00000.h5", 0, 1, K, []) == 0
    asked = np.random.default_rng(1).integers(0, 256, (3, 16), dtype=np.uint8).view("V16").reshape(-1)
    assert list(SignatureStore(tmp_path).members(np.sort(asked))) == []
