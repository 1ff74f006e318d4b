"""The MinHash kernel: exact modular arithmetic, the documented hash family (word or character shingles,
chosen per document by script), and LSH that follows the S-curve."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from corpus.text.normalize import is_unspaced, normalize_text, shingle_units
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


def shingle_values(text: str, ngram: int = 5, char_ngram: int = 5) -> set[int]:
    """The documented shingle hashing, in plain Python: n-grams of the units of ``shingle_units``."""
    units, chars = shingle_units(text)
    words = [fnv1a(w.encode("utf-8", "surrogatepass")) for w in units]
    width = min(char_ngram if chars else ngram, len(words))
    out = set()
    for s in range(len(words) - width + 1) if words else ():
        h = 0xCBF29CE484222325
        for w in words[s : s + width]:
            h = ((h ^ w) * 0x100000001B3) & M64
        out.add(mix64(h) & MERSENNE_61)
    return out


def reference_signature(text: str, params: MinHashParams) -> list[int]:
    a, b = permutation_coefficients(params.num_perm, params.seed)
    xs = shingle_values(text, params.ngram, params.char_ngram)
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


#: one text per case of the script rule, with whether its shingles are characters
SCRIPTS = {
    "en": ("The quick brown fox jumps over the lazy dog, again and again.", False),
    "ja": ("インストール手順を示した公式の文書が Debian GNU/Linux インストールガイドです。", True),
    "zh": ("含有安装说明的官方文档是 Debian GNU/Linux 安装手册。我们将在这里提供一些额外信息。", True),
    "th": ("ภาษาไทยเขียนติดกันโดยไม่เว้นวรรคระหว่างคำ", True),
    "ko": ("한국어는 단어 사이에 띄어쓰기를 합니다. 데비안 설치 안내서", False),
    # mostly English with a few Chinese words: 4 Han letters against 38 Latin ones (3 x 4 < 38)
    "mixed-en": ("Install the package 软件包 with apt, then read the documentation 文档 first", False),
    # mostly Chinese with Latin terms: 21 Han letters against 35 Latin ones (3 x 21 >= 35)
    "mixed-zh": (
        "如果您使用 BIOS 配置为串口控制台的系统，那么可能在引导 installer 的时候无法看到 graphical boot menu",
        True,
    ),
    "fullwidth": ("ｆｕｌｌｗｉｄｔｈ ＡＳＣＩＩ is Latin after NFKC", False),
}


@pytest.mark.parametrize("lang", list(SCRIPTS))
def test_the_script_decides_between_word_and_character_shingles(lang):
    text, chars = SCRIPTS[lang]
    units, got = shingle_units(text)
    assert got is chars and is_unspaced(normalize_text(text)) is chars
    assert units == (list(normalize_text(text).replace(" ", "")) if chars else normalize_text(text).split())


def test_the_rule_counts_an_unspaced_letter_three_times_and_ignores_digits():
    """3 u >= o, u > 0: the boundary, digits and ``_`` are no letters, ASCII is never unspaced."""
    assert is_unspaced("abc 中") and not is_unspaced("abcd 中")  # 3 >= 3; 3 < 4
    assert is_unspaced("中 12345 67890 ___") and not is_unspaced("12345 ___") and not is_unspaced("")
    assert is_unspaced("々〇ー") and not is_unspaced("abc def")  # iteration mark, Han zero, long vowel


def test_signature_matches_the_documented_hash_family(shared_data):
    params = MinHashParams(num_perm=16, bands=4, rows=4)
    texts = [
        "The quick brown fox jumps over the lazy dog, again and again.",
        "Three short words",
        "",
        "Ünïcode «text» — with ‘quotes’ and ﬁ ligatures, ｆｕｌｌｗｉｄｔｈ too",
        "中文",  # fewer characters than n: one shingle
        "𠀀𠀁𠀂𠀃 four-byte Han, 😀 dropped",
    ] + [t for t, _ in SCRIPTS.values()]
    sigs = MinHasher(params).signatures(texts)
    for text, sig in zip(texts, sigs, strict=True):
        assert [int(v) for v in sig] == reference_signature(text, params)
    chars = MinHasher(replace(params, char_ngram=3)).signatures([SCRIPTS["zh"][0]])
    assert [int(v) for v in chars[0]] == reference_signature(SCRIPTS["zh"][0], replace(params, char_ngram=3))


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
    """Every code point (surrogates included) is classed as ``normalize_text``'s and ``is_unspaced``'s
    regexes class it (drop, letter, separator, letter of an unspaced script, other word character),
    checked a block of code points at a time."""
    import re

    from corpus.text.normalize import UNSPACED_SCRIPTS
    from mpi_kernels.minhash import codepoint_classes

    unspaced = np.zeros(0x110000, dtype=bool)
    for _, lo, hi in UNSPACED_SCRIPTS:
        unspaced[lo : hi + 1] = True

    def want(ch: str) -> int:
        if re.match(r"[^\w\s]", ch):
            return 0
        if re.match(r"\s", ch):
            return 2
        if re.match(r"[\d_]", ch):
            return 4
        return 3 if unspaced[ord(ch)] else 1

    table = codepoint_classes()
    assert table.shape == (0x110000,)
    for lo in range(0, 0x110000, 1 << 16):
        block = "".join(chr(c) for c in range(lo, lo + (1 << 16)))
        assert table[lo : lo + (1 << 16)].tolist() == [want(ch) for ch in block], hex(lo)


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
