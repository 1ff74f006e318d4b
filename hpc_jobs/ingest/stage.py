"""Stage ``ingest``: raw crawl and curated files -> documents with provenance.

* WARC/ARC (``warcio``): every HTML response becomes a document whose ``text`` is the decoded HTML
  (``content_type = "text/html"``); extraction comes next. Malformed records, truncated members and
  unreadable files become quarantine records with the reason and the raw digest; requests, metadata,
  revisits and non-HTML responses are not documents and are counted in ``skipped/``.
* JSONL and plain text: curated documents, passed through with their license hint.
* Code repositories (``corpus.code``): a tar/zip archive (recognised by its bytes; its top folder is
  the root) or a directory declared ``kind = "repository"`` is one input. Its files are judged first
  (vendored, generated, minified, lockfiles, data, binary, undecodable, too large: each rejected file
  listed with its reason in ``rejected_files/NAME.json``, never a document), the kept ones concatenated
  in a stated order with ``<|file|> PATH`` headers into documents of tier ``code`` that split at file
  boundaries under a token limit. Its licence (``corpus.code.licence_detect``: LICENSE / COPYING texts,
  package metadata, SPDX headers, reconciled) is each document's ``license_hint`` unless the source
  declares one, with the evidence and conflicts in ``rejected_files/NAME.json``; which classes are
  trained on is a selection (``corpus.select.selection``). A damaged archive is one quarantine record (``truncated_archive``,
  ``malformed_archive``); a repository with no file kept is one too (``empty_repository``).
* Recrawl collapse (global, in ``prepare``, a ``runtime.global_phase`` checkpointed in parts):
  identical (url, raw digest) pairs count once; the earliest fetch is kept, the others go to
  ``filtered/`` as ``recrawl_duplicate``. Inside a build (``<build>/stages/ingest`` with a persistent
  ``recrawl`` index at ``<build>/dedup_index/recrawl``: docs/incremental.md) every part also writes the
  (key, date) record of each fetch it keeps as the artifact ``index_records/PART.recrawl.rec``
  (``RECRAWL_RECORD`` rows, with a sidecar; the build commits them as its own generation once it has
  succeeded); without a base that is the only difference. With a base (the index holds the base's
  generations) the parts are the index's ``P`` partitions, each part probes the base's generations of its
  partition a batch of keys at a time, and a (url, raw digest) the base kept makes every fetch of this
  build a ``recrawl_duplicate`` of the base's fetch (keep-first), ``recrawl_of_date`` its date.
* Eval holdout: web documents with ``hash(normalize_url(url)) % holdout_modulus == 0``
  (``corpus.decont.holdout``) go to ``holdout/`` as read (and to ``filtered/`` as ``eval_holdout``),
  never to the corpus; extract stores them extracted and scrubbed, the dedup stages tag their copies.

Input files are the units of work (one output shard per file, archive or declared repository
directory); other directories are expanded.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from corpus.code.archive import ArchiveError, archive_stem, directory_digest, repository_kind
from corpus.code.repository import read_repository
from corpus.code.rules import Rule, build_rules
from corpus.decont.holdout import HOLDOUT_VERSION, in_holdout
from corpus.dedup.recrawl import RecordKey, base_fetches, kept_fetch, later_fetches, recrawl_key
from corpus.formats.dedup_index import (
    BaseGenerations,
    PersistentIndex,
    date_values,
    dates,
    recrawl_key_params,
)
from corpus.formats.docshard import SUFFIX, RecordsFile, ShardWriter, atomic_write_json, read_sidecar
from corpus.model import Annotation, Document, Filtered, Kept, Outcome, Quarantined, QuarantineRecord
from corpus.model.digest import canonical_json, sha256_hex
from corpus.model.layout import INDEX_RECORDS
from corpus.text.curated import CuratedError, CuratedRecord, iter_jsonl, read_text_file
from corpus.text.sources import (
    DECLARATION_FILE,
    REPOSITORY,
    UNDECLARED_CHOICES,
    SourceSpec,
    declared_source,
    expand_inputs,
    parse_source_tables,
    resolve_format,
    source_for,
)
from corpus.text.warc import BadRecord, RawRecord, SkippedRecord, decode_page, iter_warc
from mpi_kernels.shuffle import stable_key_hash
from runtime.global_phase import (
    GlobalPhase,
    PartWriter,
    decisions_of,
    global_phase_key,
    route_verdicts,
    write_verdicts,
)
from runtime.runner import (
    InputShard,
    Stage,
    StageContext,
    StageError,
    base_generations,
    raw_input_shard,
    remove_stale_index_records,
)

#: bump when the same file would be read into different keys (invalidates the global phase)
READER_VERSION = "2"  # 2: an encoded body cut short is a truncated_record, not half a page
# the recrawl collapse's steps (runtime.global_phase)
KEYS = "keys"
KEYS_FILE = ".keys.jsonl"
GROUPS = "groups"
DECISIONS = "decisions"
#: the artifacts written per input file (the runner lists them, with INDEX_RECORDS, as side outputs)
PER_INPUT_ARTIFACTS = ("holdout", "skipped", "rejected_files")
#: a part's records inside a build (``index_records/PART.recrawl.rec``): the (key, date) record of each
#: fetch it kept, for the build's own generation of the recrawl index (RECRAWL_RECORD rows, a sidecar)
INDEX_RECORDS_SUFFIX = ".recrawl.rec"
#: fetches of a part whose keys are probed against the base at once (a group is never split)
PROBE_BATCH = 1 << 16
#: what a part reports with a base: (url, raw digest) pairs the base kept, this build's fetches of them
#: (each a recrawl duplicate of the base's fetch) and the records of this build's own generation
INDEX_FACTS = ("base_keys", "base_duplicates", "index_records")


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
    #: a JSONL/text file neither [[ingest.sources]] nor a corpus-sources.toml declares: tier "web" (the
    #: default: trust is declared, never inferred from a format), "curated", or "refuse"
    undeclared_files: str = "web"
    # -- code repositories (corpus.code, docs/code.md) --
    #: the team's file rules (tables: reason, path, min_bytes, header, line statistics), checked first
    code_rules: list[dict[str, Any]] = field(default_factory=list)
    code_builtin_rules: bool = True  # then corpus.code.rules.BUILTIN_RULES
    max_file_bytes: int = 1_000_000  # a repository file over this is rejected as too_large, never read
    max_doc_tokens: int = 32_768  # a repository's document holds whole files up to this estimate
    bytes_per_token: float = 3.0  # the estimate: UTF-8 bytes / this (GPT-NeoX on the shared code: 3.1-3.5)

    def __post_init__(self) -> None:
        parse_source_tables(self.sources)  # a ValueError here is reported as a config error
        build_rules(self.code_rules, self.code_builtin_rules)
        if self.max_file_bytes <= 0 or self.max_doc_tokens <= 0 or self.bytes_per_token <= 0:
            raise ValueError("max_file_bytes, max_doc_tokens and bytes_per_token must be positive")
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
    # normalized URL (corpus.decont.holdout.HOLDOUT_VERSION 2); 6: code repositories (tar/zip archives
    # by their bytes, declared directories) read as documents of tier code, their rejected files counted;
    # 7: inputs declared by the data's own corpus-sources.toml; an undeclared JSONL/text file is web;
    # 8: a repository's documents carry its detected licence expression as license_hint (was the source's
    # declaration, empty by default), so their metadata's licence and class change
    # 9: an encoded body cut short (a stream without its end marker, a zstd frame short of its stated
    # size, or a body shorter than its HTTP Content-Length with a Content-Encoding) is truncated_record
    version = "9"
    Config = IngestConfig
    artifact_kinds = (*PER_INPUT_ARTIFACTS, INDEX_RECORDS)

    def __init__(self, config: IngestConfig) -> None:
        super().__init__(config)
        self.declared = parse_source_tables(config.sources)
        self.rules: list[Rule] = build_rules(config.code_rules, config.code_builtin_rules)
        self._skipped: Counter = Counter()
        self._files: dict[str, Any] | None = None
        self._holdout: ShardWriter | None = None
        self._formats: dict[Path, str] = {}
        self._base: BaseGenerations | None = None

    # -- inputs ------------------------------------------------------------------------------------
    def list_inputs(self, ctx: StageContext) -> list[InputShard]:
        files = expand_inputs(ctx.in_paths, self.declared)
        unknown = [str(p) for p in files if not self._format(p)]
        if unknown:
            raise StageError(
                f"unrecognised input (not WARC/ARC, JSONL, .txt or a tar/zip repository): {', '.join(unknown)}"
            )
        if not files:
            raise StageError(
                f"no WARC, JSONL, text or repository files under {', '.join(map(str, ctx.in_paths))}"
            )
        if self.config.undeclared_files == "refuse":
            undeclared = [
                str(p)
                for p in files
                if self._format(p) != "warc" and declared_source(p, self.declared) is None
            ]
            if undeclared:
                raise StageError(
                    f"no [[ingest.sources]] table and no {DECLARATION_FILE} matches {', '.join(undeclared)} "
                    '(undeclared_files = "refuse"): declare their source and tier'
                )
        return [_repository_dir_shard(p) if p.is_dir() else raw_input_shard(p) for p in files]

    def _format(self, path: Path) -> str:
        """The reader of an input (corpus.text.sources.resolve_format), looked at once per path."""
        if path not in self._formats:
            self._formats[path] = resolve_format(path, self.declared)
        return self._formats[path]

    def spec(self, path: Path) -> SourceSpec:
        return source_for(path, self.declared, self._format(path), self.config.undeclared_files)

    # -- reading one file --------------------------------------------------------------------------
    def items(self, shard: InputShard) -> Iterator[_Item]:
        path, spec = shard.path, self.spec(shard.path)
        fmt = self._format(path)

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

        if fmt == REPOSITORY:
            yield from self._repository_items(shard, spec, bad)
            return
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

    def _repository_items(self, shard: InputShard, spec: SourceSpec, bad: Any) -> Iterator[_Item]:
        """A repository's documents in order (index = document number), or one quarantine record.
        ``self._files`` receives its files' fates for the ``rejected_files`` artifact."""
        path, cfg = shard.path, self.config
        name = archive_stem(path)
        base = spec.url.replace("{name}", name) if spec.url else f"repo://{name}/"
        try:
            repo = read_repository(
                path,
                repository_kind(path),
                name,
                self.rules,
                max_file_bytes=cfg.max_file_bytes,
                max_doc_tokens=cfg.max_doc_tokens,
                bytes_per_token=cfg.bytes_per_token,
            )
        except ArchiveError as e:
            self._files = {"repository": name, "quarantined": e.reason, "kept": {"files": 0, "bytes": 0}}
            self._files |= {"rejected": {}, "documents": 0, "licence": None, "files": []}
            yield _Item(0, 0, bad=bad(0, e.reason, e.detail, shard.sha256, base))
            return
        try:
            licence = repo.licence.with_declared(spec.license)
            self._files = {"repository": name, **repo.file_summary(), "licence": licence.to_dict()}
            self._files["files"] = [list(f) for f in repo.rejected]
            how = canonical_json({"decided_by": licence.decided_by, "conflicts": len(licence.conflicts)})
            if not repo.kept:
                counts = ", ".join(f"{r} {n}" for r, n in sorted(repo.rejected_counts.items())) or "no files"
                detail = f"no file kept of {len(repo.rejected)}: {counts}"
                yield _Item(0, 0, bad=bad(0, "empty_repository", detail, shard.sha256, base))
                return
            for k, rd in enumerate(repo.documents()):
                url = base if rd.parts == 1 else f"{base}#part={rd.part}"
                data = rd.text.encode("utf-8")
                doc = Document.create(
                    text=rd.text,
                    source=spec.name,
                    source_tier=spec.tier,
                    url=url,
                    crawl_date=spec.date,
                    raw_digest=sha256_hex(data),
                    content_type="text/plain",
                    license_hint=licence.expression,
                ).annotate(
                    Annotation(
                        self.name, "repo_files", canonical_json([list(f) for f in rd.files]).decode(), "info"
                    ),
                    Annotation(self.name, "repo_part", f"{rd.part}/{rd.parts}", "info"),
                    Annotation(self.name, "repo_licence", how.decode(), "info"),
                )
                yield _Item(k, len(data), doc=doc)
        finally:
            repo.close()

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
        its groups, against the base build's recrawl index when there is one) and ``decisions`` (each
        verdict to the input file it is about). Returns the phase's digest, part of every shard's
        checkpoint key."""
        base = self._base = base_generations(ctx.out_dir, "recrawl", recrawl_key_params())
        probed = base is not None and base.probed
        if probed:
            groups = [f"p{p:05d}" for p in range(base.index.partitions)]  # fixed by the index
        else:
            groups = [f"g{i:05d}" for i in range(len(inputs))]  # one part per input file: fixed by the data
        if ctx.rank == 0:
            _remove_stale_artifacts(ctx.out_dir, {s.name for s in inputs}, PER_INPUT_ARTIFACTS)
        remove_stale_index_records(ctx, groups)
        # what each input was declared as (config or corpus-sources.toml): a changed declaration file
        # changes the documents, so it redoes the stage as a changed config does
        sources = sorted([s.name, asdict(self.spec(s.path))] for s in inputs)
        index = {"index": {"partitions": base.index.partitions, "base": base.digest}} if probed else {}
        key = global_phase_key(self, inputs, reader=READER_VERSION, sources=sources, **index)
        phase = self._phase = GlobalPhase(ctx, key)  # (a barrier: after the removals)
        if phase.complete:
            return phase.reused()
        names = [s.name for s in inputs]
        names_of_sha: dict[str, list[str]] = {}
        for s in inputs:  # identical files share one digest and so one set of verdicts
            names_of_sha.setdefault(s.sha256, []).append(s.name)

        def read_keys(shard: InputShard, writer: PartWriter) -> dict[str, Any]:
            f = writer.open(KEYS_FILE)
            n = 0
            collapse = self.config.collapse_recrawls and self._format(shard.path) != REPOSITORY
            for it in self.items(shard) if collapse else ():  # a repository is never a recrawl
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

        def part_of(url: str, raw_digest: str, key: bytes) -> int:
            if probed:
                return int(base.index.partition_of([recrawl_key(url, raw_digest)])[0])
            return stable_key_hash(key) % len(groups)

        def send(part: Any) -> Iterator[tuple[int, bytes, bytes]]:
            with open(part.path(KEYS_FILE), "rb") as f:
                for line in f:
                    url, raw_digest, date, sha, index = json.loads(line)
                    key = canonical_json([url, raw_digest])
                    yield part_of(url, raw_digest, key), key, canonical_json([date, sha, index])

        def decide(g: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
            facts: Counter = Counter()
            own = (
                RecordsFile(ctx.out_dir / INDEX_RECORDS / f"{groups[g]}{INDEX_RECORDS_SUFFIX}")
                if base is not None
                else None
            )
            fetch_groups = (
                [RecordKey(*json.loads(group_key), *json.loads(p)) for _, p in group]
                for group_key, group in groupby(records, key=itemgetter(0))
            )
            decided = (
                with_base_dates(base.index, g, fetch_groups) if probed else ((f, None) for f in fetch_groups)
            )

            def verdicts() -> Iterator[tuple[str, str, str]]:
                for fetches, base_date in decided:
                    if base_date is not None:  # keep-first: the base's fetch stays the kept one
                        facts["base_keys"] += 1
                        repeats = list(base_fetches(fetches, base_date))
                        facts["base_duplicates"] += len(repeats)
                    else:
                        if own is not None:
                            kept = kept_fetch(fetches)
                            own.write(_recrawl_row(recrawl_key(kept.url, kept.raw_digest), kept.date, own.path))
                            facts["index_records"] += 1
                        repeats = list(later_fetches(fetches))
                    facts["duplicates"] += len(repeats)
                    for k, kept_date in repeats:
                        for name in names_of_sha[k.input_sha256]:
                            yield name, str(k.index), kept_date

            write_verdicts(writer, verdicts())
            if own is not None:
                own.close()  # before the part's marker: a completed part always has its records
            return {"duplicates": facts["duplicates"]} | (
                {k: facts[k] for k in INDEX_FACTS} if probed else {}
            )

        senders = phase.comm.bcast(phase.parts(KEYS, names) if ctx.rank == 0 else None, root=0)
        phase.exchange(GROUPS, groups, senders, send, decide)
        route_verdicts(phase, DECISIONS, GROUPS, groups, names)
        facts = None
        if ctx.rank == 0:
            decided_parts = phase.parts(GROUPS, groups)
            facts = {
                "records": sum(p.facts["records"] for p in phase.parts(KEYS, names)),
                "duplicates": sum(p.facts["duplicates"] for p in decided_parts),
            }
            if probed:
                facts |= {k: sum(p.facts[k] for p in decided_parts) for k in INDEX_FACTS}
        return phase.finish({GROUPS: groups, DECISIONS: names}, phase.comm.bcast(facts, root=0))

    # -- the map phase -----------------------------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        dups = decisions_of(self._phase.root, DECISIONS, shard.name)
        self._skipped = Counter()
        self._files = None
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
        files = ctx.artifact_path("rejected_files", f"{shard.name}.json")
        if self._files is not None:
            atomic_write_json(files, self._files)
        else:
            files.unlink(missing_ok=True)

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        skipped: Counter = Counter()
        holdout = 0
        code = _CodeFiles()
        for s in inputs:
            skipped.update(json.loads(ctx.artifact_path("skipped", f"{s.name}.json").read_text()))
            holdout += read_sidecar(ctx.artifact_path("holdout", f"{s.name}{SUFFIX}"))["records"]
            files = ctx.artifact_path("rejected_files", f"{s.name}.json")
            if files.is_file():
                code.add(json.loads(files.read_text()))
        return {
            "skipped_records": dict(sorted(skipped.items())),
            "code_files": code.to_dict(),
            "holdout_docs": holdout,
            "holdout_version": HOLDOUT_VERSION,
            "recrawl_duplicates": self._phase.facts["duplicates"],
            "sources": {s.name: _spec_dict(self.spec(s.path)) for s in inputs},
        } | (
            {"index": self._base.describe() | {k: self._phase.facts[k] for k in INDEX_FACTS}}
            if self._base is not None and self._base.probed
            else {}
        )


def with_base_dates(
    index: PersistentIndex, p: int, groups: Iterable[list[RecordKey]]
) -> Iterator[tuple[list[RecordKey], str | None]]:
    """Each group of part ``p`` (the fetches of one url and raw digest) with the date of the fetch the base
    kept, or None. Groups are read ahead until :data:`PROBE_BATCH` fetches are held, then their keys are
    probed at once (one Bloom filter and one mapped file of partition ``p`` at a time, every filter hit
    confirmed by a lookup): memory is a batch plus one partition, whatever the size of the base."""
    held: list[list[RecordKey]] = []
    n = 0

    def flush() -> Iterator[tuple[list[RecordKey], str | None]]:
        found = index.probe_partition(p, [recrawl_key(f[0].url, f[0].raw_digest) for f in held])
        base_dates = dates(found.values)
        for i, fetches in enumerate(held):
            yield fetches, base_dates[i] if found.found[i] else None

    for fetches in groups:
        held.append(fetches)
        n += len(fetches)
        if n >= PROBE_BATCH:
            yield from flush()
            held, n = [], 0
    if held:
        yield from flush()


class _CodeFiles:
    """The repositories' files over the whole stage, for the manifest (and the data card)."""

    def __init__(self) -> None:
        self.repositories = 0
        self.quarantined = 0
        self.documents = 0
        self.kept = {"files": 0, "bytes": 0}
        self.rejected: dict[str, dict[str, int]] = {}
        self.licences: list[dict[str, Any]] = []  # one per repository read (two of one name: both)

    def add(self, summary: dict[str, Any]) -> None:
        self.repositories += 1
        self.quarantined += 1 if summary.get("quarantined") else 0
        self.documents += summary["documents"]
        for k in ("files", "bytes"):
            self.kept[k] += summary["kept"][k]
        for reason, c in summary["rejected"].items():
            r = self.rejected.setdefault(reason, {"files": 0, "bytes": 0})
            r["files"] += c["files"]
            r["bytes"] += c["bytes"]
        if summary.get("licence"):
            lic = summary["licence"]
            self.licences.append(
                {
                    "repository": summary["repository"],
                    "expression": lic["expression"],
                    "class": lic["class"],
                    "decided_by": lic["decided_by"],
                    "conflicts": len(lic["conflicts"]),
                }
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "repositories": self.repositories,
            "quarantined_repositories": self.quarantined,
            "documents": self.documents,
            "kept": self.kept,
            "rejected": dict(sorted(self.rejected.items())),
            "licence_classes": dict(sorted(Counter(v["class"] for v in self.licences).items())),
            "licences": sorted(self.licences, key=lambda v: sorted(v.items())),
        }


def _spec_dict(spec: SourceSpec) -> dict[str, str]:
    return {"source": spec.name, "tier": spec.tier, "license": spec.license}


def _repository_dir_shard(path: Path) -> InputShard:
    """A directory declared as a repository as a unit of work: named by its name and content digest."""
    sha = directory_digest(path)
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", path.name.split(".")[0]).strip("-") or "repository"
    return InputShard(name=f"{stem}-{sha[:12]}", path=path, sha256=sha)


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


def _recrawl_row(key: bytes, date: str, path: Path) -> bytes:
    """One record of the recrawl index: the key and the kept fetch's date (a date too long for the
    record stops the stage, naming it)."""
    try:
        return key + bytes(date_values([date])[0])
    except ValueError as e:
        raise StageError(f"{path.name}: {e}") from None

