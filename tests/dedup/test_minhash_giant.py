"""A template shared by 50,000 pages is one near-duplicate cluster, and finding it costs each rank a share
of it: on 2 ranks with a budget far below the cluster's signatures the stage completes with the same
representative and the same verdicts, byte for byte, as with a budget that holds them and as on one rank,
and no rank held more than 60 % of the component's members (or of its rows in any band) while verifying
it (counted by the stage, run_info ``distributed_verification``)."""

from __future__ import annotations

import pytest

from tests.dedup.dedup_corpus import make_doc, perl_sections, write_stage_dir
from tests.dedup.stage_io import kept_docs, manifest, output_digests, run_stage

#: the most a rank may hold of the component on 2 ranks (half of it, plus the splitters' sampling error)
SHARE = 0.6

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
def test_a_giant_cluster_is_verified_in_shares_with_the_same_verdicts_on_any_budget_and_rank_count(
    giant_input, tmp_path
):
    in_dir, docs, rep = giant_input
    assert GIANT * NUM_PERM * 8 > 4 * (SMALL_BUDGET_MB << 20), "the cluster's signatures must not fit"
    outs = {}
    for name, budget, ranks in (("small", SMALL_BUDGET_MB, 2), ("large", 2048, 2), ("one_rank", 2048, 1)):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f"memory_budget_mb = {budget}\n")
        outs[name] = tmp_path / name
        run_stage("minhash_dedup", ranks, in_dir, outs[name], cfg)
    assert output_digests(outs["small"]) == output_digests(outs["large"]) == output_digests(outs["one_rank"])

    for name in ("small", "large"):  # what one rank held of the component, counted
        held = manifest(outs[name])["run_info"]["distributed_verification"]
        assert held["components"] == 1 and held["largest_component"] == GIANT
        assert 0 < held["most_members_of_one_component_on_a_rank"] <= SHARE * GIANT, held
        assert 0 < held["most_band_rows_of_one_component_and_band_on_a_rank"] <= SHARE * GIANT, held
    assert (
        manifest(outs["one_rank"])["run_info"]["distributed_verification"][
            "most_members_of_one_component_on_a_rank"
        ]
        == GIANT
    )

    extra = manifest(outs["small"])["extra"]
    assert extra["largest_cluster"] == GIANT and extra["hot_buckets"] > 0
    assert extra["distributed_components"] == 1
    giant = [d for d in kept_docs(outs["small"]) if d.dup_cluster_size == GIANT]
    assert [d.doc_id for d in giant if not d.dup_of] == [rep.doc_id]
    cluster_id = min(d.doc_id for d in docs[:GIANT])
    giant_dups = [d for d in giant if d.dup_of]
    assert len(giant_dups) == GIANT - 1
    assert {(d.dup_of, d.dup_cluster_id) for d in giant_dups} == {(rep.doc_id, cluster_id)}
