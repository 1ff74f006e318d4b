"""The MinHash kernel: exact modular arithmetic, the documented hash family, and LSH that follows the S-curve."""

from __future__ import annotations

import random

import numpy as np
import pytest

from corpus.dedup.normalize import normalize_text
from mpi_kernels.minhash import (
    EMPTY,
    MERSENNE_61,
    MinHasher,
    MinHashParams,
    is_empty,
    lsh_probability,
    mulmod61_add,
    permutation_coefficients,
)
from tests.dedup.dedup_corpus import planted_pair

M64 = (1 << 64) - 1


def fnv1a(word: bytes) -> int:
    h = 0xCBF29CE484222325
    for c in word:
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def mix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def shingle_values(text: str, ngram: int = 5) -> set[int]:
    """The documented shingle hashing, in plain Python."""
    words = [fnv1a(w.encode()) for w in normalize_text(text).split()]
    width = min(ngram, len(words))
    out = set()
    for s in range(len(words) - width + 1) if words else ():
        h = 0xCBF29CE484222325
        for w in words[s : s + width]:
            h = ((h ^ w) * 0x100000001B3) & M64
        out.add(mix64(h) & MERSENNE_61)
    return out


def reference_signature(text: str, params: MinHashParams) -> list[int]:
    a, b = permutation_coefficients(params.num_perm, params.seed)
    xs = shingle_values(text, params.ngram)
    return [
        min(((int(ak) * x + int(bk)) % MERSENNE_61 for x in xs), default=EMPTY)
        for ak, bk in zip(a, b, strict=True)
    ]


def test_mulmod_is_exact_against_big_integers():
    rnd = random.Random(7)
    cases = [
        (MERSENNE_61 - 1, (1 << 61) - 1, MERSENNE_61 - 1),
        (1, 0, 0),
        (MERSENNE_61 - 1, MERSENNE_61 - 1, 0),
    ]
    cases += [
        (rnd.randrange(1, MERSENNE_61), rnd.randrange(1 << 61), rnd.randrange(MERSENNE_61))
        for _ in range(2000)
    ]
    for a, x, b in cases:
        assert mulmod61_add(a, x, b) == (a * x + b) % MERSENNE_61


def test_coefficients_are_a_pure_function_of_the_seed():
    a, b = permutation_coefficients(112, seed=3)
    a2, b2 = permutation_coefficients(112, seed=3)
    assert (a == a2).all() and (b == b2).all()
    assert ((a >= 1) & (a < MERSENNE_61)).all() and (b < MERSENNE_61).all()
    assert not (permutation_coefficients(112, seed=4)[0] == a).any()


def test_signature_matches_the_documented_hash_family(shared_data):
    params = MinHashParams(num_perm=16, bands=4, rows=4)
    texts = [
        "The quick brown fox jumps over the lazy dog, again and again.",
        "Three short words",
        "",
        "Ünïcode «text» — with ‘quotes’ and ﬁ ligatures, ｆｕｌｌｗｉｄｔｈ too",
    ]
    sigs = MinHasher(params).signatures(texts)
    for text, sig in zip(texts, sigs, strict=True):
        assert [int(v) for v in sig] == reference_signature(text, params)


def test_ascii_fast_path_equals_normalizing_first(shared_data):
    from tests.dedup.dedup_corpus import perl_sections

    texts = perl_sections(shared_data)[:300] + ["A\x1cB c_d e-f", "don't STOP\tme now!!", "x\x00y z", " \n "]
    texts += [
        "«Bonjour» — le monde… ‘quoted’ Ünïcode\u00a0nbsp\u2003em",
        "日本語の文章、です。 テスト",
        "emoji 😀 mixed𝒳𝒴 text\u3000ideo space İstanbul ß ΣΑΣ",
        "combining e\u0301 and \u200b zero width",
    ]
    m = MinHasher()
    assert (m.signatures(texts) == m.signatures_of_normalized([normalize_text(t) for t in texts])).all()


def test_empty_and_short_documents():
    sigs = MinHasher().signatures(["", "!!! ...", "two words", "two  WORDS!"])
    assert is_empty(sigs).tolist() == [True, True, False, False]
    assert (sigs[2] == sigs[3]).all() and (sigs[2] < EMPTY).all()


