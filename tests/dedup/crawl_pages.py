"""Real Japanese and Chinese pages of the shared crawl, their text extracted as the pipeline does
(``corpus.text.warc.decode_html``, ``corpus.text.extract.extract_text`` and ``normalize_text``), and
graded near-duplicates made by editing them: characters or whole sentences replaced by real ones of
other pages of the same language."""

from __future__ import annotations

import random
import re
from pathlib import Path

from corpus.text.normalize import UNSPACED_LETTER, is_unspaced, normalize_text, shingle_units

#: the first crawl's file read (its first ~200 pages of each language are enough)
WARC = "warc/crawl-2026-03-part0.warc.gz"
#: a page's language from its URL: debian-faq, harden-doc, installation-guide, developers-reference and
#: maint-guide translations
URL_LANGUAGE = {
    "ja": re.compile(r"/ja(-JP)?/|\.ja\.html$|-ja\.docs\.|-ja/"),
    "zh": re.compile(r"/zh[-_](CN|cn)/|\.zh-cn\.html$|-zh-cn\.docs\.|-zh-cn/"),
}
#: a sentence: up to 。！？ (or their ASCII forms) and the line break after them, or up to a line break
SENTENCE = re.compile(r"[^。！？!?\n]*(?:[。！？!?]+\n?|\n)|[^。！？!?\n]+$")


def crawl_records(shared_data: Path, warcs: tuple[str, ...]):
    """The HTML responses (``RawRecord``) of the crawl files, in order."""
    from corpus.text.warc import RawRecord, iter_warc

    for warc in warcs:
        for rec in iter_warc(shared_data / warc):
            if isinstance(rec, RawRecord):
                yield rec


def page_text(rec) -> str:
    """A page's text as the extract stage gets it."""
    from corpus.text.extract import extract_text
    from corpus.text.extract import normalize_text as extract_normalize
    from corpus.text.warc import decode_html

    return extract_normalize(extract_text(decode_html(rec.payload, rec.content_type)[0]))


def crawl_pages(
    shared_data: Path,
    per_language: int,
    min_chars: int = 800,
    max_chars: int = 6_000,
    max_html: int = 40_000,
    warcs: tuple[str, ...] = (WARC,),
) -> dict[str, list[str]]:
    """The first ``per_language`` pages of each language of ``URL_LANGUAGE`` in the crawl files whose
    extracted text is shingled by characters (pages of these sites left in English are skipped) and has
    ``min_chars`` to ``max_chars`` characters of shingle units. Pages of more than ``max_html`` bytes are
    not extracted (a single-page manual takes trafilatura seconds)."""
    pages: dict[str, list[str]] = {lang: [] for lang in URL_LANGUAGE}
    for rec in crawl_records(shared_data, warcs):
        lang = next((lang for lang, url in URL_LANGUAGE.items() if url.search(rec.url)), None)
        if lang is None or len(pages[lang]) >= per_language or len(rec.payload) > max_html:
            continue
        text = page_text(rec)
        units, chars = shingle_units(text)
        if chars and min_chars <= len(units) <= max_chars:
            pages[lang].append(text)
        if all(len(p) >= per_language for p in pages.values()):
            break
    return pages


def shingle_set(text: str, n: int = 5) -> set[str]:
    """The shingles of a text as strings (its units' n-grams; what the kernel hashes)."""
    units, chars = shingle_units(text)
    width = min(n, len(units))
    if chars:
        joined = "".join(units)
        return {joined[i : i + width] for i in range(len(units) - width + 1)}
    return {" ".join(units[i : i + width]) for i in range(len(units) - width + 1)} if units else set()


def jaccard(a: set, b: set) -> float:
    return len(a & b) / max(len(a | b), 1)


def replace_characters(rnd: random.Random, text: str, rate: float, pool: str) -> str:
    """``text`` with ``rate`` of its letters of unspaced scripts replaced by random letters of ``pool``."""
    chars = list(text)
    where = [m.start() for m in UNSPACED_LETTER.finditer(text)]
    for i in rnd.sample(where, round(len(where) * rate)):
        chars[i] = rnd.choice(pool)
    return "".join(chars)


