"""`corpus build` on the bundled sample: the whole pipeline, end to end, on real MPI ranks."""

from __future__ import annotations

import json
import re
import shutil
import statistics

import pytest

from corpus.model.manifest import read_snapshot_manifest
from tests.conftest import SAMPLE, run_corpus

pytestmark = pytest.mark.slow

SNAPSHOT_LINE = re.compile(r"^snapshot_id sha256:[0-9a-f]{64}$")


def sample_inputs(root=SAMPLE):
    return [str(p) for p in sorted(root.iterdir()) if p.is_dir()]


def build(out, ranks, *extra, inputs=None):
    proc = run_corpus(
        "build", "--input", *(inputs or sample_inputs()), "--out", str(out), "--ranks", str(ranks), *extra
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert SNAPSHOT_LINE.match(last), last
    return last.split()[1], proc


@pytest.fixture(scope="module")
def two_rank_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("build") / "b2"
    snapshot_id, proc = build(out, 2)
    (out.parent / "build.log").write_text(proc.stderr)
    return out, snapshot_id


def test_the_build_log_says_each_stage_n_of_9_and_what_it_kept(two_rank_build):
    out, _ = two_rank_build
    log = (out.parent / "build.log").read_text().splitlines()
    started = [ln for ln in log if re.fullmatch(r"corpus build: stage \d/9 \w+ on 2 rank\(s\)", ln)]
    done = [ln for ln in log if re.match(r"corpus build: stage \d/9 \w+ done: [\d,]+ documents in", ln)]
    assert len(started) == len(done) == 9
    ingest = json.loads((out / "stages" / "ingest" / "manifest.json").read_text())["totals"]
    assert f"stage 1/9 ingest done: {ingest['in']:,} documents in, {ingest['out']:,} out" in done[0]


def test_same_snapshot_id_on_any_rank_count_and_input_location(two_rank_build, tmp_path):
    _, id2 = two_rank_build
    moved = tmp_path / "elsewhere"
    shutil.copytree(SAMPLE, moved)
    id1, _ = build(tmp_path / "b1", 1, inputs=sample_inputs(moved))
    id3, _ = build(tmp_path / "b3", 3)
    assert id1 == id2 == id3


def test_every_stage_reconciles_in_the_report(two_rank_build):
    out, _ = two_rank_build
    counts = json.loads(run_corpus("report", str(out), "--json").stdout)
    from corpus.model.stages import PIPELINE

    assert list(counts) == list(PIPELINE)
    previous_out = None
    for stage, c in counts.items():
        assert c["in"] == c["out"] + sum(c["filtered"].values()) + sum(c["quarantined"].values()), stage
        if previous_out is not None:
            assert c["in"] == previous_out, f"{stage} did not receive what the stage before it kept"
        previous_out = c["out"]
    assert counts["ingest"]["quarantined"], "the sample's malformed WARC must be quarantined with a reason"
    assert counts["exact_dedup"]["filtered"].get("exact_duplicate", 0) > 0
    assert counts["minhash_dedup"]["filtered"] == {} and counts["decontaminate"]["filtered"] == {}, (
        "near-duplicates and contaminated documents stay candidates"
    )


def test_the_card_measures_each_clusters_representative_against_the_clusters_median(two_rank_build, tmp_path):
    out, _ = two_rank_build
    run_corpus("report", str(out), "--html", str(tmp_path / "card.html"))
    r = json.loads((tmp_path / "card.json").read_text())["representatives"]
    rows = json.loads(
        run_corpus(
            "query",
            str(out),
            "SELECT dup_cluster_id AS c, tokens, selected FROM docs WHERE dup_cluster_id <> ''",
            "--json",
        ).stdout
    )
    clusters: dict[str, list] = {}
    for row in rows:
        clusters.setdefault(row["c"], []).append(row)
    judged = {c: m for c, m in clusters.items() if len(m) > 1 and sum(x["selected"] for x in m) == 1}
    longer = {
        c
        for c, m in judged.items()
        if next(x["tokens"] for x in m if x["selected"]) > 1.2 * statistics.median(x["tokens"] for x in m)
    }
    assert judged and (r["clusters"], r["longer"]) == (len(judged), len(longer))
    assert {s["cluster_id"] for s in r["sample"]} <= longer


def test_the_card_shows_the_extract_gate_and_each_page_it_kept_from_the_second_pass(two_rank_build, tmp_path):
    out, _ = two_rank_build
    run_corpus("report", str(out), "--html", str(tmp_path / "card.html"))
    gate = json.loads((tmp_path / "card.json").read_text())["gate"]
    assert (gate["extractor"], gate["gate"]) == ("two_pass", "words >= 20")
    extract = json.loads((out / "stages" / "extract" / "manifest.json").read_text())
    filtered = {r: n for r, n in extract["totals"]["filtered"].items() if r.startswith("gate_")}
    assert filtered, "the sample has pages of fewer than 20 words"
    by_reason: dict[str, int] = {}
    for _source, _lang, reason, n in gate["rows"]:
        by_reason[reason] = by_reason.get(reason, 0) + n
    assert by_reason == filtered
    assert {"en", "ja"} <= {lang for _, lang, _, _ in gate["rows"]}  # each page in its first-pass language
    assert "gate: words &gt;= 20" in (tmp_path / "card.html").read_text()


def test_the_default_version_is_the_configs_policy_one_representative_per_cluster_and_no_contamination(
    two_rank_build, tmp_path
):
    out, snapshot_id = two_rank_build
    same = run_corpus("version", str(out), "--select-inline", "[policy]", "--out", str(tmp_path / "v"))
    assert same.stdout.strip().splitlines()[-1] == f"snapshot_id {snapshot_id}"
    (members,) = corpus_json("query", str(out), "SELECT count(*) AS n FROM docs WHERE dup_of <> ''", "--json")
    assert members["n"] > 0, "the sample's near-duplicates are stored, labelled"
    twice = corpus_json(
        "query",
        str(out),
        "SELECT dup_cluster_id FROM docs WHERE dup_cluster_id <> '' GROUP BY 1 HAVING sum(selected::int) > 1",
        "--json",
    )
    assert twice == []
    (stored,) = corpus_json(
        "query", str(out), "SELECT count(*) AS n, sum(selected::int) AS kept FROM docs", "--json"
    )
    assert 0 < stored["kept"] < stored["n"]


def test_a_rebuild_does_no_work_and_gives_the_same_id(two_rank_build):
    out, snapshot_id = two_rank_build
    again, proc = build(out, 2)
    assert again == snapshot_id
    from corpus.model.stages import PIPELINE

    assert proc.stderr.count("nothing to do") == len(PIPELINE)


def test_a_new_seed_gives_a_new_snapshot(two_rank_build, tmp_path):
    out, snapshot_id = two_rank_build
    shutil.copytree(out, tmp_path / "b", symlinks=True)
    reseeded, _ = build(tmp_path / "b", 2, "--seed", "1")
    assert reseeded != snapshot_id


# --- versions of the build (issue 12): decisions made from the metadata table, no stage runs ----------


def corpus_json(*args):
    return json.loads(run_corpus(*args).stdout)


def stage_state(out):
    """Every stage manifest's bytes and mtime: a version must touch neither."""
    return {
        p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted((out / "stages").glob("*/manifest.json"))
    }


def test_the_metadata_table_has_one_row_per_stored_document(two_rank_build):
    out, _ = two_rank_build
    shards = read_snapshot_manifest(out / "candidates").shards
    rows = corpus_json(
        "query",
        str(out),
        "SELECT shard, count(*) AS docs, sum(tokens) AS tokens FROM docs GROUP BY shard ORDER BY shard",
        "--json",
    )
    expect = sorted(
        (
            {"shard": s.path.split("/")[-1].removesuffix(".bin"), "docs": s.docs, "tokens": s.tokens}
            for s in shards
        ),
        key=lambda r: r["shard"],
    )
    assert rows == expect
    langs = corpus_json("query", str(out), "SELECT lang, count(*) AS n FROM docs GROUP BY lang", "--json")
    assert len(langs) > 5 and sum(r["n"] for r in langs) == sum(s.docs for s in shards)


def test_a_threshold_change_is_a_new_version_without_running_any_stage(two_rank_build, tmp_path):
    out, snapshot_id = two_rank_build
    before = stage_state(out)
    threshold = 'min_scores = { quality = 0.2 }\nnear_duplicates = "all"'  # the threshold alone decides
    proc = run_corpus("version", str(out), "--select-inline", threshold, "--out", str(tmp_path / "v"))
    last = proc.stdout.strip().splitlines()[-1]
    assert SNAPSHOT_LINE.match(last) and last.split()[1] != snapshot_id
    assert stage_state(out) == before
    kept = corpus_json(
        "query",
        str(tmp_path / "v"),
        "SELECT min(quality) AS q, count(*) AS n FROM docs WHERE selected",
        "--json",
    )[0]
    dropped = corpus_json(
        "query",
        str(tmp_path / "v"),
        "SELECT max(quality) AS q FROM docs WHERE NOT selected AND quality IS NOT NULL",
        "--json",
    )[0]
    assert kept["q"] >= 0.2 and dropped["q"] < 0.2 and kept["n"] > 0
    again = run_corpus("version", str(out), "--select-inline", threshold, "--out", str(tmp_path / "v-again"))
    assert again.stdout.strip().splitlines()[-1] == last, "the same selection of the same build: the same id"


def test_excluding_a_host_removes_exactly_its_documents(two_rank_build, tmp_path):
    out, _ = two_rank_build
    # the largest host none of whose documents has an exact copy elsewhere (that case: the test below)
    (host,) = corpus_json(
        "query",
        str(out),
        "SELECT host FROM docs d GROUP BY host HAVING NOT bool_or(EXISTS "
        "(SELECT 1 FROM copies c WHERE c.doc_id = d.exact_keeper_id AND c.host <> d.host)) "
        "ORDER BY count(*) DESC, host LIMIT 1",
        "--json",
    )
    (tmp_path / "optout.txt").write_text(f"# asked on 2026-11-30\n{host['host']}\n")
    (tmp_path / "sel.toml").write_text('exclude_hosts_file = "optout.txt"\nnear_duplicates = "all"\n')
    run_corpus("version", str(out), "--select", str(tmp_path / "sel.toml"), "--out", str(tmp_path / "v"))
    rows = corpus_json(
        "query",
        str(tmp_path / "v"),
        "SELECT host = ? AS excluded, selected, count(*) AS n FROM docs GROUP BY ALL ORDER BY ALL".replace(
            "?", f"'{host['host']}'"
        ),
        "--json",
    )
    assert {(r["excluded"], r["selected"]) for r in rows} == {(True, False), (False, True)}
    diff = run_corpus("diff", str(out), str(tmp_path / "v"), check=False)
    assert diff.returncode == 1 and host["host"] in diff.stdout


def test_an_exact_copy_comes_back_from_another_host_when_its_keepers_host_is_excluded(
    two_rank_build, tmp_path
):
    out, _ = two_rank_build
    (keeper,) = corpus_json(
        "query",
        str(out),
        "SELECT d.host FROM docs d JOIN copies c ON c.doc_id = d.exact_keeper_id "
        "WHERE c.host <> d.host GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1",
        "--json",
    )
    host = keeper["host"]
    run_corpus(
        "version", str(out), "--select-inline", f'exclude_hosts = ["{host}"]', "--out", str(tmp_path / "v")
    )
    rows = corpus_json(
        "query",
        str(tmp_path / "v"),
        "SELECT selected, EXISTS (SELECT 1 FROM copies c WHERE "
        "c.doc_id = d.exact_keeper_id AND c.host <> d.host) AS elsewhere, count(*) AS n FROM docs d "
        f"WHERE d.host = '{host}' GROUP BY ALL ORDER BY ALL",
        "--json",
    )
    assert {(r["selected"], r["elsewhere"]) for r in rows} == {(False, False), (True, True)}, rows


def test_the_trace_of_a_versions_loader_view_is_what_the_loader_reads(two_rank_build, tmp_path):
    import numpy as np

    from cli.commands.trace import describe_source
    from corpus.snapshot.lookup import Snapshot
    from loader.dataset import SnapshotLoader
    from loader.trace import loader_at
    from loader.versions import LoaderVersion

    out, _ = two_rank_build
    run_corpus(
        "version", str(out), "--select-inline", "min_scores = { quality = 0.1 }", "--out", str(tmp_path / "v")
    )
    version = LoaderVersion.open(tmp_path / "v")
    snap = Snapshot(version.root)
    rng = np.random.default_rng(3)
    for rank, world, step in ((0, 1, 0), (1, 2, 4)):
        loader = SnapshotLoader(
            tmp_path / "v", None, seed=2, seq_len=128, batch_size=2, dp_rank=rank, dp_world=world
        )
        loader.seek(step)
        tokens = loader.next_batch().tokens.numpy().reshape(-1)
        traced = loader_at(
            tmp_path / "v", step, rank, world, seed=2, seq_len=128, batch_size=2
        ).traced_batch()
        for p in rng.integers(256, size=12):
            src = traced.source(int(p))
            t = describe_source(snap, src)
            assert version.selected(src.shard)[src.doc]
            assert tokens[p] == (
                snap.manifest.tokenizer["eos_id"]
                if src.appended_eos
                else snap.trace(src.shard, t["offset"])["token_id"]
            )


def test_a_selection_that_empties_a_bucket_or_names_an_unknown_column_writes_nothing(
    two_rank_build, tmp_path
):
    out, _ = two_rank_build
    empty = run_corpus(
        "version",
        str(out),
        "--select-inline",
        'exclude_sources = ["perl-doc"]',
        "--out",
        str(tmp_path / "v"),
        check=False,
    )
    assert empty.returncode == 2 and "keeps no document of bucket(s) curated" in empty.stderr
    assert not (tmp_path / "v").exists()
    dry = run_corpus("version", str(out), "--select-inline", 'exclude_sources = ["perl-doc"]', "--dry-run")
    assert "warning: the selection keeps no document of bucket curated" in dry.stdout
    bad = run_corpus(
        "version",
        str(out),
        "--select-inline",
        "min_scores = { qualty = 0.1 }",
        "--out",
        str(tmp_path / "v"),
        check=False,
    )
    assert (
        bad.returncode == 2 and "unknown column(s) qualty; known:" in bad.stderr and "quality" in bad.stderr
    )
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "v").exists()


