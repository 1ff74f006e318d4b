"""Decontamination: real benchmark items planted into real documents are found; clean text is not."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pytest

from corpus.decont.doc_grams import (
    DocGramIndex,
    check_benchmark,
    doc_rows,
    key_hex,
    sampled_grams,
    write_parts,
)
from corpus.decont.eval_table import FENCE
from corpus.decont.matcher import EvalIndex, PassageTable
from corpus.decont.ngrams import Grams, normalize_words, text_grams, word_hashes
from corpus.decont.registry import EvalRegistry, RegistryError, load_benchmark
from corpus.decont.rule import DEFAULT_MIN_ITEM_WORDS, passage_grams, text_gram_set
from tests.conftest import run_mpi
from tests.snapshot.conftest import EVALS, make_stage_dir, perl_docs, split, write_config


def record(benchmark: str, item_id: str) -> dict:
    for line in (EVALS / f"{benchmark}.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["id"] == item_id:
            return rec
    raise KeyError(item_id)


def item(benchmark: str, item_id: str) -> str:
    return record(benchmark, item_id)["text"]


def plant(host: str, text: str) -> str:
    """The eval text pasted into the middle of a real document, between two paragraphs."""
    cut = host.find("\n\n", len(host) // 2)
    cut = cut if cut > 0 else len(host) // 2
    return f"{host[:cut]}\n\n{text}\n\n{host[cut:]}"


@pytest.fixture(scope="module")
def registry() -> EvalRegistry:
    return EvalRegistry.load(EVALS)


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> EvalIndex:
    return EvalIndex.build(EVALS, tmp_path_factory.mktemp("eval") / "table")


def test_the_stored_table_holds_the_in_memory_tables_rows_whatever_its_run_size(
    index, registry, hosts, tmp_path
):
    """Written in runs of 32,768 rows (dozens of runs, merged a hash range at a time) or of the default
    size, the table holds the rows the in-memory table sorts at once, names the same items, and its
    Bloom filter passes each of its hashes and rejects most of a clean page's; writing it again where it
    is leaves it as it is."""
    items = [i for b in registry.benchmarks for i in b.items]
    memory = PassageTable.build(items)
    small = EvalIndex.build(EVALS, tmp_path / "small", run_rows=1 << 15).table
    for table in (index.table, small):
        for column in ("hashes", "passage", "position", "passage_len", "passage_item"):
            assert np.array_equal(getattr(table, column), getattr(memory, column)), column
        assert [table.item(i) for i in range(len(items))] == [(i.benchmark, i.item_id) for i in items]
        assert table.bloom.might_contain(memory.hashes).all()
        assert np.array_equal(table.fence, memory.hashes[::FENCE])
        # hashes (every fifth), their neighbours, keys outside the table: as a search of the whole column finds them
        some = memory.hashes[::5]
        keys = np.unique(np.concatenate([some, some - 1, some + 1, [0, 2**64 - 1]]))
        left, right = table._bounds(keys)
        assert np.array_equal(left, np.searchsorted(memory.hashes, keys, side="left"))
        assert np.array_equal(right, np.searchsorted(memory.hashes, keys, side="right"))
        assert table.unchecked() == Counter(items[i].benchmark for i in np.flatnonzero(memory.unchecked))
    assert small.manifest == index.table.manifest
    fuzzy = index.fuzzy_table  # the same passages, numbered alike, each with 3 more 5-grams than 8-grams
    assert np.array_equal(fuzzy.passage_item, memory.passage_item)
    assert np.array_equal(fuzzy.passage_len, memory.passage_len + 3)
    assert fuzzy.manifest["key"] == index.table.manifest["key"] | {"ngram": 5}
    clean = np.unique(np.concatenate([text_grams(h, 8) for h in hosts]))
    assert np.isin(clean, memory.hashes).sum() < 50, "stock phrases only"
    assert small.bloom.might_contain(clean).mean() < 0.03
    before = (tmp_path / "small" / "manifest.json").stat().st_mtime_ns
    EvalIndex.build(EVALS, tmp_path / "small", run_rows=1 << 15)
    assert (tmp_path / "small" / "manifest.json").stat().st_mtime_ns == before


def test_a_base_builds_table_of_the_same_registry_is_linked_not_written(tmp_path):
    """A build against a base finds the base's table: the same key, so its files are hard-linked (written
    once, never changed); a table of other settings is not reused."""
    from corpus.decont.eval_table import build_eval_table

    base = build_eval_table(EVALS, 8, tmp_path / "base")
    linked = build_eval_table(EVALS, 8, tmp_path / "delta", reuse=tmp_path / "base")
    assert linked == base
    assert all((tmp_path / "delta" / f.name).samefile(f) for f in (tmp_path / "base").iterdir())
    other = build_eval_table(EVALS, 9, tmp_path / "strict", reuse=tmp_path / "base")
    assert other["key"]["min_item_words"] == 9 and other["rows"] < base["rows"]
    assert not (tmp_path / "strict" / "grams.u8").samefile(tmp_path / "base" / "grams.u8")


def test_a_table_cache_holds_one_table_per_registry_for_every_build(tmp_path):
    """With a cache (CORPUS_EVAL_TABLE_CACHE) the first build writes the table and adds it; every later
    build of the same key links it; another key is written and added beside it; an unwritable cache
    costs nothing but the sharing."""
    from corpus.decont.eval_table import build_eval_table

    cache = tmp_path / "cache"
    first = build_eval_table(EVALS, 8, tmp_path / "b1" / "table", cache=cache)
    (entry,) = cache.iterdir()
    assert all((tmp_path / "b1" / "table" / f.name).samefile(f) for f in entry.iterdir())
    assert build_eval_table(EVALS, 8, tmp_path / "b2" / "table", cache=cache) == first
    assert all((tmp_path / "b2" / "table" / f.name).samefile(entry / f.name) for f in entry.iterdir())
    other = build_eval_table(EVALS, 9, tmp_path / "b3" / "table", cache=cache)
    assert other["key"] != first["key"] and len(list(cache.iterdir())) == 2
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    assert build_eval_table(EVALS, 8, tmp_path / "b4" / "table", cache=blocked) == first


def test_on_two_ranks_the_two_eval_tables_hold_the_bytes_one_process_writes(tmp_path, monkeypatch):
    """The stage's ranks share the tables' writing (the rule's 8-grams on rank 0, the fuzzy tier's
    5-grams on rank 1, side by side): each table is byte for byte the one a single process writes."""
    from corpus.decont.eval_table import build_eval_table

    monkeypatch.delenv("CORPUS_EVAL_TABLE_CACHE", raising=False)  # written by the stage, not linked
    inputs = make_stage_dir(tmp_path / "minhash_dedup", split(perl_docs(n=4), 2))
    config = write_config(tmp_path / "build.toml", decontaminate={"eval_dir": str(EVALS)})
    out = tmp_path / "decontaminate"
    run_mpi(
        2, "-m", "hpc_jobs.decontaminate", "--input", str(inputs), "--out", str(out), "--config", str(config)
    )
    for table, n in (("eval_table", 8), ("eval_table-5gram", 5)):
        alone = tmp_path / "alone" / table
        build_eval_table(EVALS, DEFAULT_MIN_ITEM_WORDS, alone, n=n)
        files = sorted(f.name for f in alone.iterdir())
        assert sorted(f.name for f in (out / "work" / table).iterdir()) == files
        for name in files:
            assert (out / "work" / table / name).read_bytes() == (alone / name).read_bytes(), (table, name)


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
        matches[0].run >= index.min_run or len(normalize_words(item(benchmark, item_id))) < 7 + index.min_run
    )


def test_clean_real_documents_are_not_flagged(index, hosts):
    assert [i for i, h in enumerate(hosts) if index.scan(h)] == []


def test_a_long_item_is_found_after_reformatting_but_not_from_a_short_quote(index, hosts):
    text = item("gsm8k", "gsm8k-12")
    shouted = " ".join(w.upper() + ("," if i % 4 == 0 else "") for i, w in enumerate(text.split()))
    assert [m.benchmark for m in index.scan(plant(hosts[5], shouted))] == ["gsm8k"]
    words = text.split()
    quote = " ".join(words[:21])  # 14 consecutive 8-grams of a 54-word question: below the run of 15
    assert index.scan(plant(hosts[5], quote)) == []
    assert [m.item_id for m in index.scan(plant(hosts[5], " ".join(words[:22])))] == ["gsm8k-12"]


def test_an_item_is_matched_on_its_content_without_the_template(index, hosts):
    """arc_easy-3 is 13 words with its template ("Question: … Answer: soft"); its question alone (10
    words, no template) is a passage, caught whole and only whole."""
    rec = record("arc_easy", "arc_easy-3")
    question = rec["doc"]["query"].removeprefix("Question: ").removesuffix("\nAnswer:")
    assert len(normalize_words(question)) == 10 and "Question" not in question
    found = index.match(plant(hosts[7], question.upper().replace(" ", "\n")))
    assert [(m.benchmark, m.item_id) for m in found] == [("arc_easy", "arc_easy-3")]
    truncated = question.rsplit(" ", 1)[0]  # its last word missing
    assert index.match(plant(hosts[7], truncated)) == []


def test_answer_choices_in_another_order_are_found(index, hosts):
    """A multiple-choice item copied with its choices relabelled and reordered: its question is a passage."""
    rec = record("arc_challenge", "arc_challenge-0")
    doc = rec["doc"]
    question = doc["query"].removeprefix("Question: ").removesuffix("\nAnswer:")
    choices = "\n".join(f"({chr(97 + i)}) {c}" for i, c in enumerate(reversed(doc["choices"])))
    page = plant(hosts[9], f"Q. {question}\n{choices}\nThe answer is (b).")
    assert [m.item_id for m in index.match(page)] == ["arc_challenge-0"]


def test_gsm8k_answer_is_matched_without_its_calculator_notes(index, hosts):
    answer = record("gsm8k", "gsm8k-0")["doc"]["answer"]
    clean = answer.replace("<<16-3-4=9>>", "").replace("<<9*2=18>>", "")
    assert "<<" not in clean
    assert [m.item_id for m in index.match(plant(hosts[2], clean))] == ["gsm8k-0"]


def test_tiny_items_are_counted_as_unchecked(index):
    unchecked = index.describe()["unchecked_items"]
    assert unchecked["arc_easy"] >= 1 and unchecked["arc_challenge"] >= 1
    assert index.scan("Question: What causes sound?\nAnswer: vibrations") == []


def test_normalization_ignores_case_punctuation_and_spacing():
    a = text_grams("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning!", 8)
    b = text_grams("janet s   DUCKS lay 16 eggs -- per day; she eats three for breakfast\nevery morning", 8)
    assert a.tolist() == b.tolist() and a.shape[0] == 8  # 15 words


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


def doc_gram_index(docs: list[str], directory, bits: int = 2) -> tuple[DocGramIndex, list[str]]:
    """The per-document index of ``docs`` (as the stage keeps it), and each document's key."""
    keys = [key_hex(0x9E3779B97F4A7C15 * (i + 1) % (1 << 64)) for i in range(len(docs))]
    rows = np.concatenate([doc_rows(text_gram_set(d), int(k, 16)) for d, k in zip(docs, keys, strict=True)])
    return DocGramIndex(write_parts(rows, directory, bits), bits), keys