def sentences(text: str) -> list[str]:
    """The sentences of a text, in order; joined, they are the text."""
    return [s for s in SENTENCE.findall(text) if s]


def replace_sentences(rnd: random.Random, text: str, share: float, pool: list[str]) -> str:
    """``text`` with whole sentences replaced by sentences of ``pool`` (other pages), chosen at random
    until they hold ``share`` of the text's characters."""
    parts = sentences(text)
    order = rnd.sample(range(len(parts)), len(parts))
    goal, done = share * len(text), 0
    for i in order:
        if done >= goal:
            break
        done += len(parts[i])
        parts[i] = rnd.choice(pool)
    return "".join(parts)


def unspaced_pool(texts: list[str]) -> str:
    """Every letter of an unspaced script in ``texts`` (with repeats: drawn at their frequency)."""
    return "".join(UNSPACED_LETTER.findall("".join(texts)))


def sentence_pool(texts: list[str], min_chars: int = 12) -> list[str]:
    """The sentences of ``texts`` with at least ``min_chars`` characters that are shingled by characters."""
    return [s for t in texts for s in sentences(t) if len(s) >= min_chars and is_unspaced(normalize_text(s))]


def pools_of_others(texts: list[str]) -> list[tuple[str, list[str]]]:
    """For each text, the letters (``unspaced_pool``) and sentences (``sentence_pool``) of the others."""
    letters = [unspaced_pool([t]) for t in texts]
    sents = [sentence_pool([t]) for t in texts]
    return [
        ("".join(letters[:i] + letters[i + 1 :]), [s for o in sents[:i] + sents[i + 1 :] for s in o])
        for i in range(len(texts))
    ]


def graded_pair(rnd: random.Random, page: str, shingles: set, pools: tuple, target: float, by_sentence: bool):
    """The page and a copy edited to about Jaccard ``target`` of their character 5-grams, with real
    characters or sentences of the other pages (``pools``, from ``pools_of_others``): characters replaced
    at random (each touches 5 shingles: the kept share of shingles is (1-q)^5) or whole sentences (the
    kept share is about 1-f for a share f of the text); returns both and their exact Jaccard."""
    kept = 2 * target / (1 + target)  # J = kept / (2 - kept) for a copy of the same length
    if by_sentence:
        copy = replace_sentences(rnd, page, 1 - kept, pools[1])
    else:
        copy = replace_characters(rnd, page, 1 - kept ** (1 / 5), pools[0])
    return page, copy, jaccard(shingles, shingle_set(copy))


def scurve_points(texts: list[str], levels, repeats: int, seed: str, bands: int = 14, rows: int = 8):
    """Graded edits of every text at every level, ``repeats`` times (sentences on odd repeats, characters
    on even ones), each repeat with its own hash functions (``MinHashParams.seed``): per level, the
    (exact Jaccard, found) of every pair, found meaning the pair shares a band (``bands`` x ``rows``)."""
    from mpi_kernels.minhash import MinHasher, MinHashParams

    rnd = random.Random(seed)
    pools = pools_of_others(texts)
    shingles = [shingle_set(t) for t in texts]
    found: dict[float, list[tuple[float, bool]]] = {s: [] for s in levels}
    for r in range(repeats):
        m = MinHasher(MinHashParams(num_perm=bands * rows, bands=bands, rows=rows, seed=r))
        pairs = [
            (target, graded_pair(rnd, p, shingles[i], pools[i], target, by_sentence=r % 2 == 1))
            for target in levels
            for i, p in enumerate(texts)
        ]
        ka = m.band_keys(m.signatures([p[1][0] for p in pairs]))
        kb = m.band_keys(m.signatures([p[1][1] for p in pairs]))
        detected = (ka == kb).all(axis=2).any(axis=1)
        for (target, (_, _, j)), hit in zip(pairs, detected, strict=True):
            found[target].append((j, bool(hit)))
    return found
