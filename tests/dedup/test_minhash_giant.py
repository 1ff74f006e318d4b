"""A template shared by 50,000 pages is one near-duplicate cluster, and finding it does not need the
cluster's signatures in one rank's memory: on 2 ranks with a budget far below them (the component's
members spill to disk and are verified memory-mapped) the stage completes with the same representative
and the same verdicts, byte for byte, as with a budget that holds them."""

from __future__ import annotations

import pytest

from tests.dedup.dedup_corpus import make_doc, perl_sections, write_stage_dir
from tests.dedup.stage_io import kept_docs, manifest, output_digests, run_stage

GIANT = 50_000
NUM_PERM = 112
SMALL_BUDGET_MB = 8


def giant_corpus(shared_data):
    """The template (60 real words) plus one word of its own on each of ``GIANT`` pages, each page with
    its own quality score (so one of them is the representative), beside 300 unrelated real sections."""
    sections = perl_sections(shared_data, min_words=80)
    template = " ".join(sections[0].split()[:60])
    docs = [make_doc(f"{template} page{i}", i, quality=((i * 7919) % GIANT) / GIANT) for i in range(GIANT)]
    docs += [make_doc(t, GIANT + i) for i, t in enumerate(sections[1:301])]
    best = max(range(GIANT), key=lambda i: ((i * 7919) % GIANT, -i))
    return docs, docs[best]


@pytest.fixture(scope="module")
def giant_input(shared_data, tmp_path_factory):
    docs, rep = giant_corpus(shared_data)
    return write_stage_dir(tmp_path_factory.mktemp("giant") / "in", docs, shards=6), docs, rep


@pytest.mark.slow
def test_a_giant_cluster_completes_within_a_small_budget_with_the_same_verdicts(giant_input, tmp_path):
    in_dir, docs, rep = giant_input
    assert GIANT * NUM_PERM * 8 > 4 * (SMALL_BUDGET_MB << 20), "the cluster's signatures must not fit"
    outs = {}
    for name, budget in (("small", SMALL_BUDGET_MB), ("large", 2048)):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f"memory_budget_mb = {budget}\n")
        outs[name] = tmp_path / name
        run = run_stage("minhash_dedup", 2, in_dir, outs[name], cfg)
        assert ("spilled to disk" in run.stderr) == (name == "small")
    assert output_digests(outs["small"]) == output_digests(outs["large"])

    extra = manifest(outs["small"])["extra"]
    assert extra["largest_cluster"] == GIANT and extra["hot_buckets"] > 0
    giant = [d for d in kept_docs(outs["small"]) if d.dup_cluster_size == GIANT]
    assert [d.doc_id for d in giant if not d.dup_of] == [rep.doc_id]
    cluster_id = min(d.doc_id for d in docs[:GIANT])
    giant_dups = [d for d in giant if d.dup_of]
    assert len(giant_dups) == GIANT - 1
    assert {(d.dup_of, d.dup_cluster_id) for d in giant_dups} == {(rep.doc_id, cluster_id)}
