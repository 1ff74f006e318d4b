"""Global phases: the one shape every stage's collective work takes, checkpointed in parts.

A stage's whole-corpus work runs in ``Stage.prepare`` as a :class:`GlobalPhase`: named steps, each
writing *parts* (files under ``work/phase/<step>/``) marked done (``<part>.done.json``: the key's
digest, its files' sha256, its facts). A :meth:`~GlobalPhase.map` step makes a part per unit of work; an
:meth:`~GlobalPhase.exchange` step shuffles records to their part's owner, which reduces its parts in
order. Parts are fixed by the data, never the rank count, so their bytes are the same on any number of
ranks; a rerun never redoes a completed part. A stop ends a step collectively; a killed rank loses only
the part it was writing. At a step's end each rank lists its parts in its step index
(``index.<rank>.json``): a rank that needs every part reads one file per rank, not a marker per part.
docs/scale.md (*The runtime: global phases in parts*).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

from corpus.formats.docshard import RecordsFile, atomic_write_bytes, atomic_write_json, iter_docs
from corpus.model import Document
from corpus.model.config import config_hash
from corpus.model.digest import canonical_json, file_sha256, json_digest
from mpi_kernels.barrier import sleeping_barrier, sleeping_bcast
from mpi_kernels.shuffle import ShuffleStats
from mpi_kernels.shuffle_array import shuffle_array
from mpi_kernels.shuffle_bytes import shuffle_by_key
from runtime.preemption import Preempted, after_part, any_rank_stopped, stop_requested
from runtime.runner import assign

PHASE_DIR = "phase"
SPILL_DIR = "spill"
KEY_FILE = "key.json"
COMPLETE = "complete.json"
PROGRESS = "progress.json"
_MARKER = ".done.json"
_INDEX = "index.{rank}.json"
_PART_PREFIX = struct.Struct(">I")


class Unit(Protocol):
    """A unit of work of a map step or a sender of an exchange: an input shard or an earlier part."""

    name: str
    sha256: str


@dataclass(frozen=True)
class Part:
    """A completed part of a step: the files it wrote (name -> sha256) and the facts it reported."""

    step: str
    name: str
    files: dict[str, str]
    facts: dict[str, Any]
    directory: Path

    @property
    def sha256(self) -> str:
        """A digest of the part's files, so a part can be the unit of a later step."""
        return json_digest(self.files)

    def path(self, suffix: str) -> Path:
        return self.directory / f"{self.name}{suffix}"