def test_later_benchmark_is_checked_against_the_per_document_index(hosts, tmp_path):
    """humaneval is not in the registry the corpus was cleaned with; the index the build keeps still finds
    exactly the items that were pasted into the corpus, in exactly the documents they were pasted into."""
    humaneval = load_benchmark(EVALS / "humaneval.jsonl")
    planted = {0: "HumanEval/5", 3: "HumanEval/42", 6: "HumanEval/99", 9: "HumanEval/23"}  # 23: 18 words
    docs = list(hosts)
    for k, item_id in planted.items():
        docs[k] = plant(docs[k], item("humaneval", item_id))
    index, keys = doc_gram_index(docs, tmp_path / "planted")
    result = check_benchmark(humaneval, index)
    assert result["items"] == 164 and result["unchecked_items"] == 0
    assert {i: [m["doc"] for m in ms] for i, ms in result["matches"].items()} == {
        item_id: [keys[k]] for k, item_id in planted.items()
    }
    clean, _ = doc_gram_index(hosts, tmp_path / "clean")
    assert check_benchmark(humaneval, clean)["flagged_ids"] == []


def test_a_sampled_index_keeps_the_same_8grams_of_every_text():
    grams = np.array([0, 1, 63, 64, 128, 129, 2**63], dtype=np.uint64)
    assert sampled_grams(grams, 1) is grams
    assert sampled_grams(grams, 64).tolist() == [0, 64, 128, 2**63]
    assert sampled_grams(grams, 2).tolist() == [0, 64, 128, 2**63]


