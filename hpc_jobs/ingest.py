"""Stage ``ingest``: raw crawl and curated files -> documents with provenance.

* WARC/ARC (``warcio``): every HTML response becomes a document whose ``text`` is the decoded HTML
  (``content_type = "text/html"``); extraction comes next. Malformed records, truncated members and
  unreadable files become quarantine records with the reason and the raw digest; requests, metadata,
  revisits and non-HTML responses are not documents and are counted in ``skipped/``.
* JSONL and plain text: curated documents, passed through with their license hint.
* Recrawl collapse (global, in ``prepare``, a ``runtime.global_phase`` checkpointed in parts):
  identical (url, raw digest) pairs count once; the earliest fetch is kept, the others go to
  ``filtered/`` as ``recrawl_duplicate``.
* Eval holdout: web documents with ``hash(normalize_url(url)) % holdout_modulus == 0``
  (``corpus.ingest.holdout``) go to ``holdout/`` as read (and to ``filtered/`` as ``eval_holdout``),
  never to the corpus; extract stores them extracted and scrubbed, the dedup stages tag their copies.

Input files are the units of work (one output shard per file); directories are expanded.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from corpus.digest import canonical_json
from corpus.docshard import SUFFIX, ShardWriter, atomic_write_json, read_sidecar
from corpus.ingest.curated import CuratedError, CuratedRecord, iter_jsonl, read_text_file
from corpus.ingest.holdout import HOLDOUT_VERSION, in_holdout
from corpus.ingest.recrawl import RecordKey, later_fetches
from corpus.ingest.sources import (
    UNDECLARED_CHOICES,
    SourceSpec,
    declared_source,
    expand_inputs,
    input_format,
    parse_source_tables,
    source_for,
)
from corpus.ingest.warc import BadRecord, RawRecord, SkippedRecord, decode_page, iter_warc
from corpus.model import Annotation, Document, Filtered, Kept, Outcome, Quarantined, QuarantineRecord
from mpi_kernels.shuffle import stable_key_hash
from runtime.global_phase import (
    GlobalPhase,
    PartWriter,
    decisions_of,
    global_phase_key,
    route_verdicts,
    write_verdicts,
)
from runtime.runner import InputShard, Stage, StageContext, StageError, main, raw_input_shard

#: bump when the same file would be read into different keys (invalidates the global phase)
READER_VERSION = "1"
# the recrawl collapse's steps (runtime.global_phase)
KEYS = "keys"
KEYS_FILE = ".keys.jsonl"
GROUPS = "groups"
DECISIONS = "decisions"


@dataclass(frozen=True)
class IngestConfig:
    sources: list[dict[str, Any]] = field(
        default_factory=list
    )  # [[ingest.sources]] match/name/tier/license/date
    holdout_modulus: int = 1000  # hash(normalized url) % modulus == 0 -> eval holdout; 0 disables
    holdout_tiers: list[str] = field(default_factory=lambda: ["web", "known_good_web"])
    collapse_recrawls: bool = True
    max_record_bytes: int = 64 << 20  # WARC records declared larger are quarantined (digested, never held)
    max_decoded_bytes: int = 2_000_000  # a Content-Encoded page decoding to more is quarantined
    #: a JSONL/text file no [[ingest.sources]] matches: tier "curated" (the bundled sample's), "web", or "refuse"
    undeclared_files: str = "curated"

    def __post_init__(self) -> None:
        parse_source_tables(self.sources)  # a ValueError here is reported as a config error
        if self.max_decoded_bytes <= 0:
            raise ValueError("max_decoded_bytes must be positive")
        if self.undeclared_files not in UNDECLARED_CHOICES:
            raise ValueError(f"undeclared_files must be one of {', '.join(UNDECLARED_CHOICES)}")


@dataclass(frozen=True)
class _Item:
    """One record of an input file, on its way to becoming an outcome."""

    index: int
    bytes_in: int
    doc: Document | None = None
    bad: QuarantineRecord | None = None
    skipped: str = ""


class IngestStage(Stage):
    name = "ingest"
    # 3: pages decoded in the WHATWG order, contradicted charsets corrected; 4: Content-Encoding undone as
    # a capped stream (zstd too), every record read is accounted; 5: the holdout is carved by the
    # normalized URL (corpus.ingest.holdout.HOLDOUT_VERSION 2)
    version = "5"
    Config = IngestConfig
    artifact_kinds = ("holdout", "skipped")

    def __init__(self, config: IngestConfig) -> None:
        super().__init__(config)
        self.declared = parse_source_tables(config.sources)
        self._skipped: Counter = Counter()
        self._holdout: ShardWriter | None = None

    # -- inputs ------------------------------------------------------------------------------------
    def list_inputs(self, ctx: StageContext) -> list[InputShard]:
        files = expand_inputs(ctx.in_paths)
        unknown = [str(p) for p in files if not input_format(p) and not _sniff_warc(p)]
        if unknown:
            raise StageError(f"unrecognised input (not WARC/ARC, JSONL or .txt): {', '.join(unknown)}")
        if not files:
            raise StageError(f"no WARC, JSONL or text files under {', '.join(map(str, ctx.in_paths))}")
        if self.config.undeclared_files == "refuse":
            undeclared = [
                str(p) for p in files if _format(p) != "warc" and declared_source(p, self.declared) is None
            ]
            if undeclared:
                raise StageError(
                    f"no [[ingest.sources]] table matches {', '.join(undeclared)} "
                    '(undeclared_files = "refuse"): declare their source and tier'
                )
        return [raw_input_shard(p) for p in files]

    def spec(self, path: Path) -> SourceSpec:
        return source_for(path, self.declared, _format(path), self.config.undeclared_files)

    # -- reading one file --------------------------------------------------------------------------
    def items(self, shard: InputShard) -> Iterator[_Item]:
        path, spec = shard.path, self.spec(shard.path)
        fmt = _format(path)

        def bad(index: int, reason: str, detail: str, digest: str, url: str = "") -> QuarantineRecord:
            return QuarantineRecord(
                stage=self.name,
                reason=reason,
                raw_digest=digest,
                source=spec.name,
                url=url,
                detail=detail,
                input_name=path.name,
            )

        if fmt == "warc":
            for it in iter_warc(path, self.config.max_record_bytes, self.config.max_decoded_bytes):
                if isinstance(it, SkippedRecord):
                    yield _Item(it.index, 0, skipped=it.kind)
                elif isinstance(it, BadRecord):
                    yield _Item(it.index, 0, bad=bad(it.index, it.reason, it.detail, it.raw_digest, it.url))
                elif not it.payload.strip():
                    yield _Item(
                        it.index,
                        0,
                        bad=bad(it.index, "empty_payload", "the response has no body", it.raw_digest, it.url),
                    )
                else:
                    yield _Item(it.index, len(it.payload), doc=self._web_doc(it, spec))
            return
        records = (
            iter_jsonl(path, f"curated://{spec.name}/{path.name}")
            if fmt == "jsonl"
            else [read_text_file(path, f"curated://{spec.name}/{path.name}")]
        )
        for rec in records:
            if isinstance(rec, CuratedError):
                yield _Item(rec.index, 0, bad=bad(rec.index, rec.reason, rec.detail, rec.raw_digest))
            elif not rec.text.strip():
                yield _Item(
                    rec.index,
                    len(rec.text),
                    bad=bad(rec.index, "empty_text", "no text", rec.raw_digest, rec.url),
                )
            else:
                yield _Item(rec.index, len(rec.text.encode("utf-8")), doc=self._curated_doc(rec, spec))

    def _web_doc(self, rec: RawRecord, spec: SourceSpec) -> Document:
        page = decode_page(rec.payload, rec.content_type)
        doc = Document.create(
            text=page.text,
            source=spec.name,
            source_tier=spec.tier,
            url=rec.url,
            crawl_date=rec.date,
            raw_digest=rec.raw_digest,
            content_type="text/html",
            license_hint=spec.license,
        )
        notes = []
        if page.corrected:  # the declaration contradicted the bytes: say which one was believed
            notes.append(
                Annotation(self.name, "charset_corrected", f"{page.declared}->{page.encoding}", "info")
            )
        elif not page.declared and page.encoding != "utf-8":  # a detector's guess, worth auditing
            notes.append(Annotation(self.name, "charset_detected", page.encoding, "info"))
        if page.undecodable:
            notes.append(Annotation(self.name, "undecodable_bytes", page.undecodable, "info"))
        return doc.annotate(*notes)

    def _curated_doc(self, rec: CuratedRecord, spec: SourceSpec) -> Document:
        doc = Document.create(
            text=rec.text,
            source=spec.name,
            source_tier=spec.tier,
            url=rec.url,
            crawl_date=rec.date or spec.date,
            raw_digest=rec.raw_digest,
            license_hint=rec.license or spec.license,
        )
        if rec.replaced:
            doc = doc.annotate(Annotation(self.name, "undecodable_bytes", rec.replaced, "info"))
        return doc

    # -- the global phase: recrawl collapse ----------------------------------------------------------
    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """Three steps of a checkpointed global phase: ``keys`` (each input file's (url, raw digest, date,
        position) list), ``groups`` (each key to the part owning its (url, raw digest); the part decides
        its groups) and ``decisions`` (each verdict to the input file it is about). Returns the phase's
        digest, part of every shard's checkpoint key."""
        if ctx.rank == 0:
            _remove_stale_artifacts(ctx.out_dir, {s.name for s in inputs}, self.artifact_kinds)
        phase = self._phase = GlobalPhase(ctx, global_phase_key(self, inputs, reader=READER_VERSION))
        if phase.complete:
            return phase.reused()
        names = [s.name for s in inputs]
        groups = [f"g{i:05d}" for i in range(len(inputs))]  # one part per input file: fixed by the data
        names_of_sha: dict[str, list[str]] = {}
        for s in inputs:  # identical files share one digest and so one set of verdicts
            names_of_sha.setdefault(s.sha256, []).append(s.name)

        def read_keys(shard: InputShard, writer: PartWriter) -> dict[str, Any]:
            f = writer.open(KEYS_FILE)
            n = 0
            for it in self.items(shard) if self.config.collapse_recrawls else ():
                if it.doc is not None:
                    f.write(
                        canonical_json(
                            [it.doc.url, it.doc.raw_digest, it.doc.crawl_date, shard.sha256, it.index]
                        )
                        + b"\n"
                    )
                    n += 1
            return {"records": n}

        phase.map(KEYS, inputs, read_keys)

        def send(part: Any) -> Iterator[tuple[int, bytes, bytes]]:
            with open(part.path(KEYS_FILE), "rb") as f:
                for line in f:
                    url, raw_digest, date, sha, index = json.loads(line)
                    key = canonical_json([url, raw_digest])
                    yield stable_key_hash(key) % len(groups), key, canonical_json([date, sha, index])

        def decide(_: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
            duplicates = 0

            def verdicts() -> Iterator[tuple[str, str, str]]:
                nonlocal duplicates
                for group_key, group in groupby(records, key=itemgetter(0)):
                    url, raw_digest = json.loads(group_key)
                    fetches = [RecordKey(url, raw_digest, *json.loads(p)) for _, p in group]
                    for k, kept_date in later_fetches(fetches):
                        duplicates += 1
                        for name in names_of_sha[k.input_sha256]:
                            yield name, str(k.index), kept_date

            write_verdicts(writer, verdicts())
            return {"duplicates": duplicates}

        senders = phase.comm.bcast(phase.parts(KEYS, names) if ctx.rank == 0 else None, root=0)
        phase.exchange(GROUPS, groups, senders, send, decide)
        route_verdicts(phase, DECISIONS, GROUPS, groups, names)
        facts = None
        if ctx.rank == 0:
            facts = {
                "records": sum(p.facts["records"] for p in phase.parts(KEYS, names)),
                "duplicates": sum(p.facts["duplicates"] for p in phase.parts(GROUPS, groups)),
            }
        return phase.finish({GROUPS: groups, DECISIONS: names}, phase.comm.bcast(facts, root=0))

    # -- the map phase -----------------------------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        dups = decisions_of(self._phase.root, DECISIONS, shard.name)
        self._skipped = Counter()
        self._holdout = ShardWriter(ctx.artifact_path("holdout", f"{shard.name}{SUFFIX}"))
        read = 0
        try:
            for it in self.items(shard):
                if it.index != read:  # the readers number the records they read from 0: one went missing
                    raise StageError(f"{self.name}/{shard.name}: record {read} was read but never accounted")
                read += 1
                if it.skipped:
                    self._skipped[it.skipped] += 1
                else:
                    yield self.outcome(it, dups), it.bytes_in
        except BaseException:
            self._holdout.abort()
            raise

    def outcome(self, it: _Item, dups: dict[str, str]) -> Outcome:
        """What becomes of one record that is not skipped."""
        if it.bad is not None:
            return Quarantined(it.bad)
        if str(it.index) in dups:
            doc = it.doc.annotate(Annotation(self.name, "recrawl_of_date", dups[str(it.index)], "fail"))
            return Filtered(doc, "recrawl_duplicate")
        if in_holdout(it.doc.url, it.doc.source_tier, self.config.holdout_modulus, self.config.holdout_tiers):
            self._holdout.write_doc(it.doc)
            return Filtered(it.doc, "eval_holdout")
        return Kept(it.doc)

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
        assert self._holdout is not None
        self._holdout.close()
        atomic_write_json(
            ctx.artifact_path("skipped", f"{shard.name}.json"), dict(sorted(self._skipped.items()))
        )

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        skipped: Counter = Counter()
        holdout = 0
        for s in inputs:
            skipped.update(json.loads(ctx.artifact_path("skipped", f"{s.name}.json").read_text()))
            holdout += read_sidecar(ctx.artifact_path("holdout", f"{s.name}{SUFFIX}"))["records"]
        return {
            "skipped_records": dict(sorted(skipped.items())),
            "holdout_docs": holdout,
            "holdout_version": HOLDOUT_VERSION,
            "recrawl_duplicates": self._phase.facts["duplicates"],
            "sources": {s.name: _spec_dict(self.spec(s.path)) for s in inputs},
        }


def _spec_dict(spec: SourceSpec) -> dict[str, str]:
    return {"source": spec.name, "tier": spec.tier, "license": spec.license}


def _format(path: Path) -> str:
    """The reader for a file: by name, else WARC/ARC when its first bytes say so (list_inputs refused the rest)."""
    return input_format(path) or "warc"


def _sniff_warc(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(8)
    return head.startswith((b"\x1f\x8b", b"WARC/", b"filedesc"))


def _remove_stale_artifacts(out: Path, names: set[str], kinds: tuple[str, ...]) -> None:
    """Artifacts of inputs that are no longer part of the stage would be listed in its manifest: drop them."""
    for kind in kinds:
        d = out / kind
        for p in sorted(d.iterdir()) if d.is_dir() else []:
            base = p.name
            for suffix in (SUFFIX + ".json", SUFFIX, ".json"):
                if base.endswith(suffix):
                    base = base[: -len(suffix)]
                    break
            if p.is_file() and not p.name.startswith(".") and base not in names:
                p.unlink()


STAGE = IngestStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
