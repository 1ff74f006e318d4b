"""Stage ``extract``: HTML documents -> text documents; plain text passes through cleaned.

Every document is handled on its own: an oversized page is truncated before parsing and tagged, a
parse that exceeds ``time_limit_s`` is killed and quarantined (``extract_timeout``), one whose worker
outgrows ``memory_limit_mb`` is quarantined (``memory_limit``) and the worker replaced, a parser crash or
exception is quarantined (``extract_crashed`` / ``extract_error``), a page that is mostly undecodable
bytes is quarantined (``invalid_utf8``), and a page with no main text goes to ``filtered/`` as
``no_text_extracted``. The shard always goes on. The text of a kept document replaces its HTML
(``Document.with_text``: new doc_id, ``derived_from`` the HTML document's id).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

from corpus.docshard import iter_docs
from corpus.extract import (
    ExtractWorker,
    cap_html,
    extract_text,
    normalize_text,
    repair_replacement_chars,
    strip_invisible,
)
from corpus.model import Annotation, Document, Filtered, Kept, Outcome, Quarantined, QuarantineRecord
from runtime.runner import InputShard, Stage, StageContext, main


@dataclass(frozen=True)
class ExtractConfig:
    max_html_bytes: int = 2_000_000  # pages are cut to this many bytes before parsing (0: no cap)
    time_limit_s: float = 30.0  # per document; a slower parse is killed and quarantined
    max_replacement_ratio: float = 0.01  # more U+FFFD than this share of the text -> quarantined
    memory_limit_mb: int = 1024  # the worker's peak resident memory per document (0: none)

    def __post_init__(self) -> None:
        if self.time_limit_s <= 0:
            raise ValueError("time_limit_s must be positive")
        if self.memory_limit_mb < 0:
            raise ValueError("memory_limit_mb must be 0 (no limit) or positive")


#: the quarantine reason of each way the worker can fail a document
_WORKER_REASONS = {
    "timeout": "extract_timeout",
    "memory_limit": "memory_limit",
    "crashed": "extract_crashed",
    "error": "extract_error",
}


class ExtractStage(Stage):
    name = "extract"
    # 2: ZWJ, ZWNJ and variation selectors are kept (docs/ingest-and-filters.md); 3: the worker runs
    # under memory_limit_mb
    version = "3"
    Config = ExtractConfig

    def __init__(self, config: ExtractConfig) -> None:
        super().__init__(config)
        self._worker: ExtractWorker | None = None

    def worker(self) -> ExtractWorker:
        if self._worker is None:
            self._worker = ExtractWorker(
                extract_text, self.config.time_limit_s, memory_limit_mb=self.config.memory_limit_mb
            )
        return self._worker

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for doc in iter_docs(shard.path):
            yield self.process_doc(doc, ctx), len(doc.text.encode("utf-8"))

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
        notes: list[Annotation] = []
        if doc.content_type == "text/html":
            html, original_bytes = cap_html(doc.text, self.config.max_html_bytes)
            if original_bytes:
                notes.append(Annotation(self.name, "truncated_html_bytes", original_bytes, "info"))
            result = self.worker().run(html)
            if result.status != "ok":
                return self.quarantine(doc, _WORKER_REASONS[result.status], result.detail)
            text = result.value
        else:
            text = doc.text
        text, invisible = strip_invisible(text)
        if invisible:
            notes.append(Annotation(self.name, "invisible_chars_removed", invisible, "info"))
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
            notes.append(Annotation(self.name, "utf8_repaired_chars", replaced, "info"))
        text = normalize_text(text)
        if not text.strip():
            return Filtered(doc.annotate(*notes), "no_text_extracted")
        return Kept(doc.with_text(text, content_type="text/plain").annotate(*notes))


STAGE = ExtractStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
