"""Stage ``ingest``: raw crawl and curated files -> documents with provenance.

The hooks of the stage. Input files are the units of work (one output shard per file, archive or
declared repository directory, piece of a large WARC, or bundle of small files: :mod:`.bundles`; other
directories are expanded); their records are read by :mod:`.items`. :meth:`IngestStage.prepare` runs
the recrawl collapse (:mod:`.recrawl`); each record then is quarantined, a ``recrawl_duplicate``, an
eval holdout (``holdout/`` and ``filtered/`` as ``eval_holdout``, never the corpus) or kept.
docs/ingest-and-filters.md, "ingest".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from corpus.code.rules import Rule, build_rules
from corpus.decont.holdout import HOLDOUT_KIND, HOLDOUT_VERSION, in_holdout
from corpus.formats.dedup_keys import recrawl_key_params
from corpus.formats.docshard import SUFFIX, ShardWriter, atomic_write_json, read_sidecar
from corpus.model import Filtered, Kept, Outcome, Quarantined
from corpus.model.annotations import RECRAWL_OF_DATE
from corpus.model.errors import UserError
from corpus.model.layout import INDEX_RECORDS
from corpus.select.robots import robots_line
from corpus.text.inputs import InputPath, display_name
from corpus.text.sources import (
    DECLARATION_FILE,
    HF_DATASET,
    REPOSITORY,
    SourceSpec,
    declared_source,
    expand_inputs,
    parse_source_tables,
    resolve_format,
    source_for,
)
from corpus.text.warc_units import warc_units
from hpc_jobs.ingest.artifacts import PER_INPUT_ARTIFACTS, CodeFiles, remove_stale_artifacts, spec_dict
from hpc_jobs.ingest.bundles import bundled, key_prefixes
from hpc_jobs.ingest.config import IngestConfig
from hpc_jobs.ingest.items import INGEST, ROBOTS_DIR, Item, read_items, repository_dir_shard
from hpc_jobs.ingest.recrawl import (
    DECISIONS,
    GROUPS,
    KEYS,
    READER_VERSION,
    collapse,
    write_keys,
)
from hpc_jobs.ingest.shown import shown_files, shown_item
from mpi_kernels.barrier import sleeping_barrier, sleeping_bcast
from runtime.against_base import AgainstBase, IndexFacts
from runtime.global_phase import GlobalPhase, decisions_of, global_phase_key, part_count
from runtime.input_shard import InputShard, raw_input_shard
from runtime.job_failure import agreed, from_rank0
from runtime.runner import Stage, StageContext, StageError
from runtime.side_output import SideOutput


class IngestStage(Stage):
    name = INGEST
    version = "15"  # what each version changed: docs/ingest-and-filters.md, "Stage versions"
    Config = IngestConfig
    artifact_kinds = (*PER_INPUT_ARTIFACTS, INDEX_RECORDS)
    side_outputs = (SideOutput(HOLDOUT_KIND), SideOutput(ROBOTS_DIR))

    def __init__(self, config: IngestConfig) -> None:
        super().__init__(config)
        self.declared = parse_source_tables(config.sources)
        self.rules: list[Rule] = build_rules(config.code_rules, config.code_builtin_rules)
        self._skipped: Counter = Counter()
        self._files: dict[str, Any] | None = None
        self._formats: dict[Path, str] = {}
        self._specs: dict[tuple[Path, Path | None], SourceSpec] = {}
        self._skipped_inputs: dict[str, int] = {}
        self._index: AgainstBase | None = None

    # -- inputs ------------------------------------------------------------------------------------
    def listed_inputs(self, ctx: StageContext) -> list[InputShard]:
        """Collective: the units of the input roots. Rank 0 lists and checks them (corpus.text.inputs:
        links, FIFOs, sockets and devices under a root are skipped and counted,
        ``run_info.skipped_inputs``; a bad declaration or an input that is no file or directory is one
        line); each rank digests a share of the files (and finds a large WARC's units), so no rank opens
        every file; rank 0 bundles them (:mod:`.bundles`). Any rank's error is every rank's."""
        files = from_rank0(ctx.comm, lambda: self._listed_files(ctx))
        mine = agreed(
            ctx.comm, lambda: [self._units(files[k]) for k in range(ctx.rank, len(files), ctx.size)]
        )
        for unit in (u for units in mine for u in units):
            _ = unit.weight  # sized by the rank that digested it; the size travels with the unit
        shares = ctx.comm.gather(mine, root=0)

        def bundles() -> list[InputShard]:
            units = [u for k in range(len(files)) for u in shares[k % ctx.size][k // ctx.size]]
            return bundled(units, self.config.bundle_bytes, self.config.bundle_min_units)

        return from_rank0(ctx.comm, bundles)

    def _listed_files(self, ctx: StageContext) -> list[InputPath]:
        try:
            listing = expand_inputs(ctx.in_paths, self.declared)
            files = self._checked_files(listing.inputs, ctx)
        except UserError as e:
            raise StageError(str(e)) from None
        self._skipped_inputs = dict(sorted(listing.skipped.items()))
        if self._skipped_inputs:
            said = ", ".join(f"{reason} {n}" for reason, n in self._skipped_inputs.items())
            ctx.say(f"skipped under the input roots (not followed, not read): {said}")
        return files

    def _checked_files(self, files: list[InputPath], ctx: StageContext) -> list[InputPath]:
        unknown = [display_name(str(p.path)) for p in files if not self._format(p)]
        if unknown:
            raise StageError(
                f"unrecognised input (not WARC/ARC, JSONL, .txt, Parquet or a tar/zip repository): {', '.join(unknown)}"
            )
        if not files:
            roots = ", ".join(display_name(str(p)) for p in ctx.in_paths)
            raise StageError(f"no WARC, JSONL, text, Parquet or repository files under {roots}")
        if self.config.undeclared_files == "refuse":
            undeclared = [
                display_name(str(p.path))
                for p in files
                if self._format(p) != "warc" and declared_source(p.path, self.declared, p.root) is None
            ]
            if undeclared:
                raise StageError(
                    f"no [[ingest.sources]] table and no {DECLARATION_FILE} matches {', '.join(undeclared)} "
                    '(undeclared_files = "refuse"): declare their source and tier'
                )
        return files

    def _units(self, ip: InputPath) -> list[InputShard]:
        """An input as units of work: a repository directory or a file, or a large gzipped WARC's
        pieces (``unit_bytes``, cut at record boundaries), each named by the file and its number. (Only
        an input read as a repository or a dataset can be a directory: the listing took no other.)"""
        path = ip.path
        if self._format(ip) in (REPOSITORY, HF_DATASET) and path.is_dir():
            return [replace(repository_dir_shard(path), root=ip.root)]
        whole = replace(raw_input_shard(path), root=ip.root)
        spans = warc_units(path, self.config.unit_bytes) if self._format(ip) == "warc" else []
        if len(spans) <= 1:
            return [whole]
        return [replace(whole, name=f"{whole.name}-u{k:05d}", span=span) for k, span in enumerate(spans)]

    def _format(self, unit: InputPath | InputShard) -> str:
        """The reader of an input (corpus.text.sources.resolve_format), looked at once per path."""
        if unit.path not in self._formats:
            self._formats[unit.path] = resolve_format(unit.path, self.declared, unit.root)
        return self._formats[unit.path]

    def spec(self, shard: InputShard) -> SourceSpec:
        """The source a file is declared as, looked up once per path (each pass over a file asks it, and
        a lookup walks the declarations and the directories above the file)."""
        key = (shard.path, shard.root)
        if key not in self._specs:
            fmt = self._format(shard)
            self._specs[key] = source_for(
                shard.path, self.declared, fmt, self.config.undeclared_files, shard.root
            )
        return self._specs[key]

    # -- reading one file --------------------------------------------------------------------------
    def items(self, shard: InputShard) -> Iterator[Item]:
        """The records of one file (or piece of one), read by :mod:`.items`. A file must still be a
        regular file: its reader opens it once, with :func:`corpus.text.inputs.open_regular` (one put
        in its place since it was listed is refused, not waited on); where its name is not UTF-8 what
        is recorded of it carries the name's display form (:mod:`.shown`)."""
        fmt = self._format(shard)
        items = read_items(shard, self.spec(shard), fmt, self.config, self.rules, self._set_files)
        if display_name(str(shard.path)) == str(shard.path):
            return items
        return (shown_item(it) for it in items)

    def _set_files(self, files: dict[str, Any]) -> None:
        """The fates of the files of the repository being read, for its ``rejected_files`` artifact."""
        self._files = shown_files(files)

    # -- the global phase: recrawl collapse ----------------------------------------------------------
    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """The recrawl collapse (:mod:`hpc_jobs.ingest.recrawl`): ``keys`` (map) -> ``groups``
        (exchange; against the base build's recrawl index when there is one, else its parts sized by
        the fetches found, ``part_rows``) -> ``decisions``. Returns
        the phase's digest, part of every shard's checkpoint key."""
        against = self._index = AgainstBase.open(ctx, "recrawl", recrawl_key_params())
        if ctx.rank == 0:
            remove_stale_artifacts(ctx.out_dir, {s.name for s in inputs}, PER_INPUT_ARTIFACTS)
        # what each input was declared as (config or corpus-sources.toml): a changed declaration file
        # changes the documents, so it redoes the stage as a changed config does
        sources = sorted(
            [f.name, spec_dict(self.spec(f))] for s in inputs for f in s.files
        )  # JSON values: the key is compared as read back
        key = global_phase_key(self, inputs, reader=READER_VERSION, sources=sources, **against.phase_key())
        phase = self._phase = GlobalPhase(ctx, key)  # (a barrier: after the removal)
        if phase.complete:
            return phase.reused()
        # 1. keys: each unit's fetches, file by file (a repository is never a recrawl)
        phase.map(
            KEYS,
            inputs,
            lambda unit, w: write_keys(
                w, ((f, it) for _, f in key_prefixes(unit) if self._collapses(f) for it in self.items(f))
            ),
        )
        # 2. groups and decisions, the groups sized by the fetches the keys step found
        names = [s.name for s in inputs]
        fetches = sum(p.facts["records"] for p in phase.parts(KEYS, names)) if ctx.rank == 0 else None
        groups = against.parts(part_count(sleeping_bcast(ctx.comm, fetches), self.config.part_rows))
        against.remove_stale_records(ctx, groups)
        sleeping_barrier(ctx.comm)  # every rank's records are written after the stale ones went
        facts = collapse(ctx, phase, inputs, groups, against)
        return phase.finish({GROUPS: groups, DECISIONS: names}, facts)

    def _collapses(self, shard: InputShard) -> bool:
        return self.config.collapse_recrawls and self._format(shard) != REPOSITORY

    # -- the map phase -----------------------------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        dups = decisions_of(self._phase.root, DECISIONS, shard.name)
        self._skipped = Counter()
        self._files = None
        holdout, robots = ctx.side(HOLDOUT_KIND), ctx.side(ROBOTS_DIR)
        for prefix, file in key_prefixes(shard):
            read = 0
            for it in self.items(file):
                if it.index != read:  # the readers number the records they read from 0: one went missing
                    raise StageError(f"{self.name}/{file.name}: record {read} was read but never accounted")
                read += 1
                if it.skipped:
                    self._skipped[it.skipped] += 1
                    if it.robots is not None:
                        robots.write_line(robots_line(it.robots))
                else:
                    yield self.outcome(it, prefix + str(it.index), dups, holdout), it.bytes_in

    def outcome(self, it: Item, key: str, dups: dict[str, str], holdout: ShardWriter) -> Outcome:
        """What becomes of one record that is not skipped (``key``: its key in the unit's decisions)."""
        if it.bad is not None:
            return Quarantined(it.bad)
        if key in dups:
            doc = it.doc.annotate(RECRAWL_OF_DATE.note(dups[key], "fail"))
            return Filtered(doc, "recrawl_duplicate")
        if in_holdout(it.doc.url, it.doc.source_tier, self.config.holdout_modulus, self.config.holdout_tiers):
            holdout.write_doc(it.doc)
            return Filtered(it.doc, "eval_holdout")
        return Kept(it.doc)

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
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
        code = CodeFiles()
        for s in inputs:
            skipped.update(json.loads(ctx.artifact_path("skipped", f"{s.name}.json").read_text()))
            holdout += read_sidecar(ctx.artifact_path(HOLDOUT_KIND, f"{s.name}{SUFFIX}"))["records"]
            files = ctx.artifact_path("rejected_files", f"{s.name}.json")
            if files.is_file():
                code.add(json.loads(files.read_text()))
        return {
            "skipped_records": dict(sorted(skipped.items())),
            "code_files": code.to_dict(),
            "holdout_docs": holdout,
            "holdout_version": HOLDOUT_VERSION,
            "recrawl_duplicates": self._phase.facts["duplicates"],
        } | self._index.manifest_index(IndexFacts.of(self._phase.facts).to_dict())

    def run_info(self, ctx: StageContext) -> dict[str, Any]:
        """What the listing skipped under the input roots (links and special files, never read), by
        reason: what this run saw, not what the documents are (so not digested)."""
        return {"skipped_inputs": self._skipped_inputs}

    def input_facts(self, inputs: list[InputShard]) -> dict[str, Any]:
        """Each input's declared source, tier, licence, date, kind and URL (``sources``)."""
        return {"sources": {f.name: spec_dict(self.spec(f)) for s in inputs for f in s.files}}


STAGE = IngestStage
