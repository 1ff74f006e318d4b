"""The quality classifier: `corpus train-quality` trains it reproducibly from a build's tiers or from the
user's labelled JSONL and evaluates it on a held-out split; the shipped model's card numbers reproduce
from its held-out file; a language the model was not trained for gets no score; annotate records the
model's hash."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import statistics
from collections import Counter

import pytest

from corpus.formats.metadata import metadata_table
from corpus.model import Document
from corpus.model.digest import file_sha256
from corpus.signals.quality import (
    DEFAULT_MODEL,
    QualityModel,
    card_path,
    evaluate,
    held_out,
    heldout_path,
    is_low_quality_web,
    load_quality_model,
    read_heldout,
    read_labelled_jsonl,
    split_group,
)
from hpc_jobs.annotate.stage import annotate_document
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


#: the tiny build has a few dozen examples, English the only language with both classes (a small
#: quantization cutoff: quantizing is most of a tiny model's training time)
SMALL = ("--min-train", "5", "--min-test", "1", "--test-percent", "40", "--cutoff", "2000")


def train(extracted, out):
    proc = run_corpus("train-quality", "--from", str(extracted / "b" / "extract"), "--out", str(out), *SMALL)
    return proc.stdout.strip().splitlines()[-1].removeprefix("model_hash ")


@pytest.fixture(scope="module")
def trained(extracted):
    path = extracted / "m1.ftz"
    return path, train(extracted, path)


def test_training_is_reproducible_and_the_model_separates_the_classes(extracted, trained, tmp_path):
    path, h1 = trained
    h2 = train(extracted, tmp_path / "m2.ftz")
    assert h1 == h2 == QualityModel(path).hash
    assert file_sha256(path) == file_sha256(tmp_path / "m2.ftz")
    record = json.loads(card_path(path).read_text())
    assert record["sha256"] == "sha256:" + file_sha256(path) == h1
    assert "en" in record["languages"] and record["evaluation"]["by_lang"]["en"]["auc"] is not None

    model = QualityModel(path)
    texts = list(docs(extracted / "b" / "extract"))
    curated = [model.score(d.text) for d in texts if d.source_tier == "curated"]
    low = [
        model.score(d.text)
        for d in texts
        if d.source_tier == "web" and is_low_quality_web(d.text, d.lang or None)
    ]
    assert statistics.mean(curated) > 0.6 > 0.4 > statistics.mean(low)


def test_annotate_records_the_configured_models_hash(extracted, trained, tmp_path):
    path, h = trained
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[annotate]\nquality_model = "{path}"\n')
    run_stage("annotate", 1, [extracted / "b" / "extract"], tmp_path / "annotate", cfg)
    assert manifest(tmp_path / "annotate")["extra"]["quality_model_hash"] == h
    langs = set(QualityModel(path).languages)
    out = list(docs(tmp_path / "annotate"))
    assert all(("quality" in d.scores) == (d.lang in langs) for d in out)
    assert any(d.lang not in langs for d in out), "the build has a language the model was not trained for"

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


def _manual_parts(text: str) -> tuple[str, str]:
    """A Perl manual's prose (its paragraphs, POD commands left out) and its table of contents (its
    headings, numbered): a real hq text and a real lq text of the same document."""
    body = "\n\n".join(p for p in text.split("\n\n") if p.strip() and not p.startswith(("=", " ", "\t")))
    heads = [
        re.sub(r"[A-Z]<([^>]*)>", r"\1", ln.split(" ", 1)[1])
        for ln in text.splitlines()
        if ln.startswith("=head") and " " in ln
    ]
    return body, "\n".join(f"{i}. {h}" for i, h in enumerate(heads, 1))


def test_train_quality_on_the_users_labelled_jsonl(tmp_path, shared_data):
    """End to end on a tiny input: {"text", "label"} lines, plus a file of positives by source."""
    with gzip.open(shared_data / "curated" / "perl-doc.jsonl.gz", "rt") as f:
        manuals = [json.loads(line) for line in f][:60]
    labelled, positives = tmp_path / "labelled.jsonl", tmp_path / "positives.jsonl"
    with open(labelled, "w") as lab, open(positives, "w") as pos:
        for i, m in enumerate(manuals):
            body, toc = _manual_parts(m["text"])
            if len(body.split()) < 100 or toc.count("\n") < 4:
                continue
            url = m["url"]  # its split group: a manual's prose and its contents fall on the same side
            if i % 3:
                lab.write(json.dumps({"text": body, "label": "hq", "lang": "en", "url": url}) + "\n")
            else:
                pos.write(json.dumps({"text": body, "url": url}) + "\n")
            lab.write(json.dumps({"text": toc, "label": 0, "lang": "en", "url": url}) + "\n")
        lab.write(json.dumps({"text": "Ein Satz auf Deutsch.", "label": "hq", "lang": "de"}) + "\n")
    out = tmp_path / "m" / "user.ftz"
    proc = run_corpus(
        "train-quality",
        "--labelled",
        str(labelled),
        "--positive",
        str(positives),
        "--out",
        str(out),
        "--keep-heldout",
        "--min-train",
        "5",
        "--min-test",
        "2",
        "--cutoff",
        "2000",
    )
    card = json.loads(card_path(out).read_text())
    model = QualityModel(out)
    assert (
        proc.stdout.strip().splitlines()[-1] == f"model_hash {model.hash}" == f"model_hash {card['sha256']}"
    )
    assert card["languages"] == ["en"] and card["examples"]["left_out"] == {"de": 1}
    test = read_heldout(heldout_path(out))
    assert all(held_out(e.group, 0, 30) for e in test)
    # a held-out manual's prose and contents are held out together (near copies, e.g. two perl*delta, merge)
    by_group = Counter((e.group, e.label) for e in test)
    assert all(by_group[g, "hq"] == by_group[g, "lq"] for g, _ in by_group)
    assert evaluate(model, test, ["en"], 0.5) == card["evaluation"]
    ev = card["evaluation"]["by_lang"]["en"]
    assert (ev["hq"], ev["lq"]) == (
        card["examples"]["test"]["en"]["hq"],
        card["examples"]["test"]["en"]["lq"],
    )
    assert ev["auc"] > 0.9 and ev["hq"] >= 2 and ev["lq"] >= 2
    assert model.score(manuals[1]["text"], "de") is None and model.score(manuals[1]["text"], "en") is not None

    (tmp_path / "bad.jsonl").write_text('{"text": "no label here"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: .*--positive"):
        list(read_labelled_jsonl(tmp_path / "bad.jsonl"))


def test_the_shipped_models_card_reproduces_from_its_held_out_split():
    """The card's per-language numbers are the shipped model's on held-out examples, every one of them in
    a split group that the split rule holds out (so none trained the model)."""
    card = json.loads(card_path(DEFAULT_MODEL).read_text())
    model = QualityModel(DEFAULT_MODEL)
    assert DEFAULT_MODEL.stat().st_size < 2_000_000
    assert card["sha256"] == "sha256:" + file_sha256(DEFAULT_MODEL) == model.hash
    test = read_heldout(heldout_path(DEFAULT_MODEL))
    split = card["split"]
    assert all(held_out(e.group, split["seed"], split["test_percent"]) for e in test)
    assert evaluate(model, test, card["languages"], card["evaluation"]["threshold"]) == card["evaluation"]
    assert {lang: m["hq"] + m["lq"] for lang, m in card["evaluation"]["by_lang"].items()} == {
        lang: c["hq"] + c["lq"] for lang, c in card["examples"]["test"].items()
    }
    # every language of the shared crawl with enough pages of both kinds
    assert set(card["languages"]) >= {
        "en",
        "de",
        "fr",
        "it",
        "ja",
        "ko",
        "nl",
        "pt",
        "ru",
        "zh",
        "ca",
        "es",
        "vi",
    }
    assert model.score("=head1 NAME\n\nperlfunc - Perl builtin functions") > 0.5


def test_a_language_the_model_was_not_trained_for_gets_no_score(tmp_path):
    model = load_quality_model(str(DEFAULT_MODEL))
    shutil.copy(DEFAULT_MODEL, tmp_path / "copy.ftz")  # the file alone, without its card
    assert QualityModel(tmp_path / "copy.ftz").languages == model.languages, "the file names its languages"

    def annotated(text):
        doc = Document.create(
            text=text, source="s", source_tier="web", url="u", crawl_date="", raw_digest="0"
        )
        return annotate_document(doc, model.score, (), model.languages)

    sv = annotated(
        "Installationsprogrammet frågar efter vilket språk du vill använda under installationen. "
        "Därefter väljer du land och tangentbordslayout, och sedan konfigureras nätverket automatiskt."
    )
    en = annotated(
        "The installer asks which language you want to use during the installation. Then you choose "
        "your country and keyboard layout, and the network is configured automatically."
    )
    assert sv.lang == "sv" and "sv" not in model.languages
    assert "quality" not in sv.scores and sv.annotation("annotate", "quality") is None
    assert en.lang == "en" and 0.0 <= en.scores["quality"] <= 1.0
    table = metadata_table([sv.to_dict(), en.to_dict()], "web-00000", [10, 10])
    assert table.column("quality").to_pylist() == [None, en.scores["quality"]]  # a null, never a 0.0


def test_split_groups_keep_translations_and_architectures_together():
    same = [
        "https://installation-guide-amd64.docs.example.org/installation-guide-amd64/zh_CN/apb.html",
        "https://installation-guide-arm64.docs.example.org/installation-guide-arm64/en/apb.html",
    ]
    faq = [
        "https://debian-faq-zh-cn.docs.example.org/debian/FAQ/zh-cn/choosing.zh-cn.html",
        "https://debian-faq.docs.example.org/debian/FAQ/choosing.en.html",
    ]
    assert len({split_group(u) for u in same}) == 1 and len({split_group(u) for u in faq}) == 1
    assert split_group(same[0]) != split_group(same[0].replace("apb", "apc"))


def test_the_tier_recipe_judges_a_page_by_its_own_languages_words(shared_data):
    """Chinese and Japanese pages judged with English rules have a handful of space-separated "words",
    so the negative-label rule calls many of them low quality; with their own segmenter it counts their
    words, and real pages it called low quality by English rules are not."""
    from tests.dedup.crawl_pages import crawl_pages

    rescued = [
        lang
        for lang, texts in crawl_pages(shared_data, 6).items()
        for t in texts
        if is_low_quality_web(t) and not is_low_quality_web(t, lang)
    ]
    assert len(rescued) >= 3 and set(rescued) == {"ja", "zh"}
