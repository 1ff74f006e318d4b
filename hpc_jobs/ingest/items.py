"""The records of one ingest input, each on its way to becoming an outcome (:class:`Item`).

WARC/ARC responses become HTML documents, JSONL and text records curated documents, a code repository
its documents of tier ``code`` (or one quarantine record); requests, metadata, revisits and non-HTML
responses are skipped. Every reader numbers the records it reads from 0, so a record read but never
accounted is caught. docs/ingest-and-filters.md, "ingest".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus.code.archive import ArchiveError, archive_stem, directory_digest, repository_kind
from corpus.code.repository import read_repository
from corpus.code.rules import Rule
from corpus.model import Document, QuarantineRecord
from corpus.model.annotations import (
    CHARSET_CORRECTED,
    CHARSET_DETECTED,
    INGEST,  # the stage's name, which its annotations and quarantine records carry
    REPO_FILES,
    REPO_LICENCE,
    REPO_PART,
    UNDECODABLE_BYTES,
)
from corpus.model.digest import canonical_json, sha256_hex
from corpus.text.curated import CuratedError, CuratedRecord, iter_jsonl, read_text_file
from corpus.text.sources import HF_DATASET, REPOSITORY, SourceSpec
from corpus.text.tables import iter_hf_dataset, iter_parquet
from corpus.text.warc import BadRecord, RawRecord, RobotsRecord, SkippedRecord, decode_page, iter_warc
from hpc_jobs.ingest.config import IngestConfig
from runtime.input_deadline import InputDeadline, InputTimeout
from runtime.input_shard import InputShard

#: what a host's robots.txt response is counted as among the skipped records
ROBOTS_KIND = "robots_txt"
#: ingest's side output of them, one file per input: a robots.txt snapshot ``exclude_robots`` reads
ROBOTS_DIR = "robots"


@dataclass(frozen=True)
class Item:
    """One record of an input file, on its way to becoming an outcome."""

    index: int
    bytes_in: int
    doc: Document | None = None
    bad: QuarantineRecord | None = None
    skipped: str = ""
    robots: RobotsRecord | None = None  # a skipped record kept as the crawl's robots.txt (``robots/``)


def quarantine_record(
    spec: SourceSpec, path: Path, reason: str, detail: str, digest: str, url: str = ""
) -> QuarantineRecord:
    return QuarantineRecord(
        stage=INGEST,
        reason=reason,
        raw_digest=digest,
        source=spec.name,
        url=url,
        detail=detail,
        input_name=path.name,
    )


def read_items(
    shard: InputShard,
    spec: SourceSpec,
    fmt: str,
    config: IngestConfig,
    rules: list[Rule],
    on_files: Callable[[dict[str, Any]], None],
) -> Iterator[Item]:
    """An input's records in order; a repository's files' fates go to ``on_files`` (the
    ``rejected_files`` artifact). Reading stops at ``max_input_seconds``: the rest of the input is
    then one quarantined record (``input_timeout``), numbered after the last record read."""
    items = format_items(shard, spec, fmt, config, rules, on_files)
    if not config.max_input_seconds:
        yield from items
        return
    read = 0
    with InputDeadline(config.max_input_seconds) as deadline:
        try:
            for it in deadline.each(items):
                read = it.index + 1
                yield it
        except InputTimeout as e:
            detail = f"{e}: records from {read} on not read (a parser stalled, or the input never ended)"
            yield Item(
                read, 0, bad=quarantine_record(spec, shard.path, "input_timeout", detail, shard.sha256)
            )


def format_items(
    shard: InputShard,
    spec: SourceSpec,
    fmt: str,
    config: IngestConfig,
    rules: list[Rule],
    on_files: Callable[[dict[str, Any]], None],
) -> Iterator[Item]:
    """The records of an input as its format's reader reads them."""
    path = shard.path
    if fmt == REPOSITORY:
        yield from repository_items(shard, spec, config, rules, on_files)
        return
    if fmt == "warc":
        for it in iter_warc(path, config.max_record_bytes, config.max_decoded_bytes, shard.span):
            if isinstance(it, SkippedRecord):
                yield Item(it.index, 0, skipped=it.kind)
            elif isinstance(it, RobotsRecord):
                yield Item(it.index, 0, skipped=ROBOTS_KIND, robots=it)
            elif isinstance(it, BadRecord):
                yield Item(
                    it.index,
                    0,
                    bad=quarantine_record(spec, path, it.reason, it.detail, it.raw_digest, it.url),
                )
            elif not it.payload.strip():
                bad = quarantine_record(
                    spec, path, "empty_payload", "the response has no body", it.raw_digest, it.url
                )
                yield Item(it.index, 0, bad=bad)
            else:
                yield Item(it.index, len(it.payload), doc=web_doc(it, spec))
        return
    prefix = f"curated://{spec.name}/{path.name}"
    fields = dict(spec.fields)
    if fmt == "jsonl":
        records = iter_jsonl(path, prefix, config.max_record_bytes, fields)
    elif fmt == "parquet":
        records = iter_parquet(path, prefix, config.max_record_bytes, fields)
    elif fmt == HF_DATASET:
        records = iter_hf_dataset(path, prefix, config.max_record_bytes, fields)
    else:
        records = [read_text_file(path, prefix, config.max_record_bytes)]
    for rec in records:
        if isinstance(rec, CuratedError):
            yield Item(
                rec.index, 0, bad=quarantine_record(spec, path, rec.reason, rec.detail, rec.raw_digest)
            )
        elif not rec.text.strip():
            bad = quarantine_record(spec, path, "empty_text", "no text", rec.raw_digest, rec.url)
            yield Item(rec.index, len(rec.text), bad=bad)
        else:
            yield Item(rec.index, len(rec.text.encode("utf-8")), doc=curated_doc(rec, spec))


