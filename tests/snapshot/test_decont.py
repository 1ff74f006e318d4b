"""Decontamination: real benchmark items planted into real documents are found; clean text is not."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from corpus.decont.corpus_index import GramSpool, check_benchmark, doc_grams, npy_bytes, save_index
from corpus.decont.matcher import EvalIndex
from corpus.decont.ngrams import normalize_words, text_grams
from corpus.decont.registry import EvalRegistry, RegistryError, load_benchmark
from tests.snapshot.conftest import EVALS, perl_docs


def item(benchmark: str, item_id: str) -> str:
    for line in (EVALS / f"{benchmark}.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["id"] == item_id:
            return rec["text"]
    raise KeyError(item_id)


def plant(host: str, text: str) -> str:
    """The eval text pasted into the middle of a real document, between two paragraphs."""
    cut = host.find("\n\n", len(host) // 2)
    cut = cut if cut > 0 else len(host) // 2
    return f"{host[:cut]}\n\n{text}\n\n{host[cut:]}"


@pytest.fixture(scope="module")
def index() -> EvalIndex:
    return EvalIndex(EvalRegistry.load(EVALS))


@pytest.fixture(scope="module")
def hosts() -> list[str]:
    return [d.text for d in perl_docs(n=40, max_chars=6000)]


@pytest.mark.parametrize(
    "benchmark, item_id",
    [
        ("gsm8k", "gsm8k-0"),
        ("lambada", "lambada-7"),
        ("humaneval", "HumanEval/0"),
        ("arc_challenge", "arc_challenge-0"),
    ],
)
def test_planted_benchmark_item_is_found_in_a_real_document(index, hosts, benchmark, item_id):
    matches = index.scan(plant(hosts[3], item(benchmark, item_id)))
    assert [m.benchmark for m in matches] == [benchmark]
    assert matches[0].item_id == item_id
    assert (
        matches[0].run >= index.min_run or len(normalize_words(item(benchmark, item_id))) < 12 + index.min_run
    )


def test_clean_real_documents_are_not_flagged(index, hosts):
    assert [i for i, h in enumerate(hosts) if index.scan(h)] == []


def test_a_long_item_is_found_after_reformatting_but_not_from_a_short_quote(index, hosts):
    text = item("gsm8k", "gsm8k-12")
    shouted = " ".join(w.upper() + ("," if i % 4 == 0 else "") for i, w in enumerate(text.split()))
    assert [m.benchmark for m in index.scan(plant(hosts[5], shouted))] == ["gsm8k"]
    words = text.split()
    quote = " ".join(words[:20])  # 8 consecutive 13-grams: below the run of 10
    assert index.scan(plant(hosts[5], quote)) == []


def test_short_item_is_caught_whole_and_only_whole(index, hosts):
    short = item("arc_easy", "arc_easy-3")  # 13 words: fewer 13-grams than min_run
    assert len(normalize_words(short)) < 12 + index.min_run
    found = index.scan(plant(hosts[7], short))
    assert [(m.benchmark, m.item_id) for m in found] == [("arc_easy", "arc_easy-3")]
    truncated = " ".join(short.split()[:-1])  # the answer word missing
    assert index.scan(plant(hosts[7], truncated)) == []


def test_tiny_items_are_counted_as_unchecked(index):
    unchecked = index.describe()["unchecked_items"]
    assert unchecked["arc_easy"] >= 1 and unchecked["arc_challenge"] >= 1
    assert index.scan("Question: What causes sound?\nAnswer: vibrations") == []


def test_normalization_ignores_case_punctuation_and_spacing():
    a = text_grams("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning!")
    b = text_grams("janet s   DUCKS lay 16 eggs -- per day; she eats three for breakfast\nevery morning")
    assert a.tolist() == b.tolist() and a.shape[0] == 3  # 15 words


def test_registry_digest_names_every_benchmark_file(tmp_path):
    for name in ("gsm8k", "arc_easy"):
        shutil.copy(EVALS / f"{name}.jsonl", tmp_path / f"{name}.jsonl")
    first = EvalRegistry.load(tmp_path).digest
    assert EvalRegistry.load(tmp_path).digest == first
    shutil.copy(EVALS / "humaneval.jsonl", tmp_path / "humaneval.jsonl")
    assert EvalRegistry.load(tmp_path).digest != first


def test_a_broken_benchmark_line_is_a_clear_error(tmp_path):
    (tmp_path / "broken.jsonl").write_text(
        '{"id": "a", "text": "fine"}\n{"id": "b", "question": "no text"}\n'
    )
    with pytest.raises(RegistryError, match=r"broken.jsonl:2: an eval item needs a string field \"text\""):
        EvalRegistry.load(tmp_path)


def test_later_benchmark_is_checked_against_the_retained_corpus_index(hosts):
    """humaneval is not in the registry the corpus was cleaned with; the retained index still finds
    exactly the items that were pasted into the corpus."""
    humaneval = load_benchmark(EVALS / "humaneval.jsonl")
    planted = ["HumanEval/5", "HumanEval/42", "HumanEval/99", "HumanEval/23"]  # 23 is an 18-word item
    docs = list(hosts)
    for k, item_id in enumerate(planted):
        docs[k * 3] = plant(docs[k * 3], item("humaneval", item_id))
    corpus = np.unique(np.concatenate([doc_grams(d) for d in docs]))
    result = check_benchmark(humaneval, corpus, min_run=10)
    assert sorted(result["flagged_ids"]) == sorted(planted)
    assert result["items"] == 164 and result["unchecked_items"] == 0
    clean = np.unique(np.concatenate([doc_grams(d) for d in hosts]))
    assert check_benchmark(humaneval, clean, min_run=10)["flagged_ids"] == []


def test_an_ngram_hash_depends_only_on_its_words(hosts):
    from corpus.decont.ngrams import gram_hashes, word_hashes

    words = normalize_words(" ".join(hosts[:5]))
    hashes = word_hashes(words)
    for n in (8, 13, 21):
        grams = gram_hashes(hashes, n)
        assert grams.shape[0] == len(words) - n + 1
        for i in (0, 17, len(words) - n):
            assert grams[i] == gram_hashes(word_hashes(words[i : i + n]), n)[0]
    assert gram_hashes(hashes[:13], 13)[0] != gram_hashes(hashes[:12], 12)[0]


def test_an_eval_file_changed_in_place_changes_the_stage_config(tmp_path):
    from corpus.config import config_hash, stage_config
    from hpc_jobs.decontaminate import DecontaminateConfig

    shutil.copy(EVALS / "gsm8k.jsonl", tmp_path / "gsm8k.jsonl")
    before = stage_config(DecontaminateConfig, {"eval_dir": str(tmp_path)}, "decontaminate")
    assert before.eval_registry_hash == EvalRegistry.load(tmp_path).digest
    with open(tmp_path / "gsm8k.jsonl", "a") as f:
        f.write(json.dumps({"id": "new", "text": "a question published later with its answer"}) + "\n")
    after = stage_config(DecontaminateConfig, {"eval_dir": str(tmp_path)}, "decontaminate")
    assert config_hash(after) != config_hash(before)


@pytest.mark.parametrize("limit_bytes", [8 << 10, 64 << 10, 1 << 30])
def test_a_shard_spooled_in_little_memory_writes_the_same_npy(hosts, tmp_path, limit_bytes):
    """The spool spills sorted runs past its limit and merges them back, to the bytes of one
    ``np.unique`` over every document's 13-grams (the .npy the stage wrote before it spooled); its runs
    are gone afterwards, with the runs a killed run left in its directory."""
    docs = [doc_grams(d) for d in hosts] + [doc_grams(d) for d in hosts[:10]]  # repeats across runs
    spill = tmp_path / "spill"
    spill.mkdir()
    (spill / "run-000000.u64").write_bytes(np.arange(5, dtype=np.uint64).tobytes())  # stale
    spool = GramSpool(spill, limit_bytes)
    for g in docs:
        spool.add(g)
    runs = len(spool.runs)
    count = spool.save(tmp_path / "spooled.npy")
    save_index(tmp_path / "whole.npy", np.concatenate(docs))
    assert (tmp_path / "spooled.npy").read_bytes() == (tmp_path / "whole.npy").read_bytes()
    assert count == np.load(tmp_path / "whole.npy").shape[0]
    assert (runs > 3) == (limit_bytes < 1 << 20) and not spill.exists()


def test_an_empty_spool_writes_an_empty_index(tmp_path):
    GramSpool(tmp_path / "spill", 1 << 10).save(tmp_path / "empty.npy")
    assert (tmp_path / "empty.npy").read_bytes() == npy_bytes(np.empty(0, np.uint64))
