"""Sparse reads: a version asks the filesystem for its selected documents' bytes only, coalesced, and a
step's touching ranges of a shard are one request; the stream delivered is the same either way.

Bytes are counts, not timings: ``bytes_read`` is what the read requests covered, ``bytes_hashed`` what the
block checks hashed (a block is hashed whole, so with fixed 4 MiB blocks a sparse version still hashes them
all; with write_shards' blocks, each document's own, it hashes its documents).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import write_id_snapshot
from test_loader_versions import make_version

from corpus.formats.block_layout import DOCUMENTS, FIXED
from corpus.formats.megatron import read_index
from corpus.version.open import open_version
from loader import SnapshotLoader
from loader.sparse import coalesce, merge_step_ranges

#: quality is ((doc * 37 + shard * 11) % 100) / 100 (snapshot_factory.lineage_for): 10 % of each 100 documents
TEN_PERCENT = "min_scores = { quality = 0.9 }\n"


def test_coalesce_merges_touching_and_near_ranges_only():
    lo, hi = coalesce(np.array([0, 10, 30, 100, 100]), np.array([10, 20, 40, 100, 120]), gap=10)
    assert lo.tolist() == [0, 100] and hi.tolist() == [40, 120]
    lo, hi = coalesce(np.array([0, 10, 30]), np.array([10, 20, 40]), gap=0)
    assert lo.tolist() == [0, 30] and hi.tolist() == [20, 40]


def test_a_steps_touching_ranges_of_a_shard_are_one_request():
    segments = (((3, 0, 16),), ((3, 16, 20), (5, 0, 12)), ((5, 12, 28),), ((3, 40, 56),))
    assert merge_step_ranges(segments) == [(3, 0, 20), (5, 0, 28), (3, 40, 56)]


def selected_bytes(version_dir: Path) -> int:
    v = open_version(version_dir)
    total = 0
    for shard, ref in zip(v.base.shards, v.shards, strict=True):
        idx = read_index(v.base_dir / shard.files["idx"])
        total += int(idx.lengths[v.selected(ref)].sum()) * idx.dtype.itemsize
    return total


def one_epoch(version_dir: Path, **kw) -> tuple[dict, list[np.ndarray]]:
    loader = SnapshotLoader(
        version_dir, seed=3, seq_len=64, batch_size=4, dp_rank=0, dp_world=1, epoch_caps=1, **kw
    )
    batches = [b.tokens.numpy().copy() for b in loader]
    metrics = loader.metrics()
    loader.close()
    return metrics, batches


@pytest.fixture(
    scope="module",
    params=[(64, FIXED), (4 << 20, FIXED), (4 << 20, DOCUMENTS)],
    ids=["64-byte-blocks", "4MiB-blocks", "4MiB-document-blocks"],
)
def ten_percent(request, tmp_path_factory) -> tuple[Path, tuple[int, str]]:
    root = tmp_path_factory.mktemp("sparse")
    block_size, layout = request.param
    write_id_snapshot(
        root / "snap",
        {"web": 2, "wiki": 2},
        doc_len=(150, 300),
        docs_per_shard=(200, 300),
        block_size=block_size,
        block_layout=layout,
    )
    return make_version(root / "snap", root / "v", TEN_PERCENT), request.param


@pytest.mark.parametrize("prefetch", [0, 4])
def test_a_ten_percent_version_reads_at_most_1_2_bytes_per_selected_byte(ten_percent, prefetch):
    version, _ = ten_percent
    selected = selected_bytes(version)
    v = open_version(version)
    assert 0.08 < sum(d for _, d, _ in v.selected_counts()) / sum(s.docs for s in v.base.shards) < 0.12
    metrics, _ = one_epoch(version, prefetch_steps=prefetch)
    assert selected <= metrics["bytes_read"] <= 1.2 * selected


def test_block_checks_hash_whole_blocks_so_small_or_document_blocks_keep_a_version_sparse(ten_percent):
    version, (block_size, layout) = ten_percent
    selected = selected_bytes(version)
    metrics, _ = one_epoch(version, prefetch_steps=0)
    if block_size == 64 or layout == DOCUMENTS:  # a selected document's blocks hold nothing else
        assert selected <= metrics["bytes_hashed"] <= 1.2 * selected
    else:  # every fixed 4 MiB block holds selected documents: the whole shard is hashed
        assert metrics["bytes_hashed"] >= 5 * selected


def test_the_gap_allowance_changes_what_is_requested_not_what_is_delivered(ten_percent):
    version, _ = ten_percent
    tight, a = one_epoch(version, prefetch_steps=0)
    loose, b = one_epoch(version, prefetch_steps=0, gap_bytes=1 << 20)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert loose["bytes_read"] > 3 * tight["bytes_read"]