class _HashingWriter:
    """A file written under a temporary name and hashed as it is written; renamed on commit."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.tmp = final.with_name(f".{final.name}.tmp.{os.getpid()}")
        self.file: BinaryIO = open(self.tmp, "wb", buffering=1 << 20)
        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.file.write(data)

    def hexdigest(self) -> str:
        """The sha256 of what was written so far (a part may record it in a file of its own)."""
        return self.sha.hexdigest()

    def close(self) -> None:
        if not self.file.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()


class PartWriter:
    """Where one part writes its files (``name + suffix`` in the step directory)."""

    def __init__(self, step_dir: Path, name: str) -> None:
        self.step_dir = step_dir
        self.name = name
        self._files: dict[str, _HashingWriter] = {}
        self._records: list[RecordsFile] = []

    def open(self, suffix: str) -> _HashingWriter:
        """A binary file of this part, hashed while written; it appears under its name on commit."""
        if suffix in self._files:
            raise ValueError(f"part {self.name}: {suffix} opened twice")
        w = _HashingWriter(self.step_dir / f"{self.name}{suffix}")
        self._files[suffix] = w
        return w

    def open_records(self, path: Path) -> RecordsFile:
        """A side output of this part outside the step directory (a stage's ``index_records``): closed
        before the part's marker, so a completed part always has it, and removed if the part fails."""
        records = RecordsFile(path)
        self._records.append(records)
        return records

    def write_bytes(self, suffix: str, data: bytes) -> None:
        self.open(suffix).write(data)

    def write_json(self, suffix: str, value: Any) -> None:
        self.write_bytes(suffix, canonical_json(value))

    def commit(self, step: str, key_digest: str, facts: dict[str, Any]) -> Part:
        files = {}
        for suffix, w in sorted(self._files.items()):
            w.close()
            files[f"{self.name}{suffix}"] = "sha256:" + w.sha.hexdigest()
        for w in self._files.values():
            os.replace(w.tmp, w.final)
        for records in self._records:
            records.close()
        marker = {"key": key_digest, "files": files, "facts": facts}
        atomic_write_json(self.step_dir / f"{self.name}{_MARKER}", marker)
        return Part(step, self.name, files, facts, self.step_dir)

    def abort(self) -> None:
        for w in self._files.values():
            w.file.close()
            w.tmp.unlink(missing_ok=True)
        for records in self._records:
            records.abort()


#: records an exchange part is sized for by default (a stage's ``part_rows``): the parts of an exchange
#: are a function of the data's size, never of the input-shard or rank count (docs/scale.md)
PART_ROWS = 1 << 18


def part_count(rows: int, part_rows: int) -> int:
    """How many parts an exchange of about ``rows`` records has: one per ``part_rows``, at least one."""
    if part_rows < 1:
        raise ValueError(f"part_rows must be positive, got {part_rows}")
    return max(1, -(-rows // part_rows))


def global_phase_key(stage: Any, inputs: Iterable[Unit], **extra: Any) -> dict[str, Any]:
    """What a stage's global phase depends on: code version, config and every input shard's digest."""
    return {
        "stage": stage.name,
        "version": stage.version,
        "config_hash": config_hash(stage.config),
        "inputs": sorted([s.name, s.sha256] for s in inputs),
        **extra,
    }


class GlobalPhase:
    """One stage's global phase over ``ctx`` (a runner StageContext), valid for ``key`` only."""

    def __init__(self, ctx: Any, key: dict[str, Any]) -> None:
        self.ctx = ctx
        self.comm = ctx.comm
        self.key = json.loads(canonical_json(key))  # as key.json reads back: a tuple is a list there
        self.key_digest = json_digest(key)
        self.root = Path(ctx.work_dir) / PHASE_DIR
        self.stage = key.get("stage", "stage")
        #: per step: parts completed by this run and parts found completed by an earlier run (all ranks)
        self.progress: dict[str, dict[str, int]] = {}
        self._complete: dict[str, Any] | None = None
        run = None
        if ctx.rank == 0:
            self._complete = self._open()
            run = os.urandom(8).hex()  # tells this run's step indexes from an earlier run's (not digested)
        self._complete, self._run = sleeping_bcast(self.comm, (self._complete, run))
        #: the last step index asked about (step, parts by name, or None: this run has not finished the
        #: step): every part of one step, not of the phase
        self._indexed: tuple[str, dict[str, Part] | None] | None = None
        self.comm.Barrier()

    def _open(self) -> dict[str, Any] | None:
        """Rank 0: reuse the phase directory when it holds this key, else start afresh."""
        key_file = self.root / KEY_FILE
        current = json.loads(key_file.read_text()) if key_file.exists() else None
        if current != {"key": self.key, "digest": self.key_digest}:
            shutil.rmtree(self.root, ignore_errors=True)
            # compact (C-encoded) JSON: a phase key lists every input (ingest: each file's source), and
            # it is compared as read back, never read by eye
            atomic_write_bytes(key_file, canonical_json({"key": self.key, "digest": self.key_digest}))
        shutil.rmtree(Path(self.ctx.work_dir) / SPILL_DIR, ignore_errors=True)  # a killed run's runs
        complete = self.root / COMPLETE
        return json.loads(complete.read_text()) if complete.exists() else None

    # -- state ---------------------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """True when an earlier run finished this phase with this key (then every step is skipped)."""
        return self._complete is not None

    @property
    def digest(self) -> str:
        if self._complete is None:
            raise RuntimeError("the global phase has not finished")
        return self._complete["digest"]

    @property
    def facts(self) -> dict[str, Any]:
        if self._complete is None:
            raise RuntimeError("the global phase has not finished")
        return self._complete["facts"]

    def step_dir(self, step: str) -> Path:
        return self.root / step

    def part(self, step: str, name: str) -> Part | None:
        """The completed part, or None (a marker of another key counts as not done). From the step's
        index when this run finished the step, else from the part's marker."""
        indexed = self._step_index(step)
        if indexed is not None and name in indexed:
            return indexed[name]
        return self._marked_part(step, name)

    def _marked_part(self, step: str, name: str) -> Part | None:
        d = self.step_dir(step)
        marker = d / f"{name}{_MARKER}"
        if not marker.exists():
            return None
        m = json.loads(marker.read_bytes())
        if m.get("key") != self.key_digest or not all((d / f).exists() for f in m["files"]):
            return None
        return Part(step, name, m["files"], m["facts"], d)

    def forget(self, step: str, name: str) -> None:
        """Make a completed part count as not done (its step will redo it): its marker goes, and so
        does this rank's index of the step, which the step rewrites at its end."""
        (self.step_dir(step) / f"{name}{_MARKER}").unlink(missing_ok=True)
        (self.step_dir(step) / _INDEX.format(rank=self.ctx.rank)).unlink(missing_ok=True)
        self._indexed = None

    def _step_index(self, step: str) -> dict[str, Part] | None:
        """Every part of ``step`` from the ranks' step indexes, when this run finished the step (one
        file per rank), else None; the answer is kept for the last step asked about (a step asked
        about part by part, before it ends, costs one look, not one per part)."""
        if self._indexed is not None and self._indexed[0] == step:
            return self._indexed[1]
        self._indexed = (step, self._read_step_index(step))
        return self._indexed[1]

    def _read_step_index(self, step: str) -> dict[str, Part] | None:
        d = self.step_dir(step)
        found: dict[str, Part] = {}
        for rank in range(self.ctx.size):
            f = d / _INDEX.format(rank=rank)
            m = json.loads(f.read_bytes()) if f.exists() else None
            if m is None or (m["key"], m["run"], m["ranks"]) != (self.key_digest, self._run, self.ctx.size):
                return None
            found.update((n, Part(step, n, p["files"], p["facts"], d)) for n, p in m["parts"].items())
        return found

    def _write_step_index(self, step: str, owned: list[Part]) -> None:
        """This rank's parts of ``step`` (those it owns in this run, done now or earlier), read back by
        :meth:`_step_index` once every rank has written its own."""
        if self._indexed is not None and self._indexed[0] == step:
            self._indexed = None
        index = {
            "key": self.key_digest,
            "run": self._run,
            "ranks": self.ctx.size,
            "parts": {
                p.name: {"files": p.files, "facts": p.facts} for p in sorted(owned, key=lambda p: p.name)
            },
        }
        atomic_write_json(self.step_dir(step) / _INDEX.format(rank=self.ctx.rank), index)

    def verified_part(self, step: str, name: str) -> Part | None:
        """The completed part if its files still have the digests its writer recorded; a damaged part is
        forgotten (and None returned), so a rerun redoes it instead of trusting or crashing on it."""
        part = self.part(step, name)
        if part is None:
            return None
        for fname, digest in part.files.items():
            if "sha256:" + file_sha256(part.directory / fname) != digest:
                self.say(f"{step}/{fname} does not match its recorded digest: redoing part {name}")
                self.forget(step, name)
                return None
        return part

    def parts(self, step: str, names: Sequence[str]) -> list[Part]:
        """Every named part of a finished step, in the given order."""
        found = []
        for n in names:
            p = self.part(step, n)
            if p is None:
                raise FileNotFoundError(f"{self.step_dir(step)}: part {n} of step {step} is not complete")
            found.append(p)
        return found

    # -- steps ---------------------------------------------------------------------------------------
    def map(self, step: str, units: Sequence[Unit], fn: Callable[[Unit, PartWriter], dict[str, Any]]) -> None:
        """Collective: ``fn(unit, writer) -> facts`` for every unit not yet done; a part per unit, named
        after it."""
        d = self.step_dir(step)
        d.mkdir(parents=True, exist_ok=True)
        done_before = done_now = 0
        owned: list[Part] = []
        t0 = time.monotonic()
        for unit in assign(list(units), self.ctx.rank, self.ctx.size):
            if stop_requested():
                break
            earlier = self._marked_part(step, unit.name)
            if earlier is not None:
                owned.append(earlier)
                done_before += 1
                continue
            owned.append(self._run_part(step, d, unit.name, lambda w, u=unit: fn(u, w)))
            done_now += 1
            after_part(f"{self.stage}/{step}", done_now, self.ctx.rank)
        self._end_step(step, owned, done_before, done_now, t0)

    def exchange(
        self,
        step: str,
        part_names: Sequence[str],
        senders: Sequence[Unit] | None,
        send: Callable[[Any], Iterable[tuple[int, bytes, bytes]]],
        reduce: Callable[[int, Iterator[tuple[bytes, bytes]], PartWriter], dict[str, Any]],
    ) -> ShuffleStats | None:
        """Collective: every rank calls ``send(unit)`` for its sender units, yielding (part number, key,
        payload); each part's records reach the part's owner sorted by (key, payload), and
        ``reduce(part number, records, writer) -> facts`` writes the part (called for every part, also
        one that received nothing). Parts done by an earlier run receive nothing and are not reduced.
        ``senders=None``: every rank calls ``send(None)`` once, for records it holds in memory.
        Returns what this rank's shuffle did (``ShuffleStats``), or None when no part was left."""

        def shuffled(wanted: set[int], units: list[Any]) -> Any:
            def records() -> Iterator[tuple[bytes, bytes]]:
                for unit in units:
                    for part_no, key, payload in send(unit):
                        if part_no in wanted:
                            yield _PART_PREFIX.pack(part_no) + key, payload

            received = shuffle_by_key(
                self.comm,
                records(),
                partition_of=lambda k: _PART_PREFIX.unpack_from(k)[0],
                memory_budget_bytes=self.ctx.memory_budget_bytes,
                spill_dir=Path(self.ctx.work_dir) / SPILL_DIR,
            )
            groups = (
                (part_no, ((k[_PART_PREFIX.size :], v) for k, v in group))
                for part_no, group in groupby(received, key=lambda r: _PART_PREFIX.unpack_from(r[0])[0])
            )
            return received, groups

        return self._exchange(step, part_names, senders, shuffled, reduce)

    def exchange_rows(
        self,
        step: str,
        part_names: Sequence[str],
        senders: Sequence[Unit] | None,
        send: Callable[[Any], Iterable[np.ndarray]],
        reduce: Callable[[int, Iterator[np.ndarray], PartWriter], dict[str, Any]],
        *,
        dtype: Any,
        order_fields: Sequence[str] = (),
    ) -> ShuffleStats | None:
        """:meth:`exchange` for fixed-width records, with no Python work per record: ``send(unit)``
        yields structured arrays of ``dtype``, whose integer field ``part`` is the part number; a part's
        rows reach its owner through :func:`mpi_kernels.shuffle_array.shuffle_array` as batches sorted by
        ``order_fields`` then the other fields, and ``reduce(part number, batches, writer) -> facts``."""
        dtype = np.dtype(dtype)

        def shuffled(wanted: set[int], units: list[Any]) -> Any:
            keep = np.zeros(len(part_names), dtype=bool)
            keep[sorted(wanted)] = True

            def batches() -> Iterator[np.ndarray]:
                for unit in units:
                    for rows in send(unit):
                        rows = rows[keep[rows["part"]]]
                        if len(rows):
                            yield rows

            received = shuffle_array(
                self.comm,
                batches(),
                dtype=dtype,
                dest_of=lambda rows: rows["part"],
                order_fields=("part", *order_fields),
                memory_budget_bytes=self.ctx.memory_budget_bytes,
                spill_dir=Path(self.ctx.work_dir) / SPILL_DIR,
            )
            pieces = (
                (int(rows["part"][0]), rows)
                for batch in received
                for rows in np.split(batch, np.flatnonzero(np.diff(batch["part"])) + 1)
                if len(rows)
            )
            groups = (
                (part_no, (rows for _, rows in run)) for part_no, run in groupby(pieces, key=itemgetter(0))
            )
            return received, groups

        return self._exchange(step, part_names, senders, shuffled, reduce)

    def _exchange(
        self,
        step: str,
        part_names: Sequence[str],
        senders: Sequence[Unit] | None,
        shuffled: Callable[[set[int], list[Any]], tuple[Any, Iterator[tuple[int, Iterator[Any]]]]],
        reduce: Callable[[int, Iterator[Any], PartWriter], dict[str, Any]],
    ) -> ShuffleStats | None:
        """The driver both exchanges share: which parts are left, the shuffle, each owned part reduced in
        part order (also one that received nothing), stop requests between parts."""
        d = self.step_dir(step)
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        # each rank checks the markers of the parts it owns; together they know what is left
        earlier = {
            i: self._marked_part(step, part_names[i])
            for i in range(self.ctx.rank, len(part_names), self.ctx.size)
        }
        owned = [p for p in earlier.values() if p is not None]
        mine = [i for i, p in earlier.items() if p is None]
        todo = sorted(i for left in self.comm.allgather(mine) for i in left)
        done_before = len(owned)
        done_now = 0
        stats = None
        if todo:
            units = [None] if senders is None else assign(list(senders), self.ctx.rank, self.ctx.size)
            received, groups = shuffled(set(todo), units)
            pending = next(groups, None)
            try:
                for part_no in (p for p in todo if p % self.ctx.size == self.ctx.rank):
                    if stop_requested():
                        break
                    if pending is not None and pending[0] < part_no:
                        raise RuntimeError(
                            f"step {step}: records for part {pending[0]}, which is not pending"
                        )
                    records_of_part = (
                        pending[1] if pending is not None and pending[0] == part_no else iter(())
                    )
                    owned.append(
                        self._run_part(
                            step,
                            d,
                            part_names[part_no],
                            lambda w, p=part_no, r=records_of_part: reduce(p, r, w),
                        )
                    )
                    if pending is not None and pending[0] == part_no:
                        for _ in pending[1]:  # what reduce left unread belongs to this part
                            pass
                        pending = next(groups, None)
                    done_now += 1
                    after_part(f"{self.stage}/{step}", done_now, self.ctx.rank)
            finally:
                received.close()
            stats = received.stats
            self.say(
                f"step {step}: received {stats.records} records, {stats.bytes_received / 1e6:.2f} MB "
                f"in {stats.rounds} rounds, {stats.spilled_runs} spilled runs"
            )
        self._end_step(step, owned, done_before, done_now, t0)
        return stats

    def _run_part(self, step: str, d: Path, name: str, fn: Callable[[PartWriter], dict[str, Any]]) -> Part:
        writer = PartWriter(d, name)
        try:
            facts = fn(writer)
        except BaseException:
            writer.abort()
            raise
        return writer.commit(step, self.key_digest, facts)

    def _end_step(self, step: str, owned: list[Part], done_before: int, done_now: int, t0: float) -> None:
        self._write_step_index(step, owned)
        sleeping_barrier(self.comm)  # the ranks' shares of a step are uneven: an early rank sleeps
        if self.ctx.rank == 0:  # an earlier run's indexes of ranks this run does not have
            for f in self.step_dir(step).glob(_INDEX.format(rank="*")):
                if int(f.name.split(".")[1]) >= self.ctx.size:
                    f.unlink(missing_ok=True)
        before = self.comm.allreduce(done_before)
        now = self.comm.allreduce(done_now)
        self.progress[step] = {"parts_done_before": before, "parts_done_now": now}
        if self.ctx.rank == 0:
            self.say(
                f"step {step}: {now} parts done now, {before} done by an earlier run ({time.monotonic() - t0:.1f}s)"
            )
            self._record_progress()
        if any_rank_stopped(self.comm):
            raise Preempted(
                f"{self.stage}: stopped inside the global phase after step {step}'s completed parts "
                "(SIGUSR1/SIGTERM); rerun to resume"
            )

    def _record_progress(self) -> None:
        """What this run did per step (not digested): tests and people see which parts were redone."""
        p = self.root / PROGRESS
        runs = json.loads(p.read_text()) if p.exists() else []
        if not runs or runs[-1].get("pid") != os.getpid():
            runs.append({"pid": os.getpid(), "steps": {}})
        runs[-1]["steps"] = dict(self.progress)
        atomic_write_json(p, runs)

    def finish(self, steps: dict[str, Sequence[str]], facts: dict[str, Any]) -> str:
        """Collective: record the phase complete; its digest covers the key, the files of every listed
        part (step -> part names) and ``facts``. Returns the digest (the stage's prepare digest)."""
        sleeping_barrier(self.comm)  # the ranks come from uneven work
        data = None
        if self.ctx.rank == 0:
            files = {
                step: {p.name: p.files for p in self.parts(step, names)}
                for step, names in sorted(steps.items())
            }
            body = {"key": self.key, "parts": files, "facts": facts}
            data = {"key": self.key, "facts": facts, "digest": json_digest(body)}
            atomic_write_bytes(self.root / COMPLETE, canonical_json(data))  # compact, as the key
            self.say(f"global phase complete ({data['digest'][:19]}…)")
        self._complete = sleeping_bcast(self.comm, data)
        return self._complete["digest"]

    def reused(self) -> str:
        """The digest of an earlier run's complete phase (call when :attr:`complete`)."""
        if self.ctx.rank == 0:
            self.say(f"global phase complete already ({self.digest[:19]}…): reused")
        return self.digest

    def say(self, msg: str) -> None:
        """A progress line on stderr in the runner's format."""
        self.ctx.say(msg)


# -- the last step of a dedup phase: verdicts to the shards they are about ----------------------------
VERDICTS = ".verdicts.jsonl"
DECISIONS = ".decisions.json"


def part_of_name(names: Sequence[str]) -> Callable[[str], int]:
    index = {n: i for i, n in enumerate(names)}
    return index.__getitem__


def write_verdicts(writer: PartWriter, verdicts: Iterable[tuple[str, str, Any]]) -> int:
    """Write (shard name, document key, verdict) lines to a part's verdict file; returns how many."""
    f = writer.open(VERDICTS)
    n = 0
    for shard, key, verdict in verdicts:
        f.write(canonical_json([shard, key, verdict]) + b"\n")
        n += 1
    return n


def route_verdicts(
    phase: GlobalPhase,
    step: str,
    from_step: str,
    from_parts: Sequence[str],
    shards: Sequence[str],
    also: Sequence[tuple[str, Sequence[str]]] = (),
) -> None:
    """An exchange step that sends every verdict line of ``from_step``'s parts (and of the steps and
    parts in ``also``) to the part of the shard it is about and writes one decision table per shard
    (``{document key: verdict}``, canonical JSON; every shard gets one, empty when nothing happened to it)."""
    shard_no = part_of_name(shards)
    senders = None
    if phase.ctx.rank == 0:
        senders = [p for s, names in ((from_step, from_parts), *also) for p in phase.parts(s, names)]
    senders = sleeping_bcast(phase.comm, senders)

    def send(part: Part) -> Iterator[tuple[int, bytes, bytes]]:
        with open(part.path(VERDICTS), "rb") as f:
            for line in f:
                shard, key, verdict = json.loads(line)
                yield shard_no(shard), key.encode(), canonical_json(verdict)

    def reduce(_: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
        table = {k.decode(): json.loads(v) for k, v in records}
        writer.write_json(DECISIONS, table)
        return {"verdicts": len(table)}

    phase.exchange(step, shards, senders, send, reduce)


def decisions_of(phase_root: Path, step: str, shard_name: str) -> dict[str, Any]:
    """A shard's decision table, ``{document key: verdict}``, as :func:`route_verdicts` wrote it."""
    p = Path(phase_root) / step / f"{shard_name}{DECISIONS}"
    if not p.exists():
        raise FileNotFoundError(f"{p}: the global phase did not write this shard's decisions")
    return json.loads(p.read_bytes())


def decided_docs(phase_root: Path, step: str, shard: Any) -> Iterator[tuple[Document, int, Any]]:
    """Each document of an input shard with its UTF-8 size and the phase's verdict on it, keyed by its
    ordinal in the shard (None: the phase had nothing to say, the document is kept as it is)."""
    decisions = decisions_of(phase_root, step, shard.name)
    for i, doc in enumerate(iter_docs(shard.path)):
        yield doc, len(doc.text.encode("utf-8")), decisions.get(str(i))