def test_a_tombstoned_shard_shows_in_the_diff_and_on_the_data_card(two_rank_build, tmp_path):
    out, _ = two_rank_build
    shard = json.loads((out / "snapshot" / "shards.jsonl").read_text().splitlines()[0])["name"]
    run_corpus(
        "tombstone",
        str(out),
        "--shard",
        shard,
        "--reason",
        "takedown request 12",
        "--out",
        str(tmp_path / "v"),
    )
    diff = run_corpus("diff", str(out), str(tmp_path / "v"), check=False)
    assert diff.returncode == 1 and f"tombstone added: {shard} (takedown request 12)" in diff.stdout
    run_corpus("report", str(tmp_path / "v"), "--html", str(tmp_path / "card.html"))
    card = json.loads((tmp_path / "card.json").read_text())
    (t,) = card["build"]["version"]["tombstones"]
    assert (t["name"], t["reason"]) == (shard, "takedown request 12") and t["date"]
    assert f"tombstone <code>{shard}</code>: takedown request 12" in (tmp_path / "card.html").read_text()


# --- the data card of the sample's default version (issue 31): the selection, rule by rule -----------


def card_image(html: str, alt: str) -> str:
    """The SVG behind the card's image ``alt``."""
    import base64

    found = re.search(rf'<img src="data:image/svg\+xml;base64,([^"]+)" alt="{re.escape(alt)}">', html)
    assert found, f"no image {alt!r} on the card"
    return base64.b64decode(found.group(1)).decode()


