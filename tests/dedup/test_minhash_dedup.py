"""minhash_dedup: planted near-duplicates are clustered, the most trusted / best / earliest copy represents
each cluster, every member carries the cluster's id and size, identically on 1, 2 and 4 ranks."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from runtime.preemption import FAULT_ENV
from tests.dedup.dedup_corpus import make_doc, perl_sections, write_stage_dir
from tests.dedup.stage_io import filtered_records, kept_docs, manifest, output_digests, run_stage
from tests.support.interruptions import assert_resumes_after_interruption, last_run


def edit_words(text: str, rnd: random.Random, fraction: float) -> str:
    words = text.split()
    for i in rnd.sample(range(len(words)), max(1, int(len(words) * fraction))):
        words[i] = f"edited{rnd.randrange(10**6)}"
    return " ".join(words)


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    rnd = random.Random(4)
    sections = [s for s in perl_sections(shared_data, min_words=80)][:400]
    docs = [make_doc(t, i) for i, t in enumerate(sections)]
    clusters = {}
    # cluster A: a web original, a later curated copy with light edits, a higher-quality web copy
    a = sections[10]
    clusters["a"] = [
        docs[10],
        make_doc(edit_words(a, rnd, 0.01), 2000, source="perl-doc", tier="curated", crawl_date="2026-06-01"),
        make_doc(edit_words(a, rnd, 0.02), 2001, quality=0.9),
    ]
    # cluster B: web copies only; the best quality wins over the earliest
    b = sections[20]
    clusters["b"] = [
        docs[20],
        make_doc(edit_words(b, rnd, 0.01), 2002, crawl_date="2025-01-01", quality=0.2),
        make_doc(edit_words(b, rnd, 0.01), 2003, crawl_date="2026-09-01", quality=0.8),
    ]
    # cluster C: same tier, same quality: the earliest crawl wins
    c = sections[30]
    clusters["c"] = [docs[30], make_doc(edit_words(c, rnd, 0.02), 2004, crawl_date="2024-05-05")]
    docs += [d for members in clusters.values() for d in members[1:]]
    # a heavily edited copy (Jaccard far below the S-curve) stays alone
    far = make_doc(edit_words(sections[40], rnd, 0.5), 2005)
    docs.append(far)
    docs.append(make_doc("", 2006))  # no shingles at all: never clustered
    # the very same document twice (same doc_id, as without exact_dedup before): one copy stays
    twin = make_doc(sections[50], 3000)
    assert twin.doc_id == docs[50].doc_id
    docs.append(twin)
    in_dir = write_stage_dir(tmp_path_factory.mktemp("minhash") / "in", docs, shards=5)
    expected_rep = {"a": clusters["a"][1], "b": clusters["b"][2], "c": clusters["c"][1]}
    return in_dir, docs, clusters, expected_rep, far


@pytest.fixture(scope="module")
def two_rank_run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("minhash-run") / "out"
    run_stage("minhash_dedup", 2, corpus[0], out)
    return out


def test_planted_clusters_have_the_expected_representative_and_every_member_stays_a_candidate(
    corpus, two_rank_run
):
    _, docs, clusters, expected_rep, far = corpus
    assert filtered_records(two_rank_run) == []
    out = {d.url: d for d in kept_docs(two_rank_run)}
    for name, members in clusters.items():
        rep = expected_rep[name]
        cluster_id = min(m.doc_id for m in members)
        assert out[rep.url].dup_cluster_id == cluster_id and out[rep.url].dup_cluster_size == len(members)
        assert out[rep.url].dup_of == "", name
        for m in members:
            if m is rep:
                continue
            d = out[m.url]
            assert d.dup_of == rep.doc_id
            assert d.dup_cluster_id == cluster_id and d.dup_cluster_size == len(members)
    assert out[far.url].dup_cluster_size == 1
    twins = [out[u] for u in ("https://web-crawl.example.org/50", "https://web-crawl.example.org/3000")]
    (keeper,) = [d for d in twins if d.dup_of == ""]
    assert [d.dup_of for d in twins if d is not keeper] == [keeper.doc_id]
    assert out["https://web-crawl.example.org/2006"].dup_of == ""


def test_counts_reconcile_and_the_report_has_the_cluster_distribution(corpus, two_rank_run):
    _, docs, clusters, _, _ = corpus
    m = manifest(two_rank_run)
    t = m["totals"]
    assert t["in"] == len(docs) == t["out"] and t["filtered"] == {}
    extra = m["extra"]
    assert extra["docs"] == len(docs) and extra["docs_without_shingles"] == 1
    assert extra["clusters"] >= len(clusters)
    assert sum(extra["cluster_size_histogram"].values()) == extra["clusters"]
    labelled = sum(1 for d in kept_docs(two_rank_run) if d.dup_of)
    assert labelled == extra["docs_in_clusters"] - extra["clusters"]
    assert extra["alarms"] == []


def test_same_outputs_on_1_2_and_4_ranks(corpus, two_rank_run, tmp_path):
    ref = output_digests(two_rank_run)
    for ranks in (1, 4):
        run_stage("minhash_dedup", ranks, corpus[0], tmp_path / f"r{ranks}")
        assert output_digests(tmp_path / f"r{ranks}") == ref


def test_hot_buckets_split_oversized_components_verified_and_alarms_raised(corpus, two_rank_run, tmp_path):
    """With a tiny bucket cap and verification threshold the planted clusters still come out the same."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[minhash_dedup]\nbucket_cap = 2\nverify_components_above = 2\nalarm_cluster_size = 2\n"
        "alarm_clustered_fraction = 0.001\n"
    )
    out = tmp_path / "out"
    run_stage("minhash_dedup", 3, corpus[0], out, cfg)
    extra = manifest(out)["extra"]
    assert extra["hot_buckets"] > 0 and extra["verified_components"] > 0
    assert len(extra["alarms"]) == 2
    planted = {d.url for members in corpus[2].values() for d in members}
    got = {d.url: d.dup_of for d in kept_docs(out) if d.url in planted}
    ref = {d.url: d.dup_of for d in kept_docs(two_rank_run) if d.url in planted}
    assert got == ref and any(ref.values())


