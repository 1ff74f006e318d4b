"""The fastText quality classifier: a score in [0, 1] that a document reads like the trusted sources.

Default recipe (``corpus train-quality``, see docs/ingest-and-filters.md):

* positives (``__label__hq``): documents of the trusted tiers (curated, books), cut into passages of
  about ``PASSAGE_WORDS`` words so a long manual gives many examples;
* negatives (``__label__lq``): web documents that the Gopher/C4 signals call low quality
  (:func:`is_low_quality_web`: short, mostly non-words, repetitive, bullet or boilerplate lines);
* the larger class is cut to the size of the smaller one, keeping the examples with the smallest
  ``stable_hash64(seed, text)``, and the rest is shuffled by the same hash: no RNG, so the same
  inputs and seed give the same training file, and fastText with one thread gives the same model.

The model file is named by content: its sha256 is what the annotate stage records in the manifest.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from corpus.digest import file_sha256, stable_hash64
from corpus.filters.heuristics import heuristic_signals

HQ, LQ = "__label__hq", "__label__lq"
PASSAGE_WORDS = 200
MAX_WORDS = 1000  # the classifier reads a document's first words only
POSITIVE_TIERS = ("curated", "books")
NEGATIVE_TIERS = ("web",)
#: the default model, trained by the project on its own bundled sample (see docs for the command)
DEFAULT_MODEL = Path(__file__).resolve().parent / "models" / "quality-default.ftz"

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def quality_features(text: str) -> str:
    """The one line fastText sees: lower-cased word and punctuation tokens, digits folded to 0."""
    toks = _TOKEN.findall(text.lower())[:MAX_WORDS]
    return re.sub(r"\d", "0", " ".join(toks))


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


def is_low_quality_web(text: str) -> bool:
    """The negative-label rule of the default recipe, from the Gopher/C4 signals."""
    s = heuristic_signals(text)
    return (
        s["word_count"] < 80
        or s["alpha_word_fraction"] < 0.7
        or s["dup_line_fraction"] > 0.3
        or s["bullet_line_fraction"] > 0.6
        or s["terminal_punct_line_fraction"] < 0.15
    )


def passages(text: str, size: int = PASSAGE_WORDS) -> list[str]:
    ws = text.split()
    return [" ".join(ws[i : i + size]) for i in range(0, len(ws), size) if len(ws[i : i + size]) >= size // 4]


def label_documents(docs: Iterable[tuple[str, str]], seed: int = 0) -> tuple[list[str], dict[str, int]]:
    """fastText training lines from (tier, text) pairs by the default recipe, balanced and ordered by hash."""
    pos: list[str] = []
    neg: list[str] = []
    seen = 0
    for tier, text in docs:
        seen += 1
        if tier in POSITIVE_TIERS:
            pos.extend(quality_features(p) for p in passages(text))
        elif tier in NEGATIVE_TIERS and is_low_quality_web(text):
            neg.append(quality_features(text))
    pos = [p for p in pos if p]
    neg = [n for n in neg if n]
    n = min(len(pos), len(neg))
    if n == 0:
        raise ValueError(
            f"cannot train: {len(pos)} positive and {len(neg)} negative examples from {seen} documents"
        )

    def pick(lines: list[str]) -> list[str]:
        return sorted(lines, key=lambda t: (stable_hash64(seed, t), t))[:n]

    lines = [f"{HQ} {t}" for t in pick(pos)] + [f"{LQ} {t}" for t in pick(neg)]
    lines.sort(key=lambda t: (stable_hash64(seed, "order", t), t))
    return lines, {
        "documents": seen,
        "positive_available": len(pos),
        "negative_available": len(neg),
        "per_class": n,
    }


def train_model(lines: list[str], out: Path, params: TrainParams) -> str:
    """Train, quantize and save a fastText model from labelled lines; returns its ``sha256:`` hash."""
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
        os.replace(tmp_out, out)
    return "sha256:" + file_sha256(out)


def train_params_dict(params: TrainParams) -> dict:
    return asdict(params)


class QualityModel:
    """A trained classifier; ``score`` is the probability of ``__label__hq``."""

    def __init__(self, path: Path) -> None:
        import fasttext

        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(
                f"quality model not found: {self.path} (train one with `corpus train-quality`)"
            )
        self.hash = "sha256:" + file_sha256(self.path)
        self._model = fasttext.load_model(str(self.path))

    def score(self, text: str) -> float:
        line = quality_features(text)
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
