"""Against exact all-pairs Jaccard on real documents, the stage removes the right set: precision and
recall at least as good as datasketch's MinHashLSH at the same bands and rows, measured in the same run."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.bench_minhash import (
    BANDS,
    PERM,
    ROWS,
    THRESHOLD,
    datasketch_minhashes,
    exact_pairs,
    quality_corpus,
    removed_by_clusters,
    run_stage_removed,
)


def precision_recall(docs, removed: set[int], truth: set[int]) -> tuple[float, float]:
    """Copies with the same doc_id are interchangeable, so removed sets are compared by doc_id."""
    tp = sum((Counter(docs[i].doc_id for i in removed) & Counter(docs[i].doc_id for i in truth)).values())
    return tp / max(len(removed), 1), tp / max(len(truth), 1)


@pytest.mark.slow
def test_precision_and_recall_at_least_those_of_datasketch():
    from datasketch import MinHashLSH

    docs = quality_corpus(2000)
    truth = removed_by_clusters(docs, exact_pairs(docs, THRESHOLD))
    assert len(truth) > 150, "the corpus must hold enough near-duplicates to measure anything"

    ours, _ = run_stage_removed(docs, "")
    mhs = datasketch_minhashes([d.text for d in docs])
    lsh = MinHashLSH(num_perm=PERM, params=(BANDS, ROWS))
    for i, m in enumerate(mhs):
        lsh.insert(i, m)
    theirs = removed_by_clusters(docs, [(i, j) for i, m in enumerate(mhs) for j in lsh.query(m) if j > i])

    p_ours, r_ours = precision_recall(docs, ours, truth)
    p_ds, r_ds = precision_recall(docs, theirs, truth)
    print(
        f"ours precision {p_ours:.3f} recall {r_ours:.3f}; datasketch precision {p_ds:.3f} recall {r_ds:.3f}"
    )
    assert p_ours >= p_ds and r_ours >= r_ds - 0.005
    assert p_ours > 0.95 and r_ours > 0.95