def test_estimated_jaccard_is_unbiased(shared_data):
    from tests.dedup.dedup_corpus import perl_sections

    rnd = random.Random(1)
    base = [t for t in perl_sections(shared_data) if len(t.split()) > 150][:60]
    pairs = []
    for t in base:
        words = t.split()
        for _ in range(3):
            w = list(words)
            for i in rnd.sample(range(len(w)), rnd.randrange(1, len(w) // 8)):
                w[i] = f"zz{rnd.randrange(10**9)}"
            pairs.append((t, " ".join(w)))
    m = MinHasher()
    sa = m.signatures([p[0] for p in pairs])
    sb = m.signatures([p[1] for p in pairs])
    est = (sa == sb).mean(axis=1)
    true = np.array(
        [
            len(shingle_values(x) & shingle_values(y)) / len(shingle_values(x) | shingle_values(y))
            for x, y in pairs
        ]
    )
    assert abs(float((est - true).mean())) < 0.02  # unbiased: the mean error vanishes
    assert float(np.abs(est - true).mean()) < 0.06  # and each is within about one binomial sigma (~0.045)


def test_band_keys_are_equal_exactly_when_the_band_is():
    m = MinHasher()
    sigs = m.signatures(
        ["alpha beta gamma delta epsilon zeta eta theta"] * 2 + ["something else entirely here"]
    )
    sigs[1, 8] ^= 1  # perturb one value of band 1
    keys = m.band_keys(sigs)
    assert keys.shape == (3, 14, 18)
    assert [int.from_bytes(keys[0, i, :2].tobytes(), "big") for i in range(14)] == list(range(14))
    same = [(keys[0, i] == keys[1, i]).all() for i in range(14)]
    assert same == [i != 1 for i in range(14)]
    assert not any((keys[0, i] == keys[2, i]).all() for i in range(14))


@pytest.mark.parametrize("bands,rows", [(14, 8), (20, 5)])
def test_detection_rate_follows_the_s_curve(bands, rows):
    """Pairs of known Jaccard 0.5 ... 0.95 share a band with probability 1-(1-s^r)^b, within sampling error."""
    rnd = random.Random(bands * 100 + rows)
    params = MinHashParams(num_perm=bands * rows, bands=bands, rows=rows, seed=bands)
    m = MinHasher(params)
    levels = [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
    for target in levels:
        pairs = [planted_pair(rnd, 80, target, shingle_values) for _ in range(120)]
        ka = m.band_keys(m.signatures([p[0] for p in pairs]))
        kb = m.band_keys(m.signatures([p[1] for p in pairs]))
        detected = (ka == kb).all(axis=2).any(axis=1)
        expected = np.array([lsh_probability(p[2], bands, rows) for p in pairs])
        sigma = np.sqrt((expected * (1 - expected)).sum()) + 1.0
        assert abs(detected.sum() - expected.sum()) <= 4 * sigma, (target, detected.sum(), expected.sum())


def test_the_code_point_table_follows_the_normalization_regexes_everywhere():
    """Every code point (surrogates included) is classed as ``normalize_text``'s regexes class it, checked
    a block of code points at a time."""
    import re

    from mpi_kernels.minhash import codepoint_classes

    table = codepoint_classes()
    assert table.shape == (0x110000,)
    for lo in range(0, 0x110000, 1 << 16):
        block = "".join(chr(c) for c in range(lo, lo + (1 << 16)))
        want = [0 if re.match(r"[^\w\s]", ch) else 2 if re.match(r"\s", ch) else 1 for ch in block]
        assert table[lo : lo + (1 << 16)].tolist() == want, hex(lo)


def test_texts_within_the_bmp_use_its_table_and_give_the_signatures_of_the_full_one(monkeypatch):
    """Without a 4-byte UTF-8 sequence the kernel gets the BMP's part of the code point table (the same
    classes as the whole table's); a batch with one gets the whole table; the signatures are the same."""
    import mpi_kernels.minhash as mh

    full = mh.codepoint_classes()
    assert (mh.codepoint_classes(mh.BMP) == full[: mh.BMP]).all()
    bmp = ["Ça va, déjà vu — naïve café résumé " * 4, "Straße ΑΒΓ δέλτα «quoted» ünïcödé " * 4]
    astral = ["emoji 😀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 letters " * 4]
    m = MinHasher()
    want = {name: m.signatures(texts) for name, texts in (("bmp", bmp), ("astral", astral))}
    seen = []
    monkeypatch.setattr(mh, "codepoint_classes", lambda limit=0x110000: seen.append(limit) or full)
    assert (m.signatures(bmp) == want["bmp"]).all() and (m.signatures(astral) == want["astral"]).all()
    assert seen == [mh.BMP, 0x110000]