def repository_items(
    shard: InputShard,
    spec: SourceSpec,
    config: IngestConfig,
    rules: list[Rule],
    on_files: Callable[[dict[str, Any]], None],
) -> Iterator[Item]:
    """A repository's documents in order (index = document number), or one quarantine record.
    ``on_files`` receives its files' fates for the ``rejected_files`` artifact."""
    path = shard.path
    name = archive_stem(path)
    base = spec.url.replace("{name}", name) if spec.url else f"repo://{name}/"
    try:
        repo = read_repository(
            path,
            repository_kind(path),
            name,
            rules,
            max_file_bytes=config.max_file_bytes,
            max_doc_tokens=config.max_doc_tokens,
            bytes_per_token=config.bytes_per_token,
            limits=config.archive_limits(),
        )
    except ArchiveError as e:
        files = {"repository": name, "quarantined": e.reason, "kept": {"files": 0, "bytes": 0}}
        on_files(files | {"rejected": {}, "documents": 0, "licence": None, "files": []})
        yield Item(0, 0, bad=quarantine_record(spec, path, e.reason, e.detail, shard.sha256, base))
        return
    try:
        licence = repo.licence.with_declared(spec.license)
        files = {"repository": name, **repo.file_summary(), "licence": licence.to_dict()}
        files["files"] = [list(f) for f in repo.rejected]
        on_files(files)
        how = canonical_json({"decided_by": licence.decided_by, "conflicts": len(licence.conflicts)})
        if not repo.kept:
            counts = ", ".join(f"{r} {n}" for r, n in sorted(repo.rejected_counts.items())) or "no files"
            detail = f"no file kept of {len(repo.rejected)}: {counts}"
            yield Item(
                0, 0, bad=quarantine_record(spec, path, "empty_repository", detail, shard.sha256, base)
            )
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
                REPO_FILES.note(canonical_json([list(f) for f in rd.files]).decode()),
                REPO_PART.note(f"{rd.part}/{rd.parts}"),
                REPO_LICENCE.note(how.decode()),
            )
            yield Item(k, len(data), doc=doc)
    finally:
        repo.close()


def web_doc(rec: RawRecord, spec: SourceSpec) -> Document:
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
        notes.append(CHARSET_CORRECTED.note(f"{page.declared}->{page.encoding}"))
    elif not page.declared and page.encoding != "utf-8":  # a detector's guess, worth auditing
        notes.append(CHARSET_DETECTED.note(page.encoding))
    if page.undecodable:
        notes.append(UNDECODABLE_BYTES.note(page.undecodable))
    return doc.annotate(*notes)


def curated_doc(rec: CuratedRecord, spec: SourceSpec) -> Document:
    doc = Document.create(
        text=rec.text,
        source=rec.source or spec.name,
        source_tier=spec.tier,
        url=rec.url,
        crawl_date=rec.date or spec.date,
        raw_digest=rec.raw_digest,
        license_hint=rec.license or spec.license,
    )
    if rec.replaced:
        doc = doc.annotate(UNDECODABLE_BYTES.note(rec.replaced))
    return doc


def repository_dir_shard(path: Path) -> InputShard:
    """A directory declared as a repository (or a Hugging Face dataset) as a unit of work: named by its
    name and content digest."""
    sha = directory_digest(path)
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", path.name.split(".")[0]).strip("-") or "repository"
    return InputShard(name=f"{stem}-{sha[:12]}", path=path, sha256=sha)
