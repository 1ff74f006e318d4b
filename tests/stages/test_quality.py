"""The quality classifier: `corpus train-quality` trains it reproducibly; annotate records its hash."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest

from corpus.digest import file_sha256
from corpus.filters.quality import DEFAULT_MODEL, QualityModel, is_low_quality_web
from tests.conftest import SAMPLE, run_corpus
from tests.stages.chain import PERL_DOC_CURATED, docs, manifest, run_chain, run_stage
from tests.stages.warc_fixtures import real_pages, warc_bytes


@pytest.fixture(scope="module")
def extracted(tmp_path_factory, shared_data):
    d = tmp_path_factory.mktemp("quality")
    (d / "in").mkdir()
    pages = real_pages(shared_data, 50, host_prefix="harden-doc", part=1)  # many short index pages: negatives
    (d / "in" / "web.warc.gz").write_bytes(
        warc_bytes(pages + real_pages(shared_data, 30, host_prefix="install", part=1))
    )
    shutil.copyfile(SAMPLE / "curated" / "perl-doc.jsonl.gz", d / "in" / "perl-doc.jsonl.gz")
    (d / "sources.toml").write_text(PERL_DOC_CURATED)
    run_chain(2, [d / "in"], d / "b", d / "sources.toml", upto="extract")
    return d


def train(extracted, out):
    proc = run_corpus("train-quality", "--from", str(extracted / "b" / "extract"), "--out", str(out))
    return proc.stdout.strip().splitlines()[-1].removeprefix("model_hash ")


@pytest.fixture(scope="module")
def trained(extracted):
    path = extracted / "m1.ftz"
    return path, train(extracted, path)


def test_training_is_reproducible_and_the_model_separates_the_classes(extracted, trained, tmp_path):
    path, h1 = trained
    h2 = train(extracted, tmp_path / "m2.ftz")
    assert h1 == h2 == "sha256:" + file_sha256(path)
    record = json.loads(path.with_name(path.name + ".json").read_text())
    assert record["sha256"] == h1 and record["examples"]["per_class"] > 5

    model = QualityModel(path)
    texts = list(docs(extracted / "b" / "extract"))
    curated = [model.score(d.text) for d in texts if d.source_tier == "curated"]
    low = [model.score(d.text) for d in texts if d.source_tier == "web" and is_low_quality_web(d.text)]
    assert statistics.mean(curated) > 0.6 > 0.4 > statistics.mean(low)


def test_annotate_records_the_configured_models_hash(extracted, trained, tmp_path):
    path, h = trained
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[annotate]\nquality_model = "{path}"\n')
    run_stage("annotate", 1, [extracted / "b" / "extract"], tmp_path / "annotate", cfg)
    assert manifest(tmp_path / "annotate")["extra"]["quality_model_hash"] == h

    cfg.write_text(f'[annotate]\nquality_model = "{path}"\nquality_model_hash = "sha256:{"0" * 64}"\n')
    proc = run_stage("annotate", 1, [extracted / "b" / "extract"], tmp_path / "pinned", cfg, check=False)
    assert proc.returncode != 0 and "quality_model_hash" in proc.stderr


def test_training_needs_both_classes(tmp_path):
    (tmp_path / "sources.toml").write_text(PERL_DOC_CURATED)
    run_chain(1, [SAMPLE / "curated"], tmp_path / "b", tmp_path / "sources.toml", upto="extract")
    proc = run_corpus(
        "train-quality",
        "--from",
        str(tmp_path / "b" / "extract"),
        "--out",
        str(tmp_path / "m.ftz"),
        check=False,
    )
    assert proc.returncode == 2 and "0 negative examples" in proc.stderr


def test_the_shipped_default_model_is_small_and_matches_its_record():
    record = json.loads(DEFAULT_MODEL.with_name(DEFAULT_MODEL.name + ".json").read_text())
    assert DEFAULT_MODEL.stat().st_size < 2_000_000
    assert record["sha256"] == "sha256:" + file_sha256(DEFAULT_MODEL)
    assert QualityModel(DEFAULT_MODEL).score("=head1 NAME\n\nperlfunc - Perl builtin functions") > 0.5
