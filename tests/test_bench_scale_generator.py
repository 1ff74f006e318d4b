"""The scale benchmark's corpus generator (bench/bench_scale.py), without MPI: the benchmark's numbers
mean something only if the corpus is the same for a seed and holds what it claims to plant."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bench.bench_scale import Mix, generate, page_lines, perl_pages, planted_summary, window, write_inputs
from tests.conftest import SHARED_DATA

N = 1200


@pytest.fixture(scope="module")
def pages():
    return perl_pages(SHARED_DATA)


@pytest.fixture(scope="module")
def corpus(pages):
    return generate(pages, N, seed=7)


def test_same_seed_same_corpus_other_seed_another(pages, corpus):
    again, _ = generate(pages, N, seed=7)
    assert again == corpus[0]
    small, _ = generate(pages, 200, seed=7)
    other, _ = generate(pages, 200, seed=8)
    assert [d.text for d in other] != [d.text for d in small]


def test_planted_copies_in_the_stated_proportions(corpus):
    docs, _ = corpus
    mix = Mix()
    kinds = Counter(d.kind for d in docs)
    assert len(docs) == N
    assert kinds["exact_copy"] == round(N * mix.exact_copy)
    assert kinds["near_duplicate"] == round(N * mix.near_duplicate)
    assert kinds["original"] == N - kinds["exact_copy"] - kinds["near_duplicate"]
    assert len({d.url for d in docs}) == N  # a shared URL would be collapsed at ingest as a recrawl


def test_exact_copies_are_identical_to_their_original(corpus):
    docs, _ = corpus
    for d in docs:
        if d.kind == "exact_copy":
            assert docs[d.of].kind == "original" and d.text == docs[d.of].text


def test_near_duplicates_differ_from_their_original_in_a_few_words(corpus):
    docs, _ = corpus
    mix = Mix()
    for d in (d for d in docs if d.kind == "near_duplicate"):
        mine, theirs = d.text.split(), docs[d.of].text.split()
        assert len(mine) == len(theirs)
        changed = sum(a != b for a, b in zip(mine, theirs, strict=True))
        assert 1 <= changed <= max(1, round(mix.edit_fraction * len(theirs)))


def test_boilerplate_lines_are_shared_by_many_documents(corpus):
    docs, boiler = corpus
    originals = [d for d in docs if d.kind == "original"]
    share = sum(bool(d.boilerplate) for d in originals) / len(originals)
    assert abs(share - Mix().boilerplate) < 0.05
    for d in docs:
        lines = set(d.text.splitlines())
        assert all(boiler[b] in lines for b in d.boilerplate)
    per_line = Counter(b for d in docs for b in d.boilerplate)
    assert per_line.most_common(1)[0][1] >= 0.05 * N  # the head of the power law: one line in many pages
    # the ten most shared lines are each in more documents than line_dedup's default (10) lets through
    assert all(c > 10 for _, c in per_line.most_common(10))


def test_copies_concentrate_on_a_few_originals(corpus):
    docs, _ = corpus
    assert planted_summary(docs)["largest_cluster"] >= 0.02 * N


def test_a_window_is_consecutive_lines_of_its_page(pages):
    rnd = random.Random(1)
    for page in pages[:50]:
        got = window(page.lines, rnd, 80, 600)
        text = "\n".join(page.lines)
        assert "\n".join(got) in text
        assert sum(len(line.split()) for line in got) >= min(80, page.words)


def test_input_files_are_deterministic_fixed_size_shards(tmp_path, corpus):
    docs, _ = corpus
    a = write_inputs(docs[:250], tmp_path / "a", docs_per_shard=100)
    b = write_inputs(docs[:250], tmp_path / "b", docs_per_shard=100)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert [p.name for p in a] == [f"perl-doc-{k:05d}.jsonl.gz" for k in range(3)]


def test_page_lines_drops_blank_lines():
    assert page_lines("a\n\n  b  \n\n\nc") == ("a", "b", "c")
