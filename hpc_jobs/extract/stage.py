"""Stage ``extract``: HTML documents -> text documents; plain text passes through cleaned.

Two-pass by default: resiliparse's cheap first pass on every page, trafilatura only where the
``gate`` passes (the others filtered as ``gate_<signal>``). Every document is handled on its own and the shard always goes on: an oversized page is truncated,
a parse over ``time_limit_s`` or ``memory_limit_mb``, a crash or a mostly undecodable page is
quarantined, a page with no main text filtered (``no_text_extracted``). Documents of ``verbatim_tiers``
(``code``) keep their text as read. A kept text replaces its HTML (``Document.with_text``: new doc_id,
``derived_from`` the HTML's). The eval holdout ingest set aside is extracted the same way, PII-scrubbed
and written to ``holdout/NAME`` with the exact-dedup key of its text (annotation ``exact_key``); a
held-out page that gives no text is counted (``holdout_dropped``). docs/ingest-and-filters.md, "extract".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corpus.decont.holdout import HOLDOUT_KIND
from corpus.formats.docshard import SUFFIX, iter_docs, read_sidecar
from corpus.model import Annotation, Document, Filtered, Kept, Outcome, Quarantined, QuarantineRecord
from corpus.model.annotations import (
    GATE_FAILED,
    HOLDOUT_EXACT_KEY,
    HOLDOUT_PII,
    INVISIBLE_CHARS_REMOVED,
    TRUNCATED_HTML_BYTES,
    UTF8_REPAIRED_CHARS,
)
from corpus.model.digest import json_digest
from corpus.model.errors import UserError
from corpus.model.manifest import read_stage_manifest
from corpus.model.tiers import check_tier
from corpus.select.gate import gate_reason, parse_gate
from corpus.signals.pii import KINDS, scrub_pii
from corpus.text.extract import (
    EXTRACTORS,
    ExtractWorker,
    PageExtractor,
    PageText,
    cap_html,
    normalize_text,
    repair_replacement_chars,
    strip_invisible,
)
from corpus.text.known_bad import NO_LIST, read_known_bad
from corpus.text.normalize import KEY_VERSION, text_key
from runtime.input_shard import InputShard
from runtime.runner import Stage, StageContext, StageError, remove_stale_artifacts
from runtime.side_output import SideOutput

if TYPE_CHECKING:
    from hpc_jobs.extract.known_bad import KnownBadCheck

#: the extraction path of a config that names none, and why: docs/ingest-and-filters.md ("extract")
DEFAULT_EXTRACTOR = "two_pass"
#: the gate of a first-pass path that names none: calibrated on the shared crawls to pass every page
#: the default version selects there, with a margin below the policy's own thresholds (min_words 50,
#: min_lang_confidence 0.5): docs/ingest-and-filters.md ("extract")
DEFAULT_GATE = "words >= 20"


@dataclass(frozen=True, kw_only=True)
class ExtractConfig:
    max_html_bytes: int = 2_000_000  # pages are cut to this many bytes before parsing (0: no cap)
    time_limit_s: float = 30.0  # per document; a slower parse is killed and quarantined
    max_replacement_ratio: float = 0.01  # more U+FFFD than this share of the text -> quarantined
    memory_limit_mb: int = 1024  # the worker's peak resident memory per document (0: none)
    #: the PII kinds scrubbed from the stored eval holdout (corpus.signals.pii.KINDS: all of them)
    holdout_pii_kinds: list[str] = field(default_factory=lambda: list(KINDS))
    #: tiers whose text is kept exactly as read (no invisible-character stripping, no whitespace folding)
    verbatim_tiers: list[str] = field(default_factory=lambda: ["code"])
    #: the path (corpus.text.extract.EXTRACTORS): "two_pass" reads every page with resiliparse's cheap
    #: first pass and spends trafilatura only on the pages the gate passes (docs/ingest-and-filters.md)
    extractor: str = DEFAULT_EXTRACTOR
    #: which pages get the second pass: a predicate over first-pass signals (corpus.select.gate); left
    #: out: DEFAULT_GATE on the two first-pass paths, none on "trafilatura" (which has no first pass)
    gate: str | None = None
    #: the tiers the gate judges; a page of another tier always gets the second pass
    gate_tiers: list[str] = field(default_factory=lambda: ["web"])
    #: a file of exact keys and MinHash signatures of texts never to be stored (corpus known-bad-keys):
    #: a document whose text matches one is quarantined with its hashes only; "" = none. Recorded by name
    known_bad_keys: str = ""
    known_bad_sha256: str = ""  # filled in: the sha256 of the list's sorted entries; a value set here pins it
    known_bad_near_threshold: float = 0.8  # a near entry matches at this estimated Jaccard similarity or more

    def __post_init__(self) -> None:
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"extractor must be one of {', '.join(EXTRACTORS)}, not {self.extractor!r}")
        if self.extractor == "trafilatura" and self.gate:
            raise ValueError('a gate needs a first pass: extractor "two_pass" or "resiliparse"')
        for tier in self.gate_tiers:
            check_tier(tier)
        unknown = sorted(set(self.holdout_pii_kinds) - set(KINDS))
        if unknown:
            raise ValueError(
                f"holdout_pii_kinds: unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}"
            )
        for tier in self.verbatim_tiers:
            check_tier(tier)
        if not 0 < self.known_bad_near_threshold <= 1:
            raise ValueError("known_bad_near_threshold must be in (0, 1]")
        if self.time_limit_s <= 0:
            raise ValueError("time_limit_s must be positive")
        if self.memory_limit_mb < 0:
            raise ValueError("memory_limit_mb must be 0 (no limit) or positive")


#: the quarantine reason of a document whose text is on the known-bad list, exactly or nearly
KNOWN_BAD_REASONS = {"exact": "known_bad_content", "near": "known_bad_near"}

#: the quarantine reason of each way the worker can fail a document
_WORKER_REASONS = {
    "timeout": "extract_timeout",
    "memory_limit": "memory_limit",
    "crashed": "extract_crashed",
    "error": "extract_error",
}


class ExtractStage(Stage):
    name = "extract"
    # with the exact key's version: a new key redoes the holdout (docs/ingest-and-filters.md, "Stage versions")
    version = "6+key" + KEY_VERSION
    Config = ExtractConfig
    artifact_kinds = (HOLDOUT_KIND,)
    side_outputs = (SideOutput(HOLDOUT_KIND),)

    def __init__(self, config: ExtractConfig) -> None:
        # the gate as judged, in canonical spelling: the config (and its hash) records it, not a default
        gate = (
            "" if config.extractor == "trafilatura" else DEFAULT_GATE if config.gate is None else config.gate
        )
        try:
            self.gate = parse_gate(gate)
            known = read_known_bad(Path(config.known_bad_keys)) if config.known_bad_keys else NO_LIST
        except UserError as e:
            raise StageError(str(e)) from None
        digest = known.digest
        self.known_bad: KnownBadCheck | None = None
        if known:  # its MinHash kernels (numba: ~0.2 s of imports a rank) only where a list is given
            from hpc_jobs.extract.known_bad import KnownBadCheck

            self.known_bad = KnownBadCheck(known, config.known_bad_near_threshold)
        if config.known_bad_sha256 and config.known_bad_sha256 != digest:
            raise StageError(
                f"[extract] known_bad_sha256 = {config.known_bad_sha256} but the list has {digest}"
            )
        # the list by its file name and keys, never its path: the same list elsewhere is the same config
        name = Path(config.known_bad_keys).name if config.known_bad_keys else ""
        super().__init__(replace(config, gate=self.gate.text, known_bad_keys=name, known_bad_sha256=digest))
        self._worker: ExtractWorker | None = None
        self._held_out: dict[str, tuple[Path, str]] = {}

    def worker(self) -> ExtractWorker:
        if self._worker is None:
            self._worker = ExtractWorker(
                PageExtractor(self.config.extractor, self.gate),
                self.config.time_limit_s,
                warmup=("<p>x</p>", True),
                memory_limit_mb=self.config.memory_limit_mb,
            )
        return self._worker

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """The held-out pages of each input shard (ingest's ``holdout/`` files, by shard name); their
        digests are part of every shard's checkpoint key."""
        remove_stale_artifacts(ctx, inputs, HOLDOUT_KIND, (SUFFIX, SUFFIX + ".json"))
        m = read_stage_manifest(ctx.in_paths[0])
        names = {s.name for s in inputs}
        self._held_out = {}
        for ref in m.side_outputs if m is not None else ():
            name = Path(ref.path).name[: -len(SUFFIX)]
            if ref.path.startswith(HOLDOUT_KIND + "/") and ref.path.endswith(SUFFIX) and name in names:
                self._held_out[name] = (ctx.in_paths[0] / ref.path, ref.sha256)
        return json_digest(sorted([n, sha] for n, (_, sha) in self._held_out.items()))

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for doc in iter_docs(shard.path):
            yield self.process_doc(doc, ctx), len(doc.text.encode("utf-8"))
        self._extract_holdout(shard.name, ctx)

    def _extract_holdout(self, name: str, ctx: StageContext) -> None:
        """The shard's held-out pages, extracted as the corpus is, scrubbed, to ``holdout/NAME``; the
        pages that give no document are counted by reason in the file's sidecar."""
        holdout = ctx.side(HOLDOUT_KIND)
        dropped: Counter = Counter()
        held_out = 0
        if name in self._held_out:
            for doc in iter_docs(self._held_out[name][0]):
                held_out += 1
                outcome = self.process_doc(doc, ctx)
                if isinstance(outcome, Kept):
                    holdout.write_doc(self.scrubbed(outcome.doc, doc))
                else:
                    dropped[outcome.reason if isinstance(outcome, Filtered) else outcome.record.reason] += 1
        holdout.sidecar_extra.update({"held_out": held_out, "dropped": dict(sorted(dropped.items()))})

    def scrubbed(self, doc: Document, html: Document) -> Document:
        """A held-out page's extracted ``doc`` as the holdout stores it: PII scrubbed, ``derived_from``
        the held-out HTML document, with the exact key of its text before the scrub."""
        key = f"{KEY_VERSION}:{text_key(doc.text).hex()}"
        s = scrub_pii(doc.text, tuple(self.config.holdout_pii_kinds))
        counts = {kind: n for kind, n in s.counts().items() if n}
        out = replace(doc.with_text(s.text), derived_from=html.doc_id)
        return out.annotate(
            HOLDOUT_EXACT_KEY.note(key),
            *(HOLDOUT_PII.note(kind, n) for kind, n in sorted(counts.items())),
        )

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        kept = held_out = 0
        dropped: Counter = Counter()
        for s in inputs:
            sidecar = read_sidecar(ctx.artifact_path(HOLDOUT_KIND, f"{s.name}{SUFFIX}")) or {}
            kept += sidecar.get("records", 0)
            held_out += sidecar.get("held_out", 0)
            dropped.update(sidecar.get("dropped", {}))
        return {
            "holdout_docs": kept,
            "holdout_held_out": held_out,
            "holdout_dropped": dict(sorted(dropped.items())),
            "holdout_key_version": KEY_VERSION,
        }

    def quarantine(self, doc: Document, reason: str, detail: str) -> Quarantined:
        return Quarantined(
            QuarantineRecord(
                stage=self.name,
                reason=reason,
                raw_digest=doc.raw_digest,
                source=doc.source,
                url=doc.url,
                detail=detail,
                input_name=doc.doc_id,
                lang=doc.lang,
            )
        )

    def process_doc(self, doc: Document, ctx: StageContext) -> Outcome:
        """The document's text (:meth:`extracted`), unless it is known-bad content: then only its hashes
        are kept, in the quarantine (no text, URL or doc_id), and nothing of it goes on."""
        outcome = self.extracted(doc)
        if self.known_bad is not None and isinstance(outcome, Kept):
            match = self.known_bad.match(outcome.doc.text)
            if match is not None:
                return Quarantined(
                    QuarantineRecord(
                        stage=self.name,
                        reason=KNOWN_BAD_REASONS[match.kind],
                        raw_digest=doc.raw_digest,
                        source=doc.source,
                        detail=match.entry
                        if match.kind == "exact"
                        else f"{match.entry} {match.similarity:.3f}",
                    )
                )
        return outcome

    def extracted(self, doc: Document) -> Outcome:
        if doc.source_tier in self.config.verbatim_tiers:
            if not doc.text.strip():
                return Filtered(doc, "no_text_extracted")
            return Kept(doc.with_text(doc.text, content_type="text/plain"))
        notes: list[Annotation] = []
        if doc.content_type == "text/html":
            html, original_bytes = cap_html(doc.text, self.config.max_html_bytes)
            if original_bytes:
                notes.append(TRUNCATED_HTML_BYTES.note(original_bytes))
            result = self.worker().run((html, doc.source_tier in self.config.gate_tiers))
            if result.status != "ok":
                return self.quarantine(doc, _WORKER_REASONS[result.status], result.detail)
            page: PageText = result.value
            if page.gate_failure is not None:
                return gated_out(doc.annotate(*notes), page)
            text = page.text
        else:
            text = doc.text
        text, invisible = strip_invisible(text)
        if invisible:
            notes.append(INVISIBLE_CHARS_REMOVED.note(invisible))
        repaired = repair_replacement_chars(text, self.config.max_replacement_ratio)
        if repaired is None:
            return self.quarantine(
                doc,
                "invalid_utf8",
                f"{text.count(chr(0xFFFD))} undecodable characters in "
                f"{len(text)} (max ratio {self.config.max_replacement_ratio})",
            )
        text, replaced = repaired
        if replaced:
            notes.append(UTF8_REPAIRED_CHARS.note(replaced))
        text = normalize_text(text)
        if not text.strip():
            return Filtered(doc.annotate(*notes), "no_text_extracted")
        return Kept(doc.with_text(text, content_type="text/plain").annotate(*notes))


def gated_out(doc: Document, page: PageText) -> Filtered:
    """A page the gate did not pass, filtered with the gate's reason, in its first-pass language (so it
    is counted per source and language), with the clause it failed and its value."""
    clause, signals = page.gate_failure, page.signals
    lang, confidence = signals["lang"], signals["lang_confidence"]
    value = signals.get(clause.column)
    shown = value if isinstance(value, str) else f"{value:g}"
    out = replace(doc, lang=lang, lang_confidence=confidence).annotate(
        GATE_FAILED.note(f"{clause.text}: {shown}", verdict="fail")
    )
    return Filtered(out, gate_reason(clause))


STAGE = ExtractStage
