"""The stage runner: runs one stage as an mpi4py program, checkpointed at shard granularity.

The contract every stage in ``hpc_jobs`` obeys: input shards are dealt to ranks by size, in order of
content digest (:func:`assign`), and each yields one output shard of the same name, so outputs are
byte-identical on any rank count; a shard is finished when its ``stats/NAME.json`` records the input
digest, stage version, config hash and global-phase digest it was made from (a rerun skips it); the
manifest is written last, atomically, by rank 0; counts reconcile (docs in = out + filtered +
quarantined) or the stage fails. Layout: :mod:`corpus.model.layout`; the contract in full:
docs/scale.md (*The stage runner's contract*).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from corpus.decont.holdout import HoldoutFile, HoldoutMissing, build_holdout
from corpus.formats.docshard import SUFFIX, ShardWriter, atomic_write_json, iter_docs
from corpus.model import (
    Document,
    Filtered,
    Kept,
    Outcome,
    Passed,
    Quarantined,
    ShardRef,
    StageManifest,
    YieldCounts,
)
from corpus.model.config import (
    DEFAULT_MEMORY_BUDGET_MB,
    check_build_config,
    config_hash,
    config_to_dict,
    load_config_file,
    stage_config,
    stage_memory_budget_mb,
)
from corpus.model.deal import largest_first
from corpus.model.digest import canonical_json
from corpus.model.layout import (
    DOC_OUTPUT_KINDS,
    FILTERED,
    QUARANTINE,
    SHARDS,
    STATS,
    manifest_path,
    stats_path,
    work_dir,
)
from corpus.model.manifest import NotCompleted, read_stage_manifest, require_stage_manifest
from corpus.model.stages import PIPELINE
from mpi_kernels.barrier import sleeping_bcast
from runtime import file_opens
from runtime.input_shard import InputShard, input_refs
from runtime.job_failure import (
    EXPECTED,
    FailureClaim,
    StageError,
    agreed,
    end_interrupted,
    fail_job,
    from_rank0,
)
from runtime.logline import LOG_JSON_ENV, LogRecord, emit
from runtime.manifest_parts import ShardRecord, artifact_refs, read_shard_record
from runtime.mpi_world import world_comm
from runtime.output_lock import LockHeld, Writer, acquire, release
from runtime.preemption import PREEMPTED_EXIT, Preempted, any_rank_stopped, install_handlers, stop_requested
from runtime.progress import RankLog, RankProgress, Reporter, interval_s, progress_dir
from runtime.side_output import SideOutput

log = logging.getLogger("corpus.stage")


class StageContext:
    """What a stage sees of the world: its config, directories and the MPI communicator."""

    def __init__(
        self,
        comm: Any,
        in_paths: list[Path],
        out_dir: Path,
        config: Any,
        full_config: dict,
        memory_budget_mb: int = DEFAULT_MEMORY_BUDGET_MB,
        stage_name: str = "stage",
    ):
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self.in_paths = in_paths
        self.out_dir = out_dir
        self.config = config
        self.full_config = full_config
        #: what this rank may hold in memory (the build's ``memory_budget_mb``); beyond it, spill or stream
        self.memory_budget_mb = memory_budget_mb
        self.memory_budget_bytes = memory_budget_mb << 20
        self.stage_name = stage_name
        self._log = RankLog(stage_name, self.rank, self.size)

        self.work_dir = work_dir(out_dir)
        #: the side outputs of the shard being processed, by kind (:class:`SideOutput`, set by the runner)
        self.sides: dict[str, Any] = {}

    def say(self, msg: str) -> None:
        """A progress line on stderr: ``HH:MM:SS [stage rRANK/SIZE] msg``."""
        self._log.say(msg)

    def artifact_path(self, kind: str, name: str) -> Path:
        """Where a stage-specific per-shard artifact goes (listed in the manifest's side outputs)."""
        return self.out_dir / kind / name

    def side(self, kind: str) -> Any:
        """The writer of the shard being processed's ``kind`` side output (a :class:`SideOutput` of
        the stage)."""
        return self.sides[kind]


def is_value_config(config: type) -> bool:
    """Whether ``config`` is a frozen dataclass whose every field is keyword-only."""
    return (
        dataclasses.is_dataclass(config)
        and config.__dataclass_params__.frozen
        and all(f.kw_only for f in dataclasses.fields(config))
    )


class Stage:
    """Base class of a stage. Subclasses set ``name``, ``version`` and ``Config`` and override
    :meth:`process_doc` (one document in, one outcome out) or :meth:`process_shard`.

    ``version`` is the stage's code version: bump it whenever the same input and config would now
    give different output, so manifests and snapshot ids change with it.
    """

    name: ClassVar[str]
    version: ClassVar[str]
    Config: ClassVar[type]
    #: extra side-output directories this stage writes (listed and digested in the manifest)
    artifact_kinds: ClassVar[tuple[str, ...]] = ()
    #: the per-shard side outputs the runner opens, aborts and closes for this stage
    side_outputs: ClassVar[tuple[SideOutput, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A stage's Config is a frozen, keyword-only dataclass: a config is a value (hashed into the
        manifest), never changed after it is read, and never built by position."""
        super().__init_subclass__(**kwargs)
        config = cls.__dict__.get("Config")
        if config is not None and not is_value_config(config):
            raise TypeError(f"{cls.__name__}.Config must be @dataclass(frozen=True, kw_only=True)")

    def __init__(self, config: Any) -> None:
        self.config = config

    # -- inputs -----------------------------------------------------------------------------------
    def list_inputs(self, ctx: StageContext) -> list[InputShard]:
        """Default: the output shards of a completed previous stage (``--in`` is its directory)."""
        if len(ctx.in_paths) != 1:
            raise StageError(
                f"stage {self.name} takes exactly one --in directory (a previous stage's output)"
            )
        return shards_of_stage(ctx.in_paths[0])

    def listed_inputs(self, ctx: StageContext) -> list[InputShard]:
        """Collective: the units on every rank; default :meth:`list_inputs` on rank 0, its error every rank's."""
        return from_rank0(ctx.comm, lambda: self.list_inputs(ctx))

    # -- the global phase -------------------------------------------------------------------------
    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """Collective work before shards are processed (all ranks call it). Returns a digest of the
        global facts the shard outputs depend on; it becomes part of every shard's checkpoint key."""
        return ""

    # -- the map phase ----------------------------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        """Yield (outcome, bytes in) for every input record of the shard, in a deterministic order."""
        for doc in iter_docs(shard.path):
            yield self.process_doc(doc, ctx), len(doc.text.encode("utf-8"))

    def process_doc(self, doc: Document, ctx: StageContext) -> Outcome:
        raise NotImplementedError(f"stage {self.name} must override process_doc or process_shard")

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
        """Called after a shard's outputs are written, before it is marked done (for artifacts)."""

    # -- the end ----------------------------------------------------------------------------------
    def conclude(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """Collective work after every shard is done (all ranks call it), e.g. a global phase over the
        shards' artifacts. Returns a digest of what it wrote ("" for nothing); it goes into the manifest."""
        return ""

    def run_info(self, ctx: StageContext) -> dict[str, Any]:
        """How this run went, for people (rank 0 only; kept in the manifest's run_info, not digested)."""
        return {}

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        """Stage-specific facts digested into the manifest (rank 0 only, after every shard is done)."""
        return {}

    def input_facts(self, inputs: list[InputShard]) -> dict[str, Any]:
        """What the output depends on besides the inputs' bytes and the config, read where the data
        lies (ingest: each input's declared source, which a ``corpus-sources.toml`` beside it may
        change). Kept in the manifest's ``extra`` and compared on a rerun: a changed fact redoes the
        stage as a changed config does, so the result never depends on the directory's history."""
        return {}


def shards_of_stage(stage_dir: Path) -> list[InputShard]:
    try:
        m = require_stage_manifest(stage_dir)
    except NotCompleted as e:
        raise StageError(str(e)) from None
    shards = []
    for o in m.outputs:
        name = Path(o.path).name[: -len(SUFFIX)]
        text = YieldCounts.bytes_out_of(m.shard_counts[name]) if name in m.shard_counts else -1
        shards.append(InputShard(name, stage_dir / o.path, o.sha256, o.records, text_bytes=text))
    return shards


def assign(units: Sequence[Any], rank: int, size: int) -> list[Any]:
    """This rank's units (input shards, a global phase's parts): in order of content digest, dealt by
    size (:func:`corpus.model.deal.largest_first`), so no rank is left with the larger ones while the
    others wait at a barrier. An input shard's size is :attr:`InputShard.size`; units without one (parts)
    count as equal, which deals them round-robin."""
    ordered = sorted(units, key=lambda s: (s.sha256, s.name))
    sizes = [getattr(s, "size", 1) for s in ordered]
    return [ordered[i] for i in largest_first(sizes, size)[rank]]


class StageRun:
    """One run of one stage on this rank."""

    def __init__(self, stage: Stage, ctx: StageContext) -> None:
        self.opened: list[int | None] | None = None  # files each rank opened (runtime.file_opens)
        self.stage = stage
        self.ctx = ctx
        self.cfg_hash = config_hash(stage.config)
        self.log = RankLog(stage.name, ctx.rank, ctx.size)

    def checkpoint_key(self, shard: InputShard, prepare_digest: str) -> dict[str, str]:
        return {
            "input_sha256": shard.sha256,
            "stage_version": self.stage.version,
            "config_hash": self.cfg_hash,
            "prepare_digest": prepare_digest,
        }

    def stats_path(self, name: str) -> Path:
        return stats_path(self.ctx.out_dir, name)

    def shard_record(self, shard: InputShard, key: dict[str, str]) -> ShardRecord | None:
        return read_shard_record(self.ctx.out_dir, shard.name, key)

    def run_shard(self, shard: InputShard, key: dict[str, str]) -> None:
        out = self.ctx.out_dir
        counts = YieldCounts()
        t0 = time.monotonic()
        n = 0
        writers = {k: ShardWriter(out / k / f"{shard.name}{SUFFIX}", key) for k in DOC_OUTPUT_KINDS}
        sides = self.ctx.sides = {
            s.kind: s.open(self.ctx.artifact_path(s.kind, f"{shard.name}{s.suffix}"))
            for s in self.stage.side_outputs
        }
        try:
            for outcome, bytes_in in self.stage.process_shard(shard, self.ctx):
                check_record_fits(bytes_in, self.ctx.memory_budget_mb, f"a document of shard {shard.name}")
                counts.count(outcome, bytes_in)
                if isinstance(outcome, Kept):
                    writers[SHARDS].write_doc(outcome.doc)
                elif isinstance(outcome, Passed):
                    writers[SHARDS].write_line(outcome.line)
                elif isinstance(outcome, Filtered):
                    writers[FILTERED].write_line(
                        canonical_json({"reason": outcome.reason, "doc": outcome.doc.to_dict()})
                    )
                elif isinstance(outcome, Quarantined):
                    writers[QUARANTINE].write_line(outcome.record.to_json_bytes())
                else:
                    raise StageError(
                        f"stage {self.stage.name} yielded {type(outcome).__name__}, not an Outcome"
                    )
                n += 1
                self.log.tick(shard.name, n, t0)
        except BaseException:
            for w in [*writers.values(), *sides.values()]:
                w.abort()
            raise
        for w in [*writers.values(), *sides.values()]:
            w.close()
        self.ctx.sides = {}
        total = counts.total()
        if not total.reconciles():
            raise StageError(f"{self.stage.name}/{shard.name}: counts do not reconcile: {total.to_dict()}")
        if shard.records >= 0 and total.docs_in != shard.records:
            raise StageError(
                f"{self.stage.name}/{shard.name}: {total.docs_in} documents accounted, shard has {shard.records}"
            )
        self.stage.finish_shard(shard, self.ctx)
        atomic_write_json(self.stats_path(shard.name), {"key": key, "counts": counts.to_dict()})
        dt = time.monotonic() - t0
        mb = total.bytes_in / 1e6
        self.log.say(
            f"{shard.name}: done, {total.docs_in} in / {total.docs_out} out in {dt:.1f}s "
            f"({total.docs_in / max(dt, 1e-9):.0f} docs/s, {mb / max(dt, 1e-9):.2f} MB/s)",
            "shard_done",
            shard=shard.name,
            docs_in=total.docs_in,
            docs_out=total.docs_out,
            seconds=round(dt, 3),
            mb=round(mb, 3),
        )

    def run(self) -> StageManifest:
        ctx, stage = self.ctx, self.stage
        inputs = stage.listed_inputs(ctx)  # any rank's error is every rank's
        names = [s.name for s in inputs]
        if len(set(names)) != len(names):
            raise StageError(f"{stage.name}: two inputs map to the same output shard name", every_rank=True)

        existing = read_stage_manifest(ctx.out_dir)
        if existing is not None and self._manifest_matches(existing, inputs):
            if ctx.rank == 0:
                msg = f"complete already (manifest {existing.digest[:19]}…): nothing to do"
                self.log.say(msg, "stage_reused", manifest=existing.digest)
            return existing

        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        writer = self._lock_output()
        try:
            return self._run(inputs, existing)
        finally:
            if writer is not None:
                release(ctx.out_dir, writer)

    def _lock_output(self) -> Writer | None:
        """Collective: rank 0 takes the stage directory's writer lock (runtime.output_lock); if another
        live job holds it, every rank stops with its name before anything is written."""
        ctx = self.ctx
        writer, refused = None, None
        if ctx.rank == 0:
            writer = Writer.me()
            try:
                acquire(ctx.out_dir, writer, self.log.say)
            except LockHeld as e:
                writer, refused = None, str(e)
        refused = ctx.comm.bcast(refused, root=0)
        if refused is not None:
            raise StageError(refused, every_rank=True)
        return writer

    def _run(self, inputs: list[InputShard], existing: StageManifest | None) -> StageManifest:
        ctx, stage = self.ctx, self.stage
        comm = ctx.comm
        comm.Barrier()
        if ctx.rank == 0 and existing is not None:
            manifest_path(ctx.out_dir).unlink()  # the stage is being redone: it is not complete now
        prepare_digest = stage.prepare(ctx, inputs)
        prepare_digest = comm.bcast(prepare_digest, root=0)

        mine = assign(inputs, ctx.rank, ctx.size)
        board = RankProgress(progress_dir(ctx.out_dir), ctx.rank)
        reporter = Reporter.on_rank0(ctx, inputs, self.log.say, interval_s())
        done_by_me = []
        skipped = 0
        # what the manifest needs of each of this rank's shards, read once here: rank 0 opens
        # O(shards / ranks) files for the manifest, not every shard's stats and sidecars
        mine_records: list[ShardRecord | None] = []
        for shard in mine:
            if stop_requested():  # SIGUSR1/SIGTERM (pre-emption): stop at this shard boundary
                break
            key = self.checkpoint_key(shard, prepare_digest)
            record = self.shard_record(shard, key)
            done_before = record is not None
            if record is None:
                self.run_shard(shard, key)
                done_by_me.append(shard.name)
                record = self.shard_record(shard, key)
            else:
                skipped += 1
            board.done(shard.weight, skipped=done_before)
            mine_records.append(record)
        self.log.say(
            f"{len(done_by_me)} shards processed, {skipped} already done",
            "rank_done",
            shards_processed=len(done_by_me),
            shards_skipped=skipped,
        )
        if any_rank_stopped(comm):
            raise Preempted("stopped at a shard boundary on request (SIGUSR1/SIGTERM); rerun to resume")
        comm.Barrier()  # every shard is written before a conclusion reads them
        reporter.stop()
        conclude_digest = sleeping_bcast(comm, stage.conclude(ctx, inputs))
        records = comm.gather(mine_records, root=0)
        artifacts = comm.gather(artifact_refs(ctx.out_dir, stage.artifact_kinds, ctx.rank, ctx.size), 0)
        done = comm.gather(done_by_me, root=0)
        peaks = comm.gather(peak_rss_mb(), root=0)
        self.opened = comm.gather(file_opens.opened(), root=0)
        comm.Barrier()
        manifest = None
        if ctx.rank == 0:
            found = {r.name: r for share in records for r in share if r is not None}
            refs = [ref for _, ref in sorted(r for share in artifacts for r in share)]
            manifest = self.write_manifest(inputs, found, prepare_digest, conclude_digest, done, peaks, refs)
        manifest = sleeping_bcast(comm, manifest)
        return manifest

    def _manifest_matches(self, m: StageManifest, inputs: list[InputShard]) -> bool:
        return (
            m.stage_version == self.stage.version
            and m.config_hash == self.cfg_hash
            and [i.sha256 for i in m.inputs]
            == [f.sha256 for s in sorted(inputs, key=lambda s: s.name) for f in s.files]
            and all(m.extra.get(k) == v for k, v in self.stage.input_facts(inputs).items())
        )

    def write_manifest(
        self,
        inputs: list[InputShard],
        records: dict[str, ShardRecord],
        prepare_digest: str,
        conclude_digest: str,
        done: list[list[str]],
        peaks: list[float],
        artifacts: list[ShardRef],
    ) -> StageManifest:
        """Rank 0: the stage manifest from the ranks' :class:`ShardRecord` of every input and the
        stage's artifact files."""
        out = self.ctx.out_dir
        inputs = sorted(inputs, key=lambda s: s.name)
        expected = {s.name for s in inputs}
        shard_counts: dict[str, dict] = {}
        outputs, sides = [], []
        total = YieldCounts()
        for s in inputs:
            record = records.get(s.name)
            if record is None:
                raise StageError(f"{self.stage.name}: shard {s.name} is missing after every rank finished")
            shard_counts[s.name] = record.counts
            total.merge(YieldCounts.from_dict(record.counts))
            shard, filtered, quarantine = record.outputs  # DOC_OUTPUT_KINDS' order
            outputs.append(shard)
            sides += [filtered, quarantine]
        sides += artifacts
        self._remove_stale(expected)
        t = total.total()
        if not t.reconciles():
            raise StageError(f"{self.stage.name}: stage totals do not reconcile: {t.to_dict()}")
        extra = self.stage.manifest_extra(self.ctx, inputs) | self.stage.input_facts(inputs)
        if prepare_digest:
            extra = {**extra, "prepare_digest": prepare_digest}
        if conclude_digest:
            extra = {**extra, "conclude_digest": conclude_digest}
        manifest = StageManifest(
            stage=self.stage.name,
            stage_version=self.stage.version,
            config=config_to_dict(self.stage.config),
            config_hash=self.cfg_hash,
            inputs=tuple(ref for s in inputs for ref in input_refs(s, out.parent)),
            outputs=tuple(outputs),
            side_outputs=tuple(sides),
            shard_counts=shard_counts,
            totals=t.to_dict(),
            extra=extra,
            run_info={
                "ranks": self.ctx.size,
                "memory_budget_mb": self.ctx.memory_budget_mb,
                "processed_by_rank": {str(r): sorted(names) for r, names in enumerate(done)},
                # each rank's peak resident memory (VmHWM) when it finished, against memory_budget_mb
                "peak_rss_mb_by_rank": {str(r): mb for r, mb in enumerate(peaks)},
                **file_opens.by_rank(self.opened),
                **self.stage.run_info(self.ctx),
                "host": socket.gethostname(),
                "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        )
        atomic_write_json(manifest_path(out), manifest.to_dict())
        digest = manifest.digest  # O(inputs) to compute: once
        self.log.say(
            f"stage complete: {t.docs_in} in, {t.docs_out} out, filtered {dict(t.filtered)}, "
            f"quarantined {dict(t.quarantined)}; manifest {digest}",
            "stage_complete",
            docs_in=t.docs_in,
            docs_out=t.docs_out,
            manifest=digest,
        )
        return manifest

    def _remove_stale(self, expected: set[str]) -> None:
        """Outputs of inputs that are no longer part of the stage would confuse a reader: drop them."""
        for kind, suffixes in [(k, _SHARD_FILES) for k in DOC_OUTPUT_KINDS] + [(STATS, (".json",))]:
            d = self.ctx.out_dir / kind
            for p in sorted(d.iterdir()) if d.is_dir() else []:
                for suffix in suffixes:
                    if p.name.endswith(suffix) and p.name[: -len(suffix)] not in expected:
                        p.unlink()
                        break


_SHARD_FILES = (SUFFIX + ".json", SUFFIX)


def remove_stale_artifacts(
    ctx: StageContext, inputs: Sequence[Any], kind: str, suffixes: tuple[str, ...]
) -> None:
    """On rank 0: drop the per-unit artifacts of ``kind`` (``NAME + suffix``) whose unit (an input
    shard, or a part of a global phase: anything with a ``name``) is no longer part of the stage; the
    manifest lists every file of an artifact kind, so they would be listed."""
    if ctx.rank != 0:
        return
    expected = {s.name + x for s in inputs for x in suffixes}
    d = ctx.out_dir / kind
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        if p.name not in expected and not p.name.startswith("."):
            p.unlink()


def eval_holdout(ctx: StageContext) -> list[HoldoutFile]:
    """The build's stored eval holdout, for a stage that tags the candidates copying it (exact_dedup,
    minhash_dedup): found where the build layout puts it (:func:`corpus.decont.holdout.build_holdout`);
    a build whose holdout is not complete ends the job on every rank, in one line."""
    try:
        return sorted(build_holdout(ctx.in_paths[0]), key=lambda f: f.name)
    except HoldoutMissing as e:
        raise StageError(str(e), every_rank=True) from None


#: one record (a document, with its decoded and encoded copies) may take at most this share of the budget
RECORD_SHARE = 4


def check_record_fits(nbytes: int, budget_mb: int, what: str) -> None:
    """A one-line error naming ``memory_budget_mb`` and the size it needs when one record is too large
    for the budget (its copies in memory are several times its bytes)."""
    if nbytes * RECORD_SHARE > budget_mb << 20:
        need = -(-nbytes * RECORD_SHARE // (1 << 20))
        raise StageError(
            f"{what} is {nbytes / (1 << 20):.1f} MB, more than memory_budget_mb = {budget_mb} allows for one "
            f"record (1/{RECORD_SHARE} of it): set memory_budget_mb to at least {need}"
        )


def peak_rss_mb() -> float:
    """This process's peak resident set size (VmHWM) in MB, 0.0 where /proc does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def parse_args(argv: list[str] | None, stage_name: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog=f"python -m hpc_jobs.{stage_name}", description=f"Run the {stage_name} stage."
    )
    ap.add_argument(
        "--input",
        "--in",  # the old spelling: accepted, with a note (corpus stage and corpus build say --input)
        dest="inputs",
        nargs="+",
        required=True,
        type=Path,
        help="input directory or files",
    )
    ap.add_argument("--out", required=True, type=Path, help="the stage's output directory")
    ap.add_argument("--config", type=Path, default=None, help="build config (TOML)")
    ap.add_argument(
        "--log-json",
        action="store_true",
        help=f"every log line a JSON object (sets {LOG_JSON_ENV}=1, which does the same)",
    )
    args = ap.parse_args(argv)
    if args.log_json:
        os.environ[LOG_JSON_ENV] = "1"
    words = sys.argv[1:] if argv is None else argv
    if "--in" in words and os.environ.get("PMI_RANK", "0") == "0":  # said once, by rank 0
        note, job = "note: --in is deprecated, say --input", f"python -m hpc_jobs.{stage_name}"
        emit(LogRecord(message=note, event="deprecated", level="warning", source=job, stage=stage_name))
    return args


def run_stage(
    stage_cls: type[Stage], in_paths: list[Path], out_dir: Path, config_file: Path | None, comm: Any
) -> StageManifest:
    """The stage on this rank; its config is read and checked by every rank, its error every rank's."""
    stage, full, budget = agreed(comm, lambda: configured(stage_cls, config_file))
    ctx = StageContext(
        comm, [Path(p) for p in in_paths], Path(out_dir), stage.config, full, budget, stage.name
    )
    return StageRun(stage, ctx).run()


def configured(stage_cls: type[Stage], config_file: Path | None) -> tuple[Stage, dict, int]:
    """The stage made with its table of the build config, the whole config and its memory budget."""
    full = load_config_file(config_file)
    check_build_config(full, (*PIPELINE, stage_cls.name))  # a stage outside the pipeline (a test's) too
    table = full.get(stage_cls.name)
    if (
        "seed" in full
        and "seed" in {f.name for f in dataclasses.fields(stage_cls.Config)}
        and "seed" not in (table or {})
    ):
        # a stage whose config has a seed gets the build's, so a new seed changes its config hash
        table = {**(table or {}), "seed": full["seed"]}
    cfg = stage_config(stage_cls.Config, table, stage_cls.name)
    return stage_cls(cfg), full, stage_memory_budget_mb(full, stage_cls.name)


def main(stage_cls: type[Stage], argv: list[str] | None = None) -> int:
    """Entry point of ``python -m hpc_jobs.<stage>``: any rank's failure ends the whole job, its error
    said once (runtime.job_failure)."""
    args = parse_args(argv, stage_cls.name)
    comm = world_comm()  # and never left spinning in a collective when the launcher is killed
    install_handlers()
    file_opens.install()
    # everything start-up made (modules, classes, functions: ~100 K objects) lives as long as the rank;
    # frozen, the cyclic collector stops scanning it in every full collection of the run (~0.05 CPU s
    # each); nothing the stage allocates is kept any longer
    gc.freeze()
    claim = FailureClaim.of_run(comm, work_dir(args.out))
    try:
        run_stage(stage_cls, args.inputs, args.out, args.config, comm)
    except Preempted as e:  # every rank stopped at the same boundary
        if comm.Get_rank() == 0:
            emit(LogRecord(message=str(e), event="preempted", level="warning", source=stage_cls.name))
        return PREEMPTED_EXIT
    except KeyboardInterrupt:
        end_interrupted()
    except EXPECTED as e:
        return fail_job(comm, stage_cls.name, e, claim)
    except BaseException:
        return fail_job(comm, stage_cls.name, None, claim)
    if comm.Get_rank() == 0:
        claim.sweep()
    return 0