def test_a_sampled_index_flags_what_its_rule_says_and_costs_its_share(registry, hosts, tmp_path):
    """Against an index keeping one 8-gram in 4, a document is a hit for a passage when it holds two of
    the passage's sampled 8-grams (its one where it has one): computed here from the texts, passage by
    passage, and equal to the check's answer; planted items are found, the clean documents give nothing."""
    rng = np.random.default_rng(7)
    items = [i for b in registry.benchmarks for i in b.items]
    docs = list(hosts)
    for k in range(1, len(docs), 2):  # an item whole, or a share of one passage's words: some sampled 8-grams
        words = items[int(rng.integers(len(items)))].text.split()
        docs[k] = plant(docs[k], " ".join(words[: len(words) // (1 + k % 3)]))
    keys = [key_hex(0x9E3779B97F4A7C15 * (i + 1) % (1 << 64)) for i in range(len(docs))]
    full = np.concatenate([doc_rows(text_gram_set(d), int(k, 16)) for d, k in zip(docs, keys, strict=True)])
    rows = np.concatenate(
        [doc_rows(sampled_grams(text_gram_set(d), 4), int(k, 16)) for d, k in zip(docs, keys, strict=True)]
    )
    assert 0.2 < rows.shape[0] / full.shape[0] < 0.3
    dg = DocGramIndex(write_parts(rows, tmp_path / "sampled", 2), 2)
    sets = [set(sampled_grams(text_gram_set(d), 4).tolist()) for d in docs]
    for b in registry.benchmarks:
        result = check_benchmark(b, dg, sample=4)
        expected = {}
        for it in b.items:
            for passage in it.passages or (it.text,):
                grams = passage_grams(passage, DEFAULT_MIN_ITEM_WORDS)
                mine = set(sampled_grams(grams, 4).tolist()) if grams is not None else set()
                for k, held in enumerate(sets):
                    n = len(mine & held)
                    if mine and n >= min(2, len(mine)):
                        expected.setdefault(it.item_id, {})[keys[k]] = max(
                            n, expected.get(it.item_id, {}).get(keys[k], 0)
                        )
        got = {i: {m["doc"]: m["run"] for m in ms} for i, ms in result["matches"].items()}
        assert got == expected, b.name
        assert result["sample"] == 4 and 0 <= result["unsampled_items"] <= result["checked_items"]
    planted = [k for k in range(len(docs)) if k % 2]
    found = {
        m["doc"]
        for b in registry.benchmarks
        for ms in check_benchmark(b, dg, sample=4)["matches"].values()
        for m in ms
    }
    assert len(found & {keys[k] for k in planted}) >= len(planted) // 2


def test_the_build_and_the_check_after_it_agree_item_by_item(index, registry, hosts, tmp_path):
    """Items of every benchmark pasted into real documents, verbatim, without their template, quoted
    short of a run, one question reformatted: the scan the build runs per document and the check against
    the per-document index name the same (item, document) pairs; and the registry's own benchmarks give
    nothing on the clean documents."""
    rng = np.random.default_rng(16)
    items = [i for b in registry.benchmarks for i in b.items]
    docs = list(hosts)
    for k in range(len(docs)):
        it = items[int(rng.integers(len(items)))]
        form = k % 4
        passage = it.passages[0]
        text = {0: it.text, 1: passage, 2: " ".join(passage.split()[:18]), 3: passage.upper()}[form]
        docs[k] = plant(docs[k], text)
    dg_index, keys = doc_gram_index(docs, tmp_path / "index", bits=3)
    in_build = {(m.benchmark, m.item_id, keys[k]) for k, d in enumerate(docs) for m in index.match(d)}
    after = {
        (b.name, item_id, m["doc"])
        for b in registry.benchmarks
        for item_id, ms in check_benchmark(b, dg_index, index.min_run, index.min_item_words)[
            "matches"
        ].items()
        for m in ms
    }
    assert after == in_build
    assert len(in_build) >= 25, "most plants are found (the short quotes are not)"


def test_an_ngram_hash_depends_only_on_its_words(hosts):
    from corpus.decont.ngrams import gram_hashes

    words = normalize_words(" ".join(hosts[:5]))
    hashes = word_hashes(words)
    for n in (8, 13, 21):
        grams = gram_hashes(hashes, n)
        assert grams.shape[0] == len(words) - n + 1
        for i in (0, 17, len(words) - n):
            assert grams[i] == gram_hashes(word_hashes(words[i : i + n]), n)[0]
    assert gram_hashes(hashes[:13], 13)[0] != gram_hashes(hashes[:12], 12)[0]


def test_an_eval_file_changed_in_place_changes_the_stage_config(tmp_path):
    from corpus.model.config import config_hash, stage_config
    from hpc_jobs.decontaminate.stage import DecontaminateConfig

    shutil.copy(EVALS / "gsm8k.jsonl", tmp_path / "gsm8k.jsonl")
    before = stage_config(DecontaminateConfig, {"eval_dir": str(tmp_path)}, "decontaminate")
    assert before.eval_registry_hash == EvalRegistry.load(tmp_path).digest
    assert (before.eval_dir, before.registry) == (
        tmp_path.name,
        tmp_path,
    )  # recorded by name, read from where found
    with open(tmp_path / "gsm8k.jsonl", "a") as f:
        f.write(json.dumps({"id": "new", "text": "a question published later with its answer"}) + "\n")
    after = stage_config(DecontaminateConfig, {"eval_dir": str(tmp_path)}, "decontaminate")
    assert config_hash(after) != config_hash(before)


def test_the_fuzzy_tier_finds_a_paraphrase_the_run_rule_misses_and_flags_no_clean_page(index, hosts):
    """Every 9th word changed: no run of 15 8-grams is left, most words still lie in a 5-gram the page
    holds (the fuzzy tier's share, 0.55 by default); clean pages hold no such share of any item."""
    words = item("gsm8k", "gsm8k-12").split()
    text = " ".join(w + "s" if i % 9 == 8 else w for i, w in enumerate(words))
    exact, fuzzy = index.match_both(grams_of(plant(hosts[5], text)))
    assert exact == [] and [(m.benchmark, m.item_id) for m in fuzzy] == [("gsm8k", "gsm8k-12")]
    assert 0.55 <= fuzzy[0].share < 1
    whole = index.match_both(grams_of(plant(hosts[5], " ".join(words))))
    assert [m.item_id for m in whole[0]] == ["gsm8k-12"] and whole[1] == [], "an exact hit is not fuzzy too"
    assert [i for i, h in enumerate(hosts) if index.match_both(grams_of(h))[1]] == []
    every_fifth = " ".join(w + "s" if i % 5 == 4 else w for i, w in enumerate(words))
    assert index.match_both(grams_of(plant(hosts[5], every_fifth))) == ([], []), (
        "one word in five changed leaves no 5-gram: not a paraphrase the tier claims"
    )


def grams_of(text: str) -> Grams:
    return Grams(word_hashes(normalize_words(text)))


def test_the_fuzzy_rule_counts_the_words_its_held_5grams_cover_and_needs_a_few_of_them():
    from corpus.decont.rule import covered

    lengths = np.array([8, 4])  # 5-grams: passage 0 has 12 words, passage 1 has 8
    # document 0 holds 5-grams 0 and 1 (one twice) and 7 of passage 0 (words 0-5 and 7-11), 3 of passage 1
    group, passage, share = covered([0, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 1, 1, 7, 3], lengths, 0.5, 8)
    assert (group.tolist(), passage.tolist()) == ([0], [0]) and share.tolist() == [11 / 12]
    # passage 1: 5 of its 8 words covered, a share of 0.625 but fewer than min(8, 8) words
    assert covered([0], [1], [3], lengths, 0.5, 5)[1].tolist() == [1], "5 words suffice at min_words 5"
    assert covered([0, 1], [0, 0], [0, 7], lengths, 0.5, 5)[0].tolist() == [], (
        "10 of 12 words, in two documents"
    )
    assert covered([0], [0], [0], lengths, 0.0, 1)[1].tolist() == [], "share 0: no fuzzy tier"
