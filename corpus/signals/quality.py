"""The fastText quality classifier: a score in [0, 1] that a document reads like the positives it was
trained on -- for the languages it was trained for, and no score at all for any other.

A model is ``MODEL.ftz`` with the languages it scores written into the file itself
(:func:`read_languages`), so its sha256 (:attr:`QualityModel.hash`) covers them, and its card
``MODEL.ftz.json`` (labels, counts and held-out precision / recall / AUC per language). An example is
what is scored (:func:`quality_features`); the held-out split is by group (:func:`split_group`, merged
over :func:`near_pairs`), so no held-out example nor a near copy of one trained the model; the same
examples and parameters give the same bytes. Examples, split, languages, training, identity:
docs/ingest-and-filters.md ("The quality classifier and `corpus train-quality`").
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import re
import tempfile
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from corpus.formats.docshard import atomic_write_json
from corpus.model.digest import file_sha256, stable_hash64
from corpus.signals.heuristics import heuristic_signals
from corpus.signals.langid import identify_language

HQ, LQ = "__label__hq", "__label__lq"
CLASSES = ("hq", "lq")
MAX_WORDS = 1000  # the classifier reads a document's first tokens only
#: 2: characters of unspaced scripts (Han, kana, Thai, ...) are tokens of their own
FEATURES_VERSION = 2
CARD_FORMAT = "corpus-quality-model/2"
POSITIVE_TIERS = ("curated", "books")
NEGATIVE_TIERS = ("web",)
#: defaults of the split, the language minimums and the decision threshold of the evaluation
TEST_PERCENT = 30
MIN_TRAIN = 8
MIN_TEST = 3
THRESHOLD = 0.5
#: the default model, trained by the project on the shared crawl (see docs for the command)
DEFAULT_MODEL = Path(__file__).resolve().parent / "models" / "quality-default.ftz"

#: letters of scripts written without spaces between words: each one is a token
_UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029"  # Han radicals, iteration marks, numerals
    "\u3040-\u30ff\u31f0-\u31ff"  # kana
    "\u3100-\u312f\u31a0-\u31bf"  # Bopomofo
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\uff66-\uff9f"  # half-width katakana
    "\U00020000-\U0003ffff"  # Han extensions
)
_TOKEN = re.compile(rf"[{_UNSPACED}]|(?:(?![{_UNSPACED}])\w)+|[^\w\s]", re.UNICODE)
_DIGIT = re.compile(r"\d")


def quality_features(text: str) -> str:
    """The one line fastText sees: lower-cased word and punctuation tokens (each letter of an unspaced
    script a token), digits folded to 0, the first ``MAX_WORDS`` tokens."""
    toks = []
    for m in _TOKEN.finditer(text.lower()):
        toks.append(m.group())
        if len(toks) == MAX_WORDS:
            break
    return _DIGIT.sub("0", " ".join(toks))


@dataclass(frozen=True)
class TrainParams:
    dim: int = 16
    epoch: int = 25
    lr: float = 0.5
    word_ngrams: int = 2
    bucket: int = 20_000
    min_count: int = 3
    seed: int = 0
    cutoff: int = 20_000  # quantization keeps this many words and n-grams: the model stays small


def train_params_dict(params: TrainParams) -> dict:
    return asdict(params)


# -- examples and their labels ---------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    features: str  # quality_features of the text
    label: str  # "hq" or "lq"
    lang: str
    group: str  # the split group: every example of a group is on the same side
    source: str = ""  # where it came from (a file, a tier), for the card's counts


def parse_label(value: Any) -> str:
    """``hq`` / ``lq`` from the spellings a labelled file may use (hq, lq, __label__hq, 1, 0, true,
    false, positive, negative, pos, neg)."""
    v = str(value).strip().lower().removeprefix("__label__")
    if v in ("hq", "1", "true", "positive", "pos", "high"):
        return "hq"
    if v in ("lq", "0", "false", "negative", "neg", "low"):
        return "lq"
    raise ValueError(f"label {value!r} is neither hq (1, positive) nor lq (0, negative)")


#: language tags (ISO 639-1 with an optional region or script: de, pt-BR, zh_CN, zh-hans) and CPU
#: architectures as they appear in documentation URLs
_LANG_TAG = re.compile(r"^[a-z]{2}(?:[-_](?:[a-z]{2}|hans|hant|latn|cyrl))?$")
_ARCHES = {"amd64", "arm64", "i386", "armhf", "armel", "mips64el", "mipsel", "ppc64el", "s390x", "riscv64"}


def _untagged(token: str) -> bool:
    return not (_LANG_TAG.match(token) or token in _ARCHES)


def split_group(url: str) -> str:
    """The split group of a page: its URL, lower-cased, without scheme, query and fragment, with every
    language or architecture tag removed -- as a host label's suffix (``maint-guide-zh-cn``), a path
    segment (``/de/``, ``/pt-BR/``), a segment's suffix (``-amd64``) or a file name's inner extension
    (``index.fr.html``). A page's translations and architecture variants share a group. Removing a
    token that only looks like a tag (``/it/``) makes groups coarser, never finer."""
    u = url.lower().split("#", 1)[0].split("?", 1)[0]
    u = u.split("://", 1)[-1]
    host, _, path = u.partition("/")

    def strip_suffixes(part: str) -> str:
        words = part.split("-")
        while len(words) > 1:
            if len(words) > 2 and _LANG_TAG.match(f"{words[-2]}-{words[-1]}"):  # zh-cn, pt-br
                words = words[:-2]
            elif not _untagged(words[-1]):
                words = words[:-1]
            else:
                break
        return "-".join(words)

    labels = host.split(".")
    labels[0] = strip_suffixes(labels[0])
    segs = []
    for seg in path.split("/"):
        if not seg or not _untagged(seg):
            continue
        name, dot, ext = seg.rpartition(".")
        if dot and "." in name:  # index.fr.html, basic-defs.zh-cn.html
            stem, _, tag = name.rpartition(".")
            if not _untagged(tag):
                seg = f"{stem}.{ext}"
        segs.append(strip_suffixes(seg))
    return ".".join(labels) + "/" + "/".join(segs)


def held_out(group: str, seed: int = 0, test_percent: int = TEST_PERCENT) -> bool:
    """Whether the examples of ``group`` are in the held-out split."""
    return stable_hash64(seed, "split", group) % 100 < test_percent


def make_example(
    text: str,
    label: str,
    lang: str | None = None,
    group: str | None = None,
    url: str | None = None,
    source: str = "",
) -> Example | None:
    """An example (None when the text has no token). Language: ``lang``, else lid.176's on the text
    (what annotate stores); group: ``group``, else :func:`split_group` of ``url``, else the text's own
    hash (an unrelated text is its own group)."""
    features = quality_features(text)
    if not features:
        return None
    if not lang:
        lang = identify_language(text).lang
    if not group:
        group = split_group(url) if url else "text:" + hashlib.sha256(features.encode()).hexdigest()[:32]
    return Example(features, parse_label(label), lang, group, source)


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def read_labelled_jsonl(path: Path, label: str | None = None) -> Iterator[Example]:
    """Examples of a JSONL file (``.gz`` too), a line each: ``{"text": ..., "label": "hq"|"lq"}``, or
    without ``label`` when the whole file is of one class (``label`` given: positives / negatives by
    source). Optional keys: ``lang`` (else lid.176 on the text), ``group`` (else the split group of
    ``url``, else the text's hash). A line without text, or whose text has no token, is skipped."""
    with _open_text(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                text = rec.get("text") or ""
                if not isinstance(text, str):
                    raise ValueError('"text" is not a string')
                lab = label if label is not None else rec.get("label")
                if lab is None:
                    raise ValueError('no "label" (give the file as --positive or --negative instead)')
                ex = make_example(
                    text, lab, rec.get("lang"), rec.get("group"), rec.get("url"), source=path.name
                )
            except (ValueError, AttributeError) as e:
                raise ValueError(f"{path}:{n}: {e}") from e
            if ex is not None:
                yield ex


def is_low_quality_web(text: str, lang: str | None = None) -> bool:
    """The negative-label rule of the tier recipe (``--from``), from the Gopher/C4 signals of ``text``
    in its language (its own segmenter and stop words; English rules when ``lang`` is unknown)."""
    s = heuristic_signals(text, lang)
    return (
        s["word_count"] < 80
        or s["alpha_word_fraction"] < 0.7
        or s["dup_line_fraction"] > 0.3
        or s["bullet_line_fraction"] > 0.6
        or s["terminal_punct_line_fraction"] < 0.15
    )


def tier_label(tier: str, text: str, lang: str | None = None) -> str | None:
    """The tier recipe: documents of trusted tiers are ``hq``, web documents the Gopher/C4 signals
    call low quality ``lq``, the rest no example."""
    if tier in POSITIVE_TIERS:
        return "hq"
    if tier in NEGATIVE_TIERS and is_low_quality_web(text, lang):
        return "lq"
    return None


#: the navigation rule of the default model's labels (bench/quality_labels.py)
NAVIGATION_LINK_DENSITY = 0.5
PROSE_LINK_DENSITY = 0.2
PROSE_MIN_WORDS = 100


def link_density(html: str) -> float:
    """The share of a page's visible body text (whitespace collapsed) that is the text of links."""
    import lxml.html

    try:
        root = lxml.html.fromstring(html.encode("utf-8", "replace"))
    except (ValueError, lxml.etree.ParserError):
        return 0.0
    for bad in root.xpath("//script|//style|//head|//noscript"):
        bad.drop_tree()
    body = root.find("body")
    body = root if body is None else body
    total = len(" ".join(body.text_content().split()))
    links = sum(len(" ".join(a.text_content().split())) for a in body.iter("a"))
    return round(links / total, 6) if total else 1.0


def structure_label(html: str, text: str) -> str | None:
    """The default model's rule for a crawled page, from its markup (the classifier sees only the
    extracted text): ``lq`` when at least half its visible text is link text (tables of contents,
    indexes, navigation and link pages); ``hq`` when under a fifth is and the extracted main text has
    at least 100 words (:func:`word_count`); otherwise no label."""
    d = link_density(html)
    if d >= NAVIGATION_LINK_DENSITY:
        return "lq"
    if d < PROSE_LINK_DENSITY and word_count(text) >= PROSE_MIN_WORDS:
        return "hq"
    return None


def word_count(text: str) -> int:
    """Words of ``text`` as the features cut them: runs of word characters, each letter of an
    unspaced script (Han, kana, Thai, ...) one word; punctuation is not a word."""
    return sum(1 for m in _TOKEN.finditer(text) if m.group()[0].isalnum() or m.group()[0] == "_")


# -- split, training, evaluation ---------------------------------------------------------------------


def split_examples(
    examples: Iterable[Example], seed: int = 0, test_percent: int = TEST_PERCENT
) -> tuple[list[Example], list[Example], int]:
    """(train, held out, groups merged): groups holding near copies of each other (:func:`near_pairs`)
    are merged first, each cluster named by its smallest group, so no held-out example has a near copy
    in training; then a cluster is held out by :func:`held_out` of its name. The examples come back
    with the cluster's name as their group."""
    examples = list(examples)
    parent: dict[str, str] = {ex.group: ex.group for ex in examples}

    def root(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    merged = 0
    for i, j in near_pairs([ex.features for ex in examples]):
        a, b = root(examples[i].group), root(examples[j].group)
        if a != b:
            a, b = min(a, b), max(a, b)
            parent[b] = a
            merged += 1
    train, test = [], []
    for ex in examples:
        g = root(ex.group)
        ex = ex if g == ex.group else replace(ex, group=g)
        (test if held_out(g, seed, test_percent) else train).append(ex)
    return train, test, merged


def class_counts(examples: Iterable[Example]) -> dict[str, dict[str, int]]:
    c: dict[str, Counter] = defaultdict(Counter)
    for ex in examples:
        c[ex.lang][ex.label] += 1
    return {lang: {k: c[lang][k] for k in CLASSES} for lang in sorted(c)}


def trained_languages(
    train: list[Example], test: list[Example], min_train: int = MIN_TRAIN, min_test: int = MIN_TEST
) -> list[str]:
    """Languages with at least ``min_train`` training and ``min_test`` held-out examples of each class."""
    tr, te = class_counts(train), class_counts(test)
    return sorted(
        lang
        for lang in tr
        if min(tr[lang].values()) >= min_train and min(te.get(lang, {"hq": 0, "lq": 0}).values()) >= min_test
    )


def training_lines(train: list[Example], seed: int = 0) -> list[str]:
    """fastText lines, the classes balanced per language (the smaller repeated up to the larger's size,
    the remainder the smallest ``stable_hash64``), ordered by hash: no RNG."""
    by_lang: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"hq": [], "lq": []})
    for ex in train:
        by_lang[ex.lang][ex.label].append(ex.features)
    lines: list[tuple[int, str]] = []
    for lang in sorted(by_lang):
        classes = by_lang[lang]
        n = max(len(v) for v in classes.values())
        for label, feats in classes.items():
            if not feats:
                continue
            feats = sorted(feats, key=lambda t: (stable_hash64(seed, t), t))
            reps, rest = divmod(n, len(feats))
            chosen = feats * reps + feats[:rest]
            prefix = HQ if label == "hq" else LQ
            for i, t in enumerate(chosen):
                line = f"{prefix} {t}"
                lines.append((stable_hash64(seed, "order", i, line), line))
    lines.sort()
    return [line for _, line in lines]


#: the model file's last line names the languages it scores (fastText stops reading before it)
_TRAILER = b"\n#corpus-quality-model languages="


def read_languages(path: Path) -> list[str] | None:
    """The languages a model file scores (its trailer line), None for a file without one (a model
    trained before models named their languages: it scores every language)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 65536))
        tail = f.read()
    at = tail.rfind(_TRAILER)
    if at < 0 or not tail.endswith(b"\n") or b"\n" in tail[at + len(_TRAILER) : -1]:
        return None
    names = tail[at + len(_TRAILER) : -1].decode("ascii")
    return names.split(",") if names else []


def train_model(lines: list[str], out: Path, params: TrainParams, languages: list[str] | None = None) -> str:
    """Train, quantize and save a fastText model from labelled lines, with ``languages`` written into the
    file (:func:`read_languages`; None: none, the model scores every language); returns its ``sha256:``."""
    import fasttext

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        train_file = Path(tmp) / "train.txt"
        train_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        model = fasttext.train_supervised(
            input=str(train_file),
            dim=params.dim,
            epoch=params.epoch,
            lr=params.lr,
            wordNgrams=params.word_ngrams,
            bucket=params.bucket,
            minCount=params.min_count,
            seed=params.seed,
            thread=1,
            verbose=0,
        )
        model.quantize(
            input=str(train_file), qnorm=True, retrain=False, cutoff=params.cutoff, thread=1, verbose=0
        )
        tmp_out = out.with_name(f".{out.name}.tmp.{os.getpid()}")
        model.save_model(str(tmp_out))
        if languages is not None:
            if any(not re.fullmatch(r"[A-Za-z0-9_-]+", lang) for lang in languages):
                raise ValueError(f"language codes must be letters, digits, - or _: {languages}")
            with open(tmp_out, "ab") as f:
                f.write(_TRAILER + ",".join(sorted(languages)).encode("ascii") + b"\n")
        os.replace(tmp_out, out)
    return "sha256:" + file_sha256(out)


def auc(positives: list[float], negatives: list[float]) -> float | None:
    """Area under the ROC curve: the chance a random positive scores above a random negative (ties
    count half); None without both."""
    if not positives or not negatives:
        return None
    ranked = sorted([(s, 1) for s in positives] + [(s, 0) for s in negatives])
    rank_sum, i = 0.0, 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mid = (i + j + 1) / 2  # the mean rank (1-based) of the tied run
        rank_sum += mid * sum(1 for k in range(i, j) if ranked[k][1])
        i = j
    n_pos, n_neg = len(positives), len(negatives)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _r(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else round(v, 4)


def metrics(scored: list[tuple[str, float]], threshold: float = THRESHOLD) -> dict[str, Any]:
    """Precision and recall of ``hq`` at ``threshold`` (score >= threshold is called hq), AUC, counts."""
    pos = [s for label, s in scored if label == "hq"]
    neg = [s for label, s in scored if label == "lq"]
    tp = sum(1 for s in pos if s >= threshold)
    fp = sum(1 for s in neg if s >= threshold)
    return {
        "hq": len(pos),
        "lq": len(neg),
        "precision": _r(tp / (tp + fp)) if tp + fp else None,
        "recall": _r(tp / len(pos)) if pos else None,
        "lq_recall": _r(sum(1 for s in neg if s < threshold) / len(neg)) if neg else None,
        "auc": _r(auc(pos, neg)),
    }


def evaluate(
    model: QualityModel, test: list[Example], languages: list[str], threshold: float = THRESHOLD
) -> dict[str, Any]:
    """Per language of ``languages`` and over all of them: :func:`metrics` of the model's scores on the
    held-out examples."""
    scored: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for ex in test:
        if ex.lang in languages:
            scored[ex.lang].append((ex.label, model.score_features(ex.features)))
    every = [x for lang in languages for x in scored[lang]]
    return {
        "threshold": threshold,
        "by_lang": {lang: metrics(scored[lang], threshold) for lang in languages},
        "all": metrics(every, threshold),
    }


#: near copies: 5-token shingles (a fixed 1/8 of them, by crc32) overlapping by this Jaccard or more
NEAR_JACCARD = 0.7
_SHINGLE, _SHINGLE_KEEP, _COMMON = 5, 8, 200


def _shingles(features: str) -> set[int]:
    toks = features.split()
    grams = (" ".join(toks[i : i + _SHINGLE]) for i in range(max(1, len(toks) - _SHINGLE + 1)))
    return {h for g in grams if (h := zlib.crc32(g.encode())) % _SHINGLE_KEEP == 0}


def near_pairs(texts: list[str], jaccard: float = NEAR_JACCARD) -> Iterator[tuple[int, int]]:
    """Pairs (i, j), i < j, of texts whose sampled shingle sets overlap by at least ``jaccard``. A
    shingle shared by more than 200 texts (a template line) is not used to find candidates."""
    sets = [_shingles(t) for t in texts]
    index: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(sets):
        for h in s:
            index[h].append(i)
    for j, s in enumerate(sets):
        shared = Counter(i for h in s if len(index[h]) <= _COMMON for i in index[h] if i < j)
        for i, n in sorted(shared.items()):
            if n / (len(s) + len(sets[i]) - n) >= jaccard:
                yield i, j


def write_heldout(path: Path, test: list[Example], languages: list[str]) -> None:
    """The held-out examples of the scored languages, one JSON line each (features, label, lang, group),
    gzip without a timestamp: the card's numbers can be recomputed from it without the training data."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        for ex in sorted(test, key=lambda e: (e.lang, e.group, e.label, e.features)):
            if ex.lang in languages:
                rec = {"lang": ex.lang, "label": ex.label, "group": ex.group, "features": ex.features}
                gz.write((json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n").encode())
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)


def read_heldout(path: Path) -> list[Example]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [Example(r["features"], r["label"], r["lang"], r["group"]) for r in map(json.loads, f)]


def card_path(model: Path) -> Path:
    return model.with_name(model.name + ".json")


def heldout_path(model: Path) -> Path:
    return model.with_name(model.name.removesuffix(".ftz") + ".heldout.jsonl.gz")


def train_and_evaluate(
    examples: Iterable[Example],
    out: Path,
    params: TrainParams,
    *,
    test_percent: int = TEST_PERCENT,
    min_train: int = MIN_TRAIN,
    min_test: int = MIN_TEST,
    threshold: float = THRESHOLD,
    labels: dict[str, str] | None = None,
    trained_from: list[Any] | None = None,
    keep_heldout: bool = False,
) -> dict[str, Any]:
    """Split ``examples``, train on the training split of the languages with enough examples, evaluate
    on the held-out split; writes the model and its card (and with ``keep_heldout`` the held-out
    examples beside them). Returns the card. ValueError when no language has enough examples."""
    examples = list(examples)
    train, test, merged = split_examples(examples, params.seed, test_percent)
    languages = trained_languages(train, test, min_train, min_test)
    counts = {"train": class_counts(train), "test": class_counts(test)}
    if not languages:
        total = Counter(ex.label for ex in examples)
        raise ValueError(
            f"cannot train: {total['hq']} positive and {total['lq']} negative examples; no language has "
            f"{min_train} training and {min_test} held-out examples of each class ({_describe(counts)})"
        )
    train_in = [ex for ex in train if ex.lang in languages]
    test_in = [ex for ex in test if ex.lang in languages]
    lines = training_lines(train_in, params.seed)
    file_hash = train_model(lines, out, params, languages)
    card: dict[str, Any] = {
        "format": CARD_FORMAT,
        "sha256": file_hash,
        "languages": languages,
        "labels": labels or {},
        "features_version": FEATURES_VERSION,
        "params": train_params_dict(params),
        "trained_from": trained_from or [],
        "split": {
            "rule": (
                "group = the given group, else the URL without language and architecture tags; groups "
                f"with near copies (sampled 5-token shingles, Jaccard >= {NEAR_JACCARD}) merged; a group "
                'is held out when stable_hash64(seed, "split", group) % 100 < test_percent'
            ),
            "seed": params.seed,
            "test_percent": test_percent,
            "groups": {
                "train": len({ex.group for ex in train_in}),
                "test": len({ex.group for ex in test_in}),
            },
            "near_copy_merges": merged,
            "min_train_per_class": min_train,
            "min_test_per_class": min_test,
        },
        "examples": {
            "train": {lang: counts["train"][lang] for lang in languages},
            "test": {lang: counts["test"].get(lang, {"hq": 0, "lq": 0}) for lang in languages},
            "training_lines": len(lines),
            "left_out": {
                lang: sum(counts[s].get(lang, {}).get(c, 0) for s in ("train", "test") for c in CLASSES)
                for lang in sorted(set(counts["train"]) | set(counts["test"]))
                if lang not in languages
            },
            "by_source": dict(
                sorted(Counter(f"{ex.source}:{ex.label}" for ex in train_in + test_in).items())
            ),
        },
    }
    model = QualityModel(out, card=card)
    card["evaluation"] = evaluate(model, test_in, languages, threshold)
    atomic_write_json(card_path(out), card)
    if keep_heldout:
        write_heldout(heldout_path(out), test_in, languages)
    return card


def _describe(counts: dict[str, dict[str, dict[str, int]]]) -> str:
    langs = sorted(set(counts["train"]) | set(counts["test"]))
    z = {"hq": 0, "lq": 0}
    parts = [
        f"{lang}: train {counts['train'].get(lang, z)['hq']}/{counts['train'].get(lang, z)['lq']}, "
        f"held out {counts['test'].get(lang, z)['hq']}/{counts['test'].get(lang, z)['lq']}"
        for lang in langs[:12]
    ]
    return "hq/lq " + "; ".join(parts) + (" ..." if len(langs) > 12 else "") if parts else "none"


# -- scoring ---------------------------------------------------------------------------------------------


class QualityModel:
    """A trained classifier. ``score(text)`` is the probability of ``__label__hq``; ``score(text, lang)``
    is None for a language the model was not trained for. ``languages`` is None for a model file that
    names none (trained before models did): it scores every text. ``card`` is the card beside the file
    ({} without one); a card that describes another file, or other languages, is an error."""

    def __init__(self, path: Path, card: dict[str, Any] | None = None) -> None:
        import fasttext

        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(
                f"quality model not found: {self.path} (train one with `corpus train-quality`)"
            )
        self.hash = "sha256:" + file_sha256(self.path)
        langs = read_languages(self.path)
        self.languages: frozenset[str] | None = frozenset(langs) if langs is not None else None
        if card is None:
            cp = card_path(self.path)
            card = json.loads(cp.read_text(encoding="utf-8")) if cp.is_file() else {}
            if card.get("sha256") not in (None, self.hash):
                raise ValueError(
                    f"{cp} describes the model {card['sha256']}, not {self.path} ({self.hash}): "
                    "a card and its model travel together"
                )
            if "languages" in card and sorted(card["languages"]) != sorted(langs or []):
                raise ValueError(f"{cp} names languages {card['languages']}, the model file {langs}")
        self.card = card
        self._model = fasttext.load_model(str(self.path))

    def scores_language(self, lang: str) -> bool:
        return self.languages is None or lang in self.languages

    def score(self, text: str, lang: str | None = None) -> float | None:
        if lang is not None and not self.scores_language(lang):
            return None
        return self.score_features(quality_features(text))

    def score_features(self, line: str) -> float:
        if not line:
            return 0.0
        labels, probs = self._model.predict(line, k=2)
        p = dict(zip(labels, (float(x) for x in probs), strict=True))
        return round(min(max(p.get(HQ, 1.0 - p.get(LQ, 1.0)), 0.0), 1.0), 6)


@lru_cache(maxsize=4)
def load_quality_model(path: str) -> QualityModel:
    return QualityModel(Path(path))


def resolve_model_path(configured: str) -> Path:
    """The configured model path ("" = the default model the project ships)."""
    return Path(configured) if configured else DEFAULT_MODEL
