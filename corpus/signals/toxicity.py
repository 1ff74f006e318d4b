"""English toxicity, stored as values for versions to choose on: the share of a document's lines a
shipped profanity model scores as profane (``toxic_line_fraction``) and its highest line (``toxicity_max``).

The model is alt-profanity-check's (a scikit-learn linear model over tf-idf word vectors, trained
on short comments and shipped inside the package: nothing is downloaded), so lines are scored, not the
page; a line needs ``MIN_LINE_WORDS`` words and a document is read up to ``MAX_LINES`` lines (bounded
time per document). The scores are rounded to 6 digits, so a build's bytes do not hang on the last
bits of a dot product. ``toxicity_model_id`` (the package version and its model files' digest) goes
into annotate's config. Seed 002 §4.4: toxicity is a tag for downweighting, never a silent drop.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from functools import lru_cache
from importlib import resources
from itertools import repeat
from typing import Any

import numpy as np

#: the languages the model was trained for
LANGS = frozenset({"en"})
#: a line's probability from which it counts as profane
TOXIC_PROB = 0.5
MIN_LINE_WORDS = 3
MAX_LINES = 2000
_FILES = ("vectorizer.joblib", "model.joblib")


@lru_cache(maxsize=1)
def toxicity_model_id() -> str:
    """``alt-profanity-check==VERSION+sha256:…`` over the model files it ships."""
    h = hashlib.sha256()
    for name in _FILES:
        h.update((resources.files("profanity_check") / "data" / name).read_bytes())
    return f"alt-profanity-check=={importlib.metadata.version('alt-profanity-check')}+sha256:{h.hexdigest()[:16]}"


@lru_cache(maxsize=1)
def _model() -> tuple[Any, Any]:
    """The package's (vectorizer, calibrated classifier), loaded by the package on import."""
    from profanity_check import profanity_check

    return profanity_check.vectorizer, profanity_check.model


@lru_cache(maxsize=1)
def _linear() -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The classifier as arrays: per calibrated fold its LinearSVC weights and intercept and its sigmoid
    calibration (a, b). ``predict_proba`` costs ~3 ms of argument checks a call, most of what scoring a
    page cost (195 CPU-s per GB of text); the same arithmetic as one sparse product costs ~1 %."""
    vectorizer, model = _model()
    folds = model.calibrated_classifiers_
    weights = np.stack([f.estimator.coef_.ravel() for f in folds]).T
    intercept = np.array([float(np.ravel(f.estimator.intercept_)[0]) for f in folds])
    a = np.array([f.calibrators[0].a_ for f in folds])
    b = np.array([f.calibrators[0].b_ for f in folds])
    return vectorizer, weights, intercept, a, b


#: what the lines are joined with to find every line's words in one pass: a word no lower-cased line can
#: hold (``lower`` leaves no ``Q``), looked up as ``_BREAK``
_JOIN, _BREAK = " QQ ", -2


@lru_cache(maxsize=1)
def _terms() -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The vectorizer as a word finder and arrays: its token pattern's ``findall``, a lookup of a word's
    term number (-1 for none, ``_BREAK`` for the join), each term's idf, and its idf times each fold's
    weight. Stop words are never in the vocabulary (it was fitted without them), so looking a word up
    drops them as the analyzer does."""
    vectorizer, weights, intercept, a, b = _linear()
    vocabulary = vectorizer.vocabulary_
    if set(vectorizer.get_stop_words() or ()) & vocabulary.keys() or _JOIN.strip() in vocabulary:
        raise ValueError("the toxicity vectorizer's vocabulary holds stop words or upper case")
    idf = np.asarray(vectorizer.idf_, dtype=np.float64)
    # sklearn's default pattern finds maximal runs of two or more word characters: so does \w{2,}
    # scanning left to right (it never starts inside a run), without testing a boundary at each step
    default = vectorizer.token_pattern == r"(?u)\b\w\w+\b"
    findall = re.compile(r"\w{2,}" if default else vectorizer.token_pattern).findall
    lookup = {**vocabulary, _JOIN.strip(): _BREAK}.get
    return findall, lookup, idf, idf[:, None] * weights, intercept, a, b


def line_probabilities(lines: list[str]) -> np.ndarray:
    """The model's probability that each line is profane: ``predict_proba``'s (the mean over the folds
    of the calibrated sigmoid of the SVM's decision on the line's l2-normalized tf-idf vector), computed
    directly from the words found (the vectorizer's ``transform`` looks them up one by one in Python,
    then builds a sparse matrix: most of what scoring cost). The words of every line are found in one
    pass over the lines joined (the token pattern's words never span the join's spaces)."""
    findall, lookup, idf, idf_weights, intercept, a, b = _terms()
    words = findall(_JOIN.join([line.lower() for line in lines]))
    found = np.fromiter(map(lookup, words, repeat(-1, len(words))), dtype=np.int64, count=len(words))
    line_of = np.cumsum(found == _BREAK)
    known = found >= 0
    rows, cols = line_of[known], found[known]
    # each line's vector: count x idf per distinct term, divided by its l2 norm (a line without a known
    # term stays zero, as sklearn's normalize leaves it)
    keys, counts = np.unique(rows * idf.shape[0] + cols, return_counts=True)
    norm = np.sqrt(np.bincount(keys // idf.shape[0], (counts * idf[keys % idf.shape[0]]) ** 2, len(lines)))
    norm[norm == 0] = 1.0
    dot = np.stack(
        [np.bincount(rows, idf_weights[cols, f], len(lines)) for f in range(idf_weights.shape[1])], axis=1
    )
    decision = dot / norm[:, None] + intercept
    return (1.0 / (1.0 + np.exp(a * decision + b))).mean(axis=1)


def toxicity_signals(text: str) -> dict[str, float]:
    """``toxic_line_fraction`` and ``toxicity_max`` of an English text (both 0.0 without a scored line)."""
    enough = MIN_LINE_WORDS - 1  # a line with that many words splits into MIN_LINE_WORDS pieces at most
    lines = [ln for ln in text.splitlines() if len(ln.split(None, enough)) > enough][:MAX_LINES]
    if not lines:
        return {"toxic_line_fraction": 0.0, "toxicity_max": 0.0}
    p = line_probabilities(lines)
    return {
        "toxic_line_fraction": round(float(np.count_nonzero(p >= TOXIC_PROB)) / len(lines), 6),
        "toxicity_max": round(float(p.max()), 6),
    }
