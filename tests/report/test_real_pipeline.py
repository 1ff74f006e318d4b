"""The report, the diff and the alarms on builds of the real pipeline (every installed stage), on a slice
of the bundled curated sample: what a person sees after ``corpus build``."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from corpus.report.alarms import check_build
from tests.conftest import ROOT, run_corpus
from tests.report.browser import screenshots

pytestmark = pytest.mark.slow

DOCS = 40


@pytest.fixture(scope="module")
def real_builds(tmp_path_factory) -> tuple[Path, Path]:
    """A: defaults. B: a copy of A rebuilt with a stricter language-ID confidence threshold: no stage
    runs again (the policy is a selection), B's default version selects fewer documents."""
    root = tmp_path_factory.mktemp("real")
    with gzip.open(ROOT / "sample" / "curated" / "perl-doc.jsonl.gz", "rt") as f:
        lines = [next(f) for _ in range(DOCS)]
    src = root / "perl-doc.jsonl"
    src.write_text("".join(lines))
    a, b = root / "a", root / "b"
    run_corpus("build", "--input", str(src), "--out", str(a), "--ranks", "2")
    shutil.copytree(a, b)
    cfg = root / "strict.toml"
    cfg.write_text("[policy]\nmin_lang_confidence = 0.95\n")
    run_corpus("build", "--input", str(src), "--out", str(b), "--ranks", "2", "--config", str(cfg))
    return a, b


def test_diff_of_a_real_threshold_change_names_it_and_what_the_default_version_selects(real_builds):
    a, b = real_builds
    proc = run_corpus("diff", str(a), str(b), "--json", check=False)
    assert proc.returncode == 1, proc.stderr
    d = json.loads(proc.stdout)
    assert d["config"] == [{"key": "build.policy.min_lang_confidence", "a": "(absent)", "b": 0.95}]
    assert d["stage_versions"] == [] and d["tokenizer"] == [] and d["counts"] == {}, "no stage ran again"
    assert all(s["only_a"] == s["only_b"] == 0 for s in d["shards"].values())
    version = {c["key"]: c for c in d["version"]}
    assert version["selected_docs"]["b"] < version["selected_docs"]["a"]
    rejects = version["policy_rejects.lang_confidence"]
    assert rejects["b"] > (0 if rejects["a"] == "(absent)" else rejects["a"])


def test_a_real_language_id_regression_trips_the_alarm(real_builds, tmp_path):
    a, b = real_builds
    hist = tmp_path / "yield-history.jsonl"
    assert check_build(a, hist) == []
    assert "policy/*lang*" in {x.metric for x in check_build(b, hist)}


def test_the_real_card_has_every_section_and_opens_in_chromium(real_builds, tmp_path, artifacts_dir):
    a, _ = real_builds
    out = tmp_path / "card.html"
    run_corpus("report", str(a), "--html", str(out))
    card = json.loads(out.with_suffix(".json").read_text())
    # 40 distinct manuals: no near-duplicate cluster to check (the sample build's are, tests/test_build_e2e.py),
    # and no repository read (the code section's own test: tests/code/test_licences.py)
    assert set(card["absent"]) == {"representatives", "code"}
    # the version's two populations, from its metadata table: every stored candidate, what it selects
    pops, version = card["distributions"], card["build"]["version"]
    assert (pops["candidates"]["stage"], pops["selected"]["stage"]) == ("stored", "version")
    assert {"quality", "word_count"} <= set(pops["candidates"]["scores"])
    assert (
        pops["candidates"]["lang_confidence"]["count"]
        == version["stored_docs"]
        == card["funnel"]["total"][-1]["out"]
    )
    assert pops["selected"]["docs"] == version["selected_docs"] == card["version_funnel"]["selected"]
    tokens = card["tokens"]
    assert (
        sum(tokens["by"]["lang"].values())
        == tokens["total"]
        == sum(b["tokens"] for b in tokens["by"]["bucket"].values())
    )
    # a default build checks whole benchmarks: every item of every bundled file, MMLU among them
    bundled = {
        f.name.removesuffix(".jsonl.gz"): sum(1 for line in gzip.open(f, "rt") if line.strip())
        for f in sorted((ROOT / "assets" / "evals").glob("*.jsonl.gz"))
    }
    checked = card["contamination"]["report"]["benchmarks"]
    assert {b: c["items"] for b, c in checked.items()} == bundled
    assert bundled["mmlu"] == 14042 and bundled["hellaswag"] == 10042 and bundled["gsm8k"] == 1319
    assert card["representatives"] is None and "<h3>Representatives</h3>" in out.read_text()
    [(errors, widths)] = screenshots({"report-card-real": out}, artifacts_dir).values()
    assert errors == [] and all(w > 100 for w in widths)
