"""The eval holdout does not leak: carved by the normalized URL, stored extracted and scrubbed, and a
held-out page copied to another URL (exactly, or lightly edited) never reaches training."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq

from corpus.decont.holdout import (
    EXACT_SCORE,
    NEAR_SCORE,
    in_holdout,
    normalize_url,
)
from corpus.model.annotations import HOLDOUT_EXACT_KEY
from corpus.select.policy import HOLDOUT_CHECKS, PolicyConfig, decide
from tests.stages.chain import docs, manifest, reconciles, run_stage
from tests.stages.test_policy import GOOD_WEB, random_subjects, row_reasons
from tests.stages.warc_fixtures import real_pages, warc_bytes

SAME = [
    ("https://docs.example.org/a/b.html", "https://docs.example.org/a/b.html"),
    ("HTTPS://Docs.Example.ORG/a/b.html", "https://docs.example.org/a/b.html"),
    ("http://docs.example.org/a/b.html", "https://docs.example.org/a/b.html"),
    ("https://docs.example.org:443/a/b.html", "https://docs.example.org/a/b.html"),
    ("http://docs.example.org:80/a/b.html", "https://docs.example.org/a/b.html"),
    ("https://docs.example.org./a/b.html#section-2", "https://docs.example.org/a/b.html"),
    ("https://user:pw@docs.example.org/a/b.html", "https://docs.example.org/a/b.html"),
    ("https://docs.example.org/a/", "https://docs.example.org/a"),
    ("https://docs.example.org", "https://docs.example.org/"),
    ("https://docs.example.org/?", "https://docs.example.org/"),
    (
        "https://docs.example.org/a?utm_source=x&utm_medium=y&gclid=1&fbclid=2&FBCLID=3",
        "https://docs.example.org/a",
    ),
    ("https://docs.example.org/a?b=2&a=1&utm_campaign=z#t", "https://docs.example.org/a?a=1&b=2"),
    ("https://docs.example.org/a?q=a+b", "https://docs.example.org/a?q=a+b"),
    ("https://docs.example.org/a?q=a%20b", "https://docs.example.org/a?q=a+b"),
    ("http://[2001:DB8::1]:80/x/", "https://[2001:db8::1]/x"),
]
DIFFERENT = [
    ("https://docs.example.org/A", "https://docs.example.org/a"),  # paths are case-sensitive
    ("https://docs.example.org:8443/a", "https://docs.example.org/a"),
    ("https://docs.example.org/a?page=2", "https://docs.example.org/a?page=3"),
    ("https://www.docs.example.org/a", "https://docs.example.org/a"),
]


def test_urls_are_normalized_before_carving():
    for raw, normal in SAME:
        assert normalize_url(raw) == normal, raw
        assert normalize_url(normal) == normal, "normalizing is idempotent"
    for a, b in DIFFERENT:
        assert normalize_url(a) != normalize_url(b), (a, b)
    assert normalize_url("https://x.example:notaport/a") == "https://x.example:notaport/a"
    assert normalize_url("curated://perl-doc/perl-doc.jsonl.gz#12") == "curated://perl-doc/perl-doc.jsonl.gz"
    # every spelling of a held-out page is held out with it
    for modulus in (2, 3, 5):
        for raw, normal in SAME:
            assert in_holdout(raw, "web", modulus, ["web"]) == in_holdout(normal, "web", modulus, ["web"])


def test_a_copy_of_a_held_out_page_fails_the_policy_first_in_every_tier():
    cfg = PolicyConfig()
    assert {c.score for c in HOLDOUT_CHECKS} == {EXACT_SCORE, NEAR_SCORE}
    for tier in ("web", "curated", "code"):
        for score, reason in (
            (EXACT_SCORE, "holdout_exact_duplicate"),
            (NEAR_SCORE, "holdout_near_duplicate"),
        ):
            subject = SimpleNamespace(
                lang="en",
                lang_confidence=0.1,
                source_tier=tier,
                scores={**GOOD_WEB, "quality": 0.0, score: 0.9},
            )
            assert decide(subject, cfg)[0] == reason, "before lang_confidence and quality"
    # decide_rows names the same reasons as decide on rows that carry holdout scores at times
    rng = np.random.default_rng(3)
    subjects = random_subjects(rng, 2_000)
    for d in subjects:
        r = rng.random()
        if r < 0.2:
            d.scores[str(rng.choice([EXACT_SCORE, NEAR_SCORE]))] = float(rng.choice([0.0, 0.7, 1.0, np.nan]))
    want = [decide(d, cfg)[0] for d in subjects]
    assert row_reasons(subjects, cfg) == want
    assert {"holdout_exact_duplicate", "holdout_near_duplicate"} <= set(want)


MODULUS = 7
EMAIL = b"docs-team@python.example.com"


def leaky_inputs(shared_data: Path, d: Path) -> tuple[str, bytes, list[str]]:
    """A real page the holdout carves out (with an e-mail address planted in its text), and in
    another file of the same input two copies of it at other URLs: exact, and lightly edited."""
    pages = real_pages(shared_data, 40, host_prefix="python", part=2)
    url, page = next((u, p) for u, p in pages if in_holdout(u, "web", MODULUS, ["web"]) and len(p) > 8000)
    main = page.index(b">", page.index(b'role="main"')) + 1
    page = page[:main] + b"<p>Questions about this page: " + EMAIL + b"</p>" + page[main:]
    edited = page[:main] + page[main:].replace(b" the ", b" this ", 3)
    free = (f"https://mirror.example.net/copy-{i}.html" for i in range(100))
    copies = [u for u in free if not in_holdout(u, "web", MODULUS, ["web"])][:2]
    d.mkdir()
    (d / "crawl.warc.gz").write_bytes(warc_bytes([(url, page)]))
    (d / "mirror.warc.gz").write_bytes(warc_bytes(list(zip(copies, [page, edited], strict=True))))
    return url, page, copies


def test_a_held_out_page_copied_to_another_url_never_reaches_training(tmp_path, shared_data):
    """A whole build (2 ranks): the copies are candidates, tagged exact and near, and the default
    version selects neither (without the change one of them is selected: a cluster's representative);
    the stored holdout is extracted and scrubbed; the dedup stages give the same results on 1 rank."""
    from corpus.report.build_view import open_build
    from corpus.report.gather import holdout
    from tests.conftest import run_corpus

    url, page, (exact_url, edited_url) = leaky_inputs(shared_data, tmp_path / "in")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[ingest]\nholdout_modulus = {MODULUS}\n")
    b = tmp_path / "b"
    run_corpus(
        "build", "--input", str(tmp_path / "in"), "--out", str(b), "--ranks", "2", "--config", str(cfg)
    )
    stages = b / "stages"
    assert all(
        reconciles(manifest(stages / s)["totals"])
        for s in ("ingest", "extract", "exact_dedup", "minhash_dedup")
    )
    for stage, before in (("exact_dedup", "extract"), ("minhash_dedup", "line_dedup")):  # the same on 1 rank
        run_stage(stage, 1, [stages / before], tmp_path / "one" / stage, b / "build-config.json")
        # (inside a build minhash_dedup's global phase has one step more, its band index records)
        alone, inside = manifest(tmp_path / "one" / stage)["extra"], manifest(stages / stage)["extra"]
        assert {**alone, "prepare_digest": ""} == {**inside, "prepare_digest": ""}
        assert manifest(tmp_path / "one" / stage)["outputs"] == manifest(stages / stage)["outputs"]
    assert manifest(stages / "ingest")["totals"]["filtered"] == {"eval_holdout": 1}
    (raw,) = docs(stages / "ingest", "holdout")

    # the stored holdout: extracted text, scrubbed, with its raw digest and its pre-scrub exact key
    (held,) = docs(stages / "extract", "holdout")
    assert held.url == url and held.raw_digest == hashlib.sha256(page).hexdigest() == raw.raw_digest
    assert held.derived_from == raw.doc_id and held.content_type == "text/plain"
    assert "<EMAIL>" in held.text and EMAIL.decode() not in held.text and "<div" not in held.text
    assert HOLDOUT_EXACT_KEY.of(held) is not None

    # both copies are candidates, tagged; the default version selects neither
    rows = {
        r["url"]: r
        for p in sorted((b / "candidates" / "metadata").glob("*.parquet"))
        for r in pq.read_table(p).to_pylist()
    }
    exact, edited = rows[exact_url], rows[edited_url]
    assert exact[EXACT_SCORE] == 1.0 and exact[NEAR_SCORE] > 0.95
    assert edited[EXACT_SCORE] is None and 0.65 <= edited[NEAR_SCORE] < 1.0
    view = open_build(b)
    selected = {
        r["url"]: bool(s)
        for r, s in zip(
            pq.read_table(view.version.live_shards[0].metadata).to_pylist(),
            view.version.selected(view.version.live_shards[0]),
            strict=True,
        )
    }
    assert len(view.version.live_shards) == 1 and selected == {exact_url: False, edited_url: False}
    assert view.version.manifest["policy_reasons"] == {
        "holdout_exact_duplicate": 1,
        "holdout_near_duplicate": 1,
    }
    # ...which only the tags decide: without them each copy passes the default policy
    for r in (exact, edited):
        untagged = {k: v for k, v in r.items() if v is not None and k not in (EXACT_SCORE, NEAR_SCORE)}
        subject = SimpleNamespace(
            lang=r["lang"],
            lang_confidence=r["lang_confidence"],
            source_tier=r["tier"],
            scores={k: v for k, v in untagged.items() if isinstance(v, float)},
        )
        assert decide(subject, PolicyConfig())[0] is None

    # counted on the data card
    card = holdout(view)
    assert (card["held_out"], card["stored"], card["carving_version"]) == (1, 1, "2")
    assert {k: card["copies"][k] for k in ("exact", "near", "selected")} == {
        "exact": 1,
        "near": 1,
        "selected": 0,
    }


def test_a_delta_tags_its_copies_of_a_page_its_base_held_out(tmp_path, shared_data):
    """The held-out page in a base build, its two copies in a build against it: the delta's dedup stages
    read the base's stored holdout too, so the copies are tagged and not selected, as in one build."""
    from corpus.report.alarms import own_shards
    from corpus.report.build_view import open_build
    from tests.conftest import run_corpus

    url, _, (exact_url, edited_url) = leaky_inputs(shared_data, tmp_path / "in")
    kept = next(
        (u, p)
        for u, p in real_pages(shared_data, 40, host_prefix="python", part=2)
        if u != url and not in_holdout(u, "web", MODULUS, ["web"])
    )
    (tmp_path / "in" / "kept.warc.gz").write_bytes(warc_bytes([kept]))  # a base keeps a document
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[ingest]\nholdout_modulus = {MODULUS}\n")
    base, delta = tmp_path / "base", tmp_path / "delta"
    common = ("--ranks", "2", "--config", str(cfg))
    held = (str(tmp_path / "in" / f) for f in ("crawl.warc.gz", "kept.warc.gz"))
    run_corpus("build", "--input", *held, "--out", str(base), *common)
    run_corpus(
        "build",
        "--input",
        str(tmp_path / "in" / "mirror.warc.gz"),
        "--out",
        str(delta),
        "--base",
        str(base),
        *common,
    )
    assert manifest(base / "stages" / "ingest")["totals"]["filtered"] == {"eval_holdout": 1}
    assert manifest(delta / "stages" / "exact_dedup")["extra"]["holdout_docs"] == 1  # the base's page
    for table in ("eval_table", "eval_table-5gram"):  # the rule's and the fuzzy tier's, the base's linked
        grams = Path("stages", "decontaminate", "work", table, "grams.u8")
        assert (delta / grams).samefile(base / grams)
    view = open_build(delta)
    [own] = own_shards(view)  # the delta's own shard, after the base's
    rows = pq.read_table(own.metadata).to_pylist()
    tags = {r["url"]: (r[EXACT_SCORE], r[NEAR_SCORE] is not None and r[NEAR_SCORE] >= 0.65) for r in rows}
    assert tags == {exact_url: (1.0, True), edited_url: (None, True)}
    assert not view.version.selected(own).any()