def test_rerun_after_lost_parts_and_a_damaged_signature_part_is_byte_identical(
    corpus, two_rank_run, tmp_path
):
    """Parts lost (markers gone) are redone, and a signature part whose file was damaged after its marker
    was written is computed again instead of trusted or fatal; nothing else is redone."""
    out = tmp_path / "out"
    shutil.copytree(two_rank_run, out)
    phase = out / "work" / "phase"
    (out / "manifest.json").unlink()
    (phase / "complete.json").unlink()
    for marker in sorted((phase / "decisions").glob("*.done.json"))[:2]:
        marker.unlink()
    for marker in sorted((phase / "buckets").glob("*.done.json"))[:1]:
        marker.unlink()
    damaged = sorted((phase / "signatures").glob("*.sigs.npy"))[0]
    damaged.write_bytes(damaged.read_bytes()[:-100])  # torn: shorter than its marker says
    again = run_stage("minhash_dedup", 2, corpus[0], out)
    assert "0 shards processed" in again.stderr, "same decisions: no shard needed redoing"
    redone = last_run(out)
    assert redone["signatures"] == {"parts_done_before": 4, "parts_done_now": 1}
    assert redone["buckets"]["parts_done_now"] == 1 and redone["decisions"]["parts_done_now"] == 2
    assert redone["clusters"]["parts_done_now"] == 0
    assert output_digests(out) == output_digests(two_rank_run)
    digest = json.loads((phase / "complete.json").read_text())["digest"]
    assert digest == json.loads((two_rank_run / "work" / "phase" / "complete.json").read_text())["digest"]


#: (step, signal, rank): kill -9 in the middle of two steps (a map over shards, an exchange), SIGUSR1 in
#: the middle of a third (the exchange whose senders are the ranks' in-memory component labels)
INTERRUPTIONS = [
    ("signatures", "KILL", 1),
    ("clusters", "KILL", 0),
    ("labels", "USR1", 1),
]


@pytest.mark.parametrize(("step", "sig", "rank"), INTERRUPTIONS)
def test_an_interrupted_global_phase_resumes_from_its_completed_parts(
    step, sig, rank, corpus, two_rank_run, tmp_path, monkeypatch
):
    assert_resumes_after_interruption(
        "minhash_dedup",
        step,
        sig,
        rank,
        corpus[0],
        tmp_path / "out",
        output_digests(two_rank_run),
        monkeypatch,
    )


def test_a_kill_during_the_component_rounds_resumes_them_with_the_same_labels(
    corpus, two_rank_run, tmp_path, monkeypatch
):
    """kill -9 of rank 1 once round 1 of the union-find rounds is committed: the rerun resumes after
    it (the contraction and round 1 are not redone) and writes the bytes of an uninterrupted run."""
    out = tmp_path / "out"
    monkeypatch.setenv(FAULT_ENV, "minhash_dedup/labels.rounds:1:KILL:1")
    killed = run_stage("minhash_dedup", 2, corpus[0], out, check=False)
    assert killed.returncode != 0 and not (out / "manifest.json").exists()
    rounds = out / "work" / "phase" / "labels.rounds"
    assert json.loads((rounds / "round.json").read_text())["round"] == 1
    monkeypatch.delenv(FAULT_ENV)
    again = run_stage("minhash_dedup", 2, corpus[0], out)
    assert "resumed after round 1" in again.stderr
    assert last_run(out)["labels.rounds"]["rounds_done_before"] == 2  # rounds 0 (contraction) and 1
    assert last_run(out)["buckets"]["parts_done_now"] == 0
    assert output_digests(out) == output_digests(two_rank_run)
    assert not rounds.exists(), "the rounds are removed once the labels are written"