def test_corpus_build_writes_the_card_of_its_default_version_rule_by_rule(two_rank_build):
    out, snapshot_id = two_rank_build
    card = json.loads((out / "report" / "card.json").read_text())
    html = (out / "report" / "card.html").read_text()
    assert card["build"]["snapshot_id"] == snapshot_id
    (stored,) = corpus_json(
        "query", str(out), "SELECT count(*) AS n, sum(selected::int) AS kept FROM docs", "--json"
    )
    funnel = card["version_funnel"]
    assert (
        (funnel["stored"], funnel["selected"])
        == (stored["n"], stored["kept"])
        == (
            card["build"]["version"]["stored_docs"],
            card["build"]["version"]["selected_docs"],
        )
    )
    assert (
        sum(s["removed"] for s in funnel["steps"]) == stored["n"] - stored["kept"]
        and funnel["unexplained"] == 0
    )
    manifest = json.loads((out / "snapshot" / "manifest.json").read_text())
    policy = {s["reason"]: s["removed"] for s in funnel["steps"] if s["rule"] == "policy"}
    assert policy == manifest["policy_reasons"], "the policy first, check by check, as the version counted it"
    assert [s["left"] for s in funnel["steps"]][-1] == stored["kept"]
    by_source = corpus_json(
        "query",
        str(out),
        "SELECT source, count(*) AS n, sum(selected::int) AS kept FROM docs GROUP BY 1",
        "--json",
    )
    assert {r["source"]: (r["n"], r["kept"]) for r in by_source} == {
        s: (g["stored"], g["selected"]) for s, g in funnel["by_source"].items()
    }
    assert sum(g["selected"] for g in funnel["by_lang"].values()) == stored["kept"]
    assert f"<b>{stored['kept']:,}</b><span>documents selected (version)</span>" in html
    assert 'href="#the-version-s-selection"' in html and '<h2 id="the-version-s-selection">' in html


