"""Near-duplicates in scripts written without spaces (normalization version 2): real Japanese and
Chinese pages of the shared crawl, edited at graded rates, are found at the rate of the S-curve
1-(1-s^r)^b, as the planted English pairs of tests/kernels/test_minhash.py are; a Chinese passage with
one sentence replaced is a near-duplicate (version 1's word shingles saw Chinese text as a few giant
"words", so that little but exact copies matched)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from corpus.text.normalize import NORMALIZATION_VERSION, UNSPACED_LETTER, normalize_text
from mpi_kernels.minhash import MinHasher, MinHashParams, lsh_probability
from tests.dedup.crawl_pages import crawl_pages, jaccard, scurve_points, sentence_pool, sentences, shingle_set

PAGES = 10  # per language
REPEATS = 6  # edits of each page per level, each with its own hash functions (MinHashParams.seed)
LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # the Jaccard each edit aims at


@pytest.fixture(scope="module")
def pages(shared_data) -> dict[str, list[str]]:
    return crawl_pages(shared_data, PAGES)


@pytest.mark.parametrize("lang", ["ja", "zh"])
def test_graded_near_duplicates_of_real_pages_are_found_at_the_s_curve_rate(pages, lang):
    """Each page edited REPEATS times at each level (characters or sentences replaced by real ones of the
    other pages), each repeat with fresh hash functions at the stage's 14 x 8: per level, the pairs found
    are the sum of 1-(1-J^8)^14 over the pairs' exact Jaccard J, within 4 sigma + 1 (as for English)."""
    texts = pages[lang]
    assert len(texts) == PAGES, f"the crawl file must hold {PAGES} {lang} pages with text"
    params = MinHashParams()
    found = scurve_points(texts, LEVELS, REPEATS, lang, params.bands, params.rows)
    print(f"\n{lang}: aimed J, mean J, theory, found")
    for target, results in found.items():
        j = np.array([x[0] for x in results])
        hits = sum(x[1] for x in results)
        expected = lsh_probability(j, params.bands, params.rows)
        sigma = np.sqrt((expected * (1 - expected)).sum()) + 1.0
        print(f"  {target:.2f}  {j.mean():.3f}  {expected.mean():.3f}  {hits / len(results):.3f}")
        assert abs(hits - expected.sum()) <= 4 * sigma, (lang, target, hits, expected.sum())


def passage(text: str, n: int) -> str | None:
    """The first ``n`` consecutive sentences of a page that each have at least 8 letters of an unspaced
    script (a long paragraph, or a few short ones), or None."""
    run: list[str] = []
    for s in sentences(text):
        run = run + [s] if len(UNSPACED_LETTER.findall(s)) >= 8 else []
        if len(run) == n:
            return "".join(run)
    return None


def test_a_chinese_passage_with_one_sentence_replaced_is_a_near_duplicate(pages):
    """Real passages of 12 sentences (350-500 characters), one sentence near the middle (of at most a
    twelfth of the passage) replaced by a sentence of about its length from another page: character
    5-grams put the pair at Jaccard >= 0.8 (found with
    probability >= 0.95 at 14 x 8), the pair shares a band at the stage's defaults and its estimated
    Jaccard passes verification (0.65). Version 1's word shingles saw a Chinese passage as a few giant
    "words" (the runs between its Latin terms): Jaccard 0.43-0.58 on these pairs, found with
    probability <= 0.17 each (its kernel finds one of the three, which then fails verification)."""
    texts = pages["zh"]
    passages = [p for p in (passage(t, 12) for t in texts[:5]) if p][:3]
    assert len(passages) == 3
    pool = sentence_pool(texts[5:])
    rnd = random.Random(3)
    m = MinHasher()
    for text in passages:
        parts = sentences(text)
        # the sentence nearest the middle that has at most a twelfth of the passage's characters
        k = min(
            (i for i, s in enumerate(parts) if len(s) <= len(text) / 12),
            key=lambda i: abs(2 * i - len(parts)),
        )
        parts[k] = rnd.choice([s for s in pool if 0.8 * len(parts[k]) <= len(s) <= 1.2 * len(parts[k])])
        edited = "".join(parts)
        j = jaccard(shingle_set(text), shingle_set(edited))
        sigs = m.signatures([text, edited])
        keys = m.band_keys(sigs)
        words = [normalize_text(t).split() for t in (text, edited)]
        word_j = jaccard(*({" ".join(w[i : i + 5]) for i in range(len(w) - 4)} for w in words))
        assert j >= 0.8 and word_j < 0.6, (j, word_j)
        assert (keys[0] == keys[1]).all(axis=1).any(), (j, text)
        assert (sigs[0] == sigs[1]).mean() >= 0.65, ((sigs[0] == sigs[1]).mean(), j)


def test_the_stage_version_moves_with_the_normalization_version():
    """The runner reuses a complete stage whose version, config and inputs match; the normalization
    version is only in the global phase's key (which drops old signature parts once the stage runs), so
    a new normalization version needs a new stage version, or stages built with the old one are kept."""
    from hpc_jobs.minhash_dedup.stage import MinhashDedupStage

    assert MinhashDedupStage.version.endswith("+norm" + NORMALIZATION_VERSION)