def test_the_cards_histograms_draw_the_versions_thresholds_over_candidates_and_selected(two_rank_build):
    out, _ = two_rank_build
    card = json.loads((out / "report" / "card.json").read_text())
    minimum = json.loads((out / "snapshot" / "manifest.json").read_text())["selection"]["policy"][
        "min_alpha_word_fraction"
    ]
    (alpha,) = [
        t for t in card["thresholds"]["alpha_word_fraction"] if t["rule"] == "policy/gopher_alpha_words"
    ]
    assert (alpha["bound"], alpha["value"], alpha["drawn"]) == ("min", minimum, True)
    pops = card["distributions"]
    assert pops["selected"]["docs"] == card["version_funnel"]["selected"] < pops["candidates"]["docs"]
    assert (
        pops["selected"]["scores"]["alpha_word_fraction"]["count"]
        < pops["candidates"]["scores"]["alpha_word_fraction"]["count"]
    )
    svg = card_image((out / "report" / "card.html").read_text(), "alpha_word_fraction")
    assert 'id="threshold-0"' in svg


def test_the_exact_dedup_table_tells_the_keeper_from_its_dropped_copy(two_rank_build):
    out, _ = two_rank_build
    card = json.loads((out / "report" / "card.json").read_text())
    html = (out / "report" / "card.html").read_text()
    largest = card["dedup"]["exact_dedup"]["largest"]
    assert largest and all(c["keeper_url"] for c in largest)
    # the sample's mirrors: one page at two urls, the same text and source, so the same doc_id
    same_id = [c for c in largest if c["keeper"] == c["copy_doc_id"] and c["keeper_url"] != c["url"]]
    assert same_id and all(c["keeper_url"] in html and c["url"] in html for c in same_id)


def test_the_card_of_a_quantile_threshold_version_shows_each_languages_cutoff(
    two_rank_build, tmp_path, artifacts_dir
):
    from tests.report.browser import screenshots

    out, _ = two_rank_build
    top = '[policy]\n[[top_fraction]]\nscore = "quality"\nkeep = 0.5'
    run_corpus("version", str(out), "--select-inline", top, "--out", str(tmp_path / "v"))
    built_card = (out / "report" / "card.html").read_bytes()
    printed = run_corpus("report", str(tmp_path / "v")).stdout.splitlines()
    version_id = json.loads((tmp_path / "v" / "manifest.json").read_text())["snapshot_id"]
    html = out / "report" / version_id.removeprefix("sha256:")[:16] / "card.html"
    assert f"report html {html}" in printed, "a version's card goes beside the build's, under its id"
    assert (out / "report" / "card.html").read_bytes() == built_card
    card = json.loads(html.with_suffix(".json").read_text())
    funnel = card["version_funnel"]
    (selected,) = corpus_json(
        "query", str(tmp_path / "v"), "SELECT sum(selected::int) AS n FROM docs", "--json"
    )
    assert funnel["selected"] == selected["n"] and funnel["unexplained"] == 0
    assert sum(s["removed"] for s in funnel["steps"]) == funnel["stored"] - selected["n"]
    assert next(s for s in funnel["steps"] if s["key"] == "top_fraction/quality")["removed"] > 0
    cutoffs = {
        t["lang"]: t["value"] for t in card["thresholds"]["quality"] if t["rule"] == "top_fraction/quality"
    }
    lowest = corpus_json(
        "query",
        str(tmp_path / "v"),
        "SELECT lang, min(quality) AS q FROM docs WHERE selected GROUP BY 1",
        "--json",
    )
    # each language's cutoff (6 significant digits on the card) is at most what it selects
    assert cutoffs and all(r["q"] >= cutoffs[r["lang"] or "und"] * (1 - 1e-6) for r in lowest)
    [(errors, widths)] = screenshots({"report-card-quantile-version": html}, artifacts_dir).values()
    assert errors == [] and widths and all(w > 100 for w in widths)
