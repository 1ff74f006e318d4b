"""The build: the ordered stages, the local launcher (``mpiexec``), the candidates and the default version.

A build directory (:mod:`corpus.model.layout`) holds one directory per stage, the effective config, the
**candidates** (every document that passed the hard rules, tokenized and sharded) and the **default
version** (``snapshot/``: the config's selection of the candidates, made from their metadata table;
docs/versions.md). Each stage reads the previous one's directory; stages are named, never imported
(``python -m hpc_jobs.<name>``), so the library stays below them. A build keeps persistent dedup
indexes (exact, recrawl, band) under ``dedup_index/``: created empty, or forked from ``--base`` (then
only inputs the base has not ingested are processed, and the candidates list the base's shards first);
it commits its records as its own generations (the exact index last: an exact index names a build only
once all of it exists), then its commit record (runtime.build_commit). The whole build holds the
directory's lock; a rerun of a complete build writes nothing (docs/incremental.md, docs/snapshot.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from corpus.formats.dedup_files import CURRENT
from corpus.formats.dedup_index import IndexMismatch, PendingGeneration, PersistentIndex
from corpus.formats.dedup_keys import (
    KINDS,
    band_key_params,
    exact_key_params,
    line_key_params,
    partition_of,
    recrawl_key_params,
)
from corpus.formats.dedup_write import RUN_RECORDS
from corpus.formats.docshard import atomic_write_json
from corpus.formats.snapshot_manifest import write_snapshot_manifest
from corpus.model import ShardRef, SnapshotManifest, StageManifest
from corpus.model.config import ConfigError, check_build_config, load_config_file
from corpus.model.digest import file_sha256
from corpus.model.errors import UserError
from corpus.model.facts import DedupFacts, StageFacts
from corpus.model.layout import (
    CANDIDATES_DIR,
    INDEX_RECORDS,
    STAGES_DIR,
    beside,
    build_config_path,
    candidates_dir,
    dedup_base_path,
    dedup_index_dir,
    install_dir,
    manifest_path,
    snapshot_dir,
    stage_dir,
)
from corpus.model.manifest import read_stage_manifest, require_stage_manifest
from corpus.model.stages import PIPELINE, check_stage_name
from corpus.select.selection import Selection, parse_policy
from corpus.text.normalize import CHAR_NGRAM
from runtime.build_commit import build_commit, build_lock, committed_as, record_commit, say
from runtime.launch import launch
from runtime.launch import mpiexec_path as mpiexec_path  # where the tests and callers find it


def stage_command(name: str, in_paths: list[Path], out_dir: Path, config: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", f"hpc_jobs.{name}", "--input", *map(str, in_paths), "--out", str(out_dir)]
    if config is not None:
        cmd += ["--config", str(config)]
    return cmd


def launch_stage(
    name: str, in_paths: list[Path], out_dir: Path, ranks: int, config: Path | None
) -> StageManifest:
    """Run one stage on this machine as ``mpiexec -n RANKS``; progress goes to stderr."""
    check_stage_name(name)
    launch(stage_command(name, in_paths, out_dir, config), ranks, f"stage {name}")
    return require_stage_manifest(out_dir)


def band_index_params(minhash: StageManifest) -> dict[str, Any]:
    """What defines the band keys minhash_dedup made: the parameters its manifest says it ran with."""
    c = minhash.config
    return band_key_params(
        num_perm=c["num_perm"],
        bands=c["bands"],
        rows=c["rows"],
        seed=c["seed"],
        ngram=c["ngram"],
        char_ngram=CHAR_NGRAM,
        normalization_version=DedupFacts.of(minhash).normalization_version,
    )


def _fixed_params(params: Callable[[], dict[str, Any]]) -> Callable[[StageManifest], dict[str, Any]]:
    """A kind whose keys are defined by the code alone, whatever its stage ran with."""
    return lambda _: params()


#: per index kind the build commits: the stage whose ``index_records`` make its generation, and what
#: defines its keys (a function of that stage's manifest). In commit order: the exact index last, since
#: its generation labelled with the build is what makes the build a complete base
#: (:meth:`BaseBuild.open`), so it implies every other kind's.
COMMITTED_INDEXES: tuple[tuple[str, str, Callable[[StageManifest], dict[str, Any]]], ...] = (
    ("recrawl", "ingest", _fixed_params(recrawl_key_params)),  # kept fetches: (URL, raw digest) -> date
    ("lines", "line_dedup", _fixed_params(line_key_params)),  # line_dedup's line keys -> documents
    ("band", "minhash_dedup", band_index_params),  # minhash_dedup's band keys -> cluster id
    ("exact", "exact_dedup", _fixed_params(exact_key_params)),  # exact_dedup's groups: text key -> keeper
)
#: the kinds whose keys the code alone defines, and their parameters (the band index's are its stage's)
FIXED_PARAMS = {"recrawl": recrawl_key_params, "lines": line_key_params, "exact": exact_key_params}
#: kind -> (stage, key parameters), as above
COMMITTED = {kind: (stage, params) for kind, stage, params in COMMITTED_INDEXES}
#: the kinds a build against a base forks from the base's
FORKED = ("exact", "band", "recrawl", "lines")
#: kinds a base may lack (made before builds kept them): the build starts an empty one, and says what
#: that means
LATER_KINDS = {
    "recrawl": "its fetches are not collapsed with this build's (a page fetched again is still an exact "
    "duplicate of its document)",
    "lines": "its lines are not counted with this build's",
}

#: the build config's table of the persistent dedup index: the build's, not a stage's (never hashed: the
#: index records both values itself, and they change no decision)
DEDUP_INDEX = "dedup_index"


@dataclass(frozen=True)
class IndexSettings:
    """``[dedup_index]``: ``partitions`` (P, fixed for the life of the index and of every build based on
    it: choose it for the largest base expected, about 4 M records per partition) and ``bloom_fp_rate``.
    A build with a base takes both from the base's index."""

    partitions: int = 64
    bloom_fp_rate: float = 0.01

    @classmethod
    def of(cls, table: Any) -> IndexSettings:
        table = table or {}
        if not isinstance(table, dict):
            raise ConfigError(f"{DEDUP_INDEX} must be a table ([{DEDUP_INDEX}]), got {table!r}")
        unknown = sorted(set(table) - {"partitions", "bloom_fp_rate"})
        if unknown:
            raise ConfigError(
                f"[{DEDUP_INDEX}] unknown keys: {', '.join(unknown)} (known: bloom_fp_rate, partitions)"
            )
        s = cls(**table)
        if (
            isinstance(s.partitions, bool)
            or not isinstance(s.partitions, int)
            or not 1 <= s.partitions < 1 << 31
        ):
            raise ConfigError(
                f"[{DEDUP_INDEX}] partitions must be an integer in [1, 2^31), got {s.partitions!r}"
            )
        if not isinstance(s.bloom_fp_rate, float) or not 0 < s.bloom_fp_rate < 1:
            raise ConfigError(
                f"[{DEDUP_INDEX}] bloom_fp_rate must be a number in (0, 1), got {s.bloom_fp_rate!r}"
            )
        return s


def write_build_config(out: Path, config_file: Path | None, seed: int | None) -> Path:
    """The effective config every stage of this build reads: the user's file plus the seed (without
    ``[dedup_index]``, which the build applies to its index, not to a stage)."""
    cfg: dict[str, Any] = load_config_file(config_file)
    IndexSettings.of(cfg.pop(DEDUP_INDEX, None))
    check_build_config(cfg, PIPELINE)
    default_selection(cfg)  # a mistake in [policy] fails now, not after every stage has run
    if seed is not None:
        cfg["seed"] = seed
    cfg.setdefault("seed", 0)
    path = build_config_path(out)
    with build_lock(out):
        try:
            same = json.loads(path.read_text()) == cfg
        except (OSError, ValueError):
            same = False
        if not same:  # a rerun with the same config rewrites nothing
            atomic_write_json(path, cfg)
    return path


def default_selection(cfg: dict[str, Any]) -> Selection:
    """The build's default version: the config's ``[policy]`` (PolicyConfig's defaults where it is
    silent), contaminated documents out, one representative per near-duplicate cluster."""
    return Selection(
        policy=parse_policy(cfg.get("policy") or {}),
        include_contaminated=False,
        near_duplicates="representative",
    )


def build(
    inputs: list[Path],
    out: Path,
    ranks: int,
    config_file: Path | None,
    seed: int | None,
    base: Path | None = None,
) -> str:
    """Run every stage in order, then write the candidates and the default version, then commit the
    build's dedup index generation; returns the default version's id. Reruns resume where they stopped.
    With ``base`` (a complete build) the indexes start as forks of the base's and only the inputs the
    base has not ingested are processed (the others are named on stderr)."""
    missing = [str(p) for p in inputs if not p.exists()]
    if missing:
        raise UserError(f"input not found: {', '.join(missing)}")
    settings = IndexSettings.of(load_config_file(config_file).get(DEDUP_INDEX))
    if base is not None and base.resolve() == out.resolve():
        raise UserError(
            f"--base {base} is the build's own directory: a build is never rewritten, use a new --out"
        )
    found = BaseBuild.open(base) if base is not None else None
    if found is not None:
        inputs = found.new_inputs(inputs)
    with build_lock(out):  # every stage and the finish, under one lock
        cfg_path = write_build_config(out, config_file, seed)
        start_indexes(out, found, settings)
        manifests = []
        prev: list[Path] = [p.resolve() for p in inputs]
        started = time.monotonic()
        for n, name in enumerate(PIPELINE, 1):
            directory = stage_dir(out, name)
            say(f"stage {n}/{len(PIPELINE)} {name} on {ranks} rank(s)", "stage_start", name, **position(n))
            manifests.append(launch_stage(name, prev, directory, ranks, cfg_path))
            t = manifests[-1].totals
            done = stage_done_line(n, manifests[-1], time.monotonic() - started)
            say(done, "stage_done", name, **position(n), docs_in=t["in"], docs_out=t["out"])
            check_documents_left(manifests[-1], inputs)
            if name == "minhash_dedup":
                check_band_index(out, manifests[-1], settings, found)
            prev = [directory]
        complete = committed_as(out, manifests) is not None
        snapshot_id = finish_build(out, manifests, ranks)
        write_build_card(out, complete)
        return snapshot_id


def write_build_card(out: Path, complete: bool = False) -> None:
    """The build's data card in ``out/report/`` (``corpus report OUT``), as the DAG's finalize writes it;
    the yield history is read, not recorded (``corpus report OUT --record`` records it). A build that was
    complete already keeps the card it has (a rerun writes nothing); one without a card gets it."""
    from corpus.report.build_view import open_build  # matplotlib: only where a card is written
    from corpus.report.card import write_card

    card = out / "report" / "card.html"
    if complete and card.is_file():
        return
    write_card(open_build(out), card, None)
    say(f"data card {card}", "report", card=str(card))


def position(n: int) -> dict[str, int]:
    """Where stage ``n`` (from 1) is in the build, for its lines' JSON objects."""
    return {"stage_number": n, "stages": len(PIPELINE)}


def stage_done_line(n: int, m: StageManifest, elapsed_s: float) -> str:
    """A finished stage in the build's log: its documents in and out, and the build's time so far."""
    t = m.totals
    dropped = sum(t["filtered"].values()) + sum(t["quarantined"].values())
    return (
        f"stage {n}/{len(PIPELINE)} {m.stage} done: {t['in']:,} documents in, {t['out']:,} out, "
        f"{dropped:,} filtered or quarantined; {elapsed_s:,.0f} s since the first stage"
    )


@dataclass(frozen=True)
class BaseBuild:
    """A complete build that a new one is built against (``--base``): its candidates' id (the label of
    its index generation) and its exact index."""

    path: Path
    label: str
    exact: PersistentIndex

    @classmethod
    def open(cls, path: Path) -> BaseBuild:
        """The base, or a one-line UserError: not a complete build, or made with other key parameters."""
        cand = manifest_path(candidates_dir(path))
        if not manifest_path(snapshot_dir(path)).is_file() or not cand.is_file():
            raise UserError(
                f"--base {path} is not a complete build (no {CANDIDATES_DIR}/ or default version)"
            )
        label = json.loads(cand.read_text())["snapshot_id"]
        root = dedup_index_dir(path, "exact")
        try:
            exact = PersistentIndex.open(root, "exact", exact_key_params())
        except FileNotFoundError:
            raise UserError(
                f"--base {path} is not a complete build: it has no dedup index ({root})"
            ) from None
        except IndexMismatch as e:
            raise UserError(f"--base {path}: {e} (a changed dedup parameter means a full rebuild)") from None
        if label not in exact.labels:
            raise UserError(
                f"--base {path} is not a complete build: its dedup index does not hold its own generation "
                f"({label[:19]}…; the build stopped before its last step)"
            )
        for kind in LATER_KINDS:  # one it has must hold this build's keys (one it lacks: started empty)
            try:
                PersistentIndex.open(dedup_index_dir(path, kind), kind, FIXED_PARAMS[kind]())
            except FileNotFoundError:
                pass
            except IndexMismatch as e:
                raise UserError(
                    f"--base {path}: {e} (a changed dedup parameter means a full rebuild)"
                ) from None
        return cls(Path(path), label, exact)

    def new_inputs(self, inputs: list[Path]) -> list[Path]:
        """The inputs the base has not ingested (by file digest, as ingest records its inputs); each one
        it has is named on stderr and skipped, never doubled. A directory is always processed."""
        ingested = {i.sha256 for i in require_stage_manifest(stage_dir(self.path, "ingest")).inputs}
        new = []
        for p in inputs:
            sha = file_sha256(p) if p.is_file() else None
            if sha in ingested:
                say(f"skipping {p}: already ingested into base {self.path} (sha256 {sha})", "input_skipped")
            else:
                new.append(p)
        if not new:
            raise UserError(f"every input is already ingested into base {self.path}: nothing to build")
        return new


def start_indexes(out: Path, base: BaseBuild | None, settings: IndexSettings) -> None:
    """The build's exact, recrawl and lines indexes before its stages run: forks of the base's (their
    generations hard-linked, recorded in ``dedup_index/base.json`` with the labels they hold), or new
    empty ones. The band index is forked here too; without a base it is created once minhash_dedup has
    run (its parameters are the stage's). A base made before builds kept a recrawl or lines index gives
    this build an empty one (said on stderr): it answers no probe. Under the build's lock."""
    with build_lock(out):
        _start_indexes(out, base, settings)


def _start_indexes(out: Path, base: BaseBuild | None, settings: IndexSettings) -> None:
    record_path = dedup_base_path(out)
    recorded = json.loads(record_path.read_text()) if record_path.exists() else None
    if base is None:
        if recorded is not None:
            raise UserError(
                f"{out} was built against base {recorded['base']}: build it with --base again, or into a new directory"
            )
        for kind, params in FIXED_PARAMS.items():
            _own_index(dedup_index_dir(out, kind), kind, params(), settings)
        return
    record = {
        "base": os.path.relpath(base.path.resolve(), out.resolve()),
        "label": base.label,
        "labels": base.exact.labels,
    }
    if recorded is not None and recorded["label"] != base.label:
        raise UserError(f"{out} was built against another base ({recorded['base']}): use a new directory")
    if recorded is None:
        for kind in FORKED:  # an index from an earlier run without a base is not a fork
            shutil.rmtree(dedup_index_dir(out, kind), ignore_errors=True)
    if recorded != record:  # new, or the same base found at another path (the builds moved apart)
        atomic_write_json(record_path, record)
    for kind in FORKED:
        root = dedup_index_dir(out, kind)
        if (root / CURRENT).exists():
            continue
        if kind in LATER_KINDS and not (dedup_index_dir(base.path, kind) / CURRENT).exists():
            say(f"base {base.path} has no {kind} index (built before builds kept one): {LATER_KINDS[kind]}")
            PersistentIndex.create(
                root, kind, FIXED_PARAMS[kind](), base.exact.partitions, bloom_spec=base.exact.bloom_spec
            )
        else:  # a kill during a fork leaves no CURRENT: fork again
            PersistentIndex.open(dedup_index_dir(base.path, kind)).fork(root)


def _own_index(root: Path, kind: str, params: dict[str, Any], settings: IndexSettings) -> PersistentIndex:
    """A build's own index without a base: opened, or (made with other parameters by an earlier run into
    this directory, whose generation this build would replace anyway) created afresh."""
    try:
        return PersistentIndex.open(root, kind, params)
    except (FileNotFoundError, IndexMismatch):
        shutil.rmtree(root, ignore_errors=True)
        return PersistentIndex.create(root, kind, params, settings.partitions, settings.bloom_fp_rate)


def check_band_index(
    out: Path, minhash: StageManifest, settings: IndexSettings, base: BaseBuild | None
) -> None:
    """The band index with the parameters minhash_dedup ran with: a base's (forked) is refused when they
    differ, naming the parameter; without a base it is created with them."""
    params = band_index_params(minhash)
    root = dedup_index_dir(out, "band")
    if base is None:
        _own_index(root, "band", params, settings)
        return
    try:
        PersistentIndex.open(root, "band", params)
    except IndexMismatch as e:
        raise UserError(f"--base {base.path}: {e} (a changed dedup parameter means a full rebuild)") from None


def check_documents_left(m: StageManifest, inputs: list[Path]) -> None:
    """Stop the build, in one line naming the inputs and the reasons, when a stage keeps no document:
    the later stages would only write an empty snapshot and call it a success."""
    t = m.yield_counts().total()
    if t.docs_out:
        return
    dropped = sorted((t.filtered + t.quarantined).items())
    skipped = sorted((StageFacts.of(m).skipped_records or {}).items())
    why = [f"{m.stage} read {t.docs_in} document(s)"]
    why += [f"dropped {', '.join(f'{r} {n}' for r, n in dropped)}"] if dropped else []
    why += [f"skipped records {', '.join(f'{r} {n}' for r, n in skipped)}"] if skipped else []
    raise UserError(
        f"no document left after stage {m.stage} of {', '.join(p.name for p in inputs)}: {'; '.join(why)}"
    )


def stage_versions(manifests: list[StageManifest]) -> dict[str, dict[str, str]]:
    return {
        m.stage: {"version": m.stage_version, "config_hash": m.config_hash, "manifest": m.digest}
        | {k: v for k, v in m.extra.items() if k.endswith("_hash") and isinstance(v, str)}
        for m in manifests
    }


def assemble_candidates(out: Path, manifests: list[StageManifest], seed: int) -> SnapshotManifest:
    """Lay out ``out/candidates`` (Megatron shards, lineage, metadata, contamination report,
    per-document 8-gram index, tokenizer) from the finished stages and write its manifest; see
    :mod:`corpus.snapshot`. Assembled beside, then renamed in whole; candidates with the same manifest
    bytes already there are left untouched (a reader loses no file)."""
    from corpus.snapshot.assembly import assemble

    new = beside(candidates_dir(out))
    try:
        candidates = assemble(out, manifests, seed, stage_versions(manifests), new.name)
        write_snapshot_manifest(new, candidates)
        install_dir(new, candidates_dir(out))
    finally:
        shutil.rmtree(new, ignore_errors=True)
    return candidates


def finish_build(out: Path, manifests: list[StageManifest], ranks: int | None = None) -> str:
    """After the last stage, under the build's lock: the candidates, then the default version in
    ``out/snapshot`` (the config's selection, :func:`default_selection`), each written beside and
    renamed in, then the index commit on ``ranks`` ranks (default: as many as the stages ran on,
    :func:`stage_ranks`), then the commit record; returns the default version's id. A build whose
    record says it was finished from these very stages and config is complete: nothing is written. A
    default version may keep no document of a bucket (a tiny build's strict policy): the loader names
    the empty bucket when a mixture asks for it."""
    from corpus.version.plan import plan_version  # DuckDB and pyarrow: not in every rank's runner
    from corpus.version.write import write_version

    with build_lock(out):
        done = committed_as(out, manifests)
        if done is not None:
            say(f"{out} is complete already (commit {done['sequence']}): nothing written")
            return done["snapshot_id"]
        cfg = json.loads(build_config_path(out).read_text())
        candidates = assemble_candidates(out, manifests, int(cfg["seed"]))
        planned = plan_version(candidates_dir(out), default_selection(cfg))
        write_version(
            planned.version,
            planned.manifest,
            planned.bits,
            snapshot_dir(out),
            planned.version.base_dir,
            replace=True,
        )
        if (dedup_index_dir(out, "exact") / CURRENT).exists():  # a build the pipeline made keeps its indexes
            by_stage = {m.stage: m for m in manifests}
            commit_indexes(out, by_stage, candidates.snapshot_id, ranks or stage_ranks(manifests))
        record_commit(out, manifests, planned.manifest["snapshot_id"])
        return planned.manifest["snapshot_id"]


def latest_build(root: Path, out: Path | None = None) -> Path:
    """The latest complete build directly under ``root`` (other than ``out``): the greatest commit
    sequence number (``committed.json``; never a file's mtime, which a copy or a rerun changes), ties
    broken by the greater directory name; a complete build without a record (finished before builds kept
    one) comes before every recorded one. Complete means what ``corpus build --base`` accepts
    (:class:`BaseBuild`); an incomplete or foreign directory is passed over."""
    found = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if d.is_dir() and (out is None or d.resolve() != out.resolve()):
            try:
                BaseBuild.open(d)
            except UserError:
                continue
            record = build_commit(d)
            found.append((record["sequence"] if record else 0, d.name, d))
    if not found:
        raise UserError(f"no complete build under {root} to build against: give the base explicitly")
    return max(found)[2]


def stage_ranks(manifests: list[StageManifest]) -> int:
    """The ranks a build's stages ran on (the most any of them did: ``run_info["ranks"]``, 1 if none
    says): what its index commit runs on when the caller does not say (``buildsteps finalize``)."""
    return max((int(m.run_info.get("ranks", 1)) for m in manifests), default=1)


#: the job whose ranks write the partitions of a pending index generation (``hpc_jobs/commit_index/``)
COMMIT_JOB = "commit_index"


def commit_job_command(out: Path, kinds: list[str], label: str | None) -> list[str]:
    """The commit job for ``kinds`` of build ``out``: the generation labelled ``label``, or (None) the
    compaction :meth:`PersistentIndex.begin_compaction` began."""
    what = ["--label", label] if label is not None else ["--compact"]
    return [sys.executable, "-m", f"hpc_jobs.{COMMIT_JOB}", "--build", str(out), "--kind", *kinds, *what]


def commit_indexes(out: Path, manifests: dict[str, StageManifest], label: str, ranks: int) -> None:
    """The build's last step: each kind's generation (:data:`COMMITTED_INDEXES`, the exact index last),
    labelled with the candidates' id; a kind the build has no index of (one started before builds kept
    it) is passed over, as a build without indexes is.

    1. this process begins each kind's pending generation (:func:`begin_commit`);
    2. the commit job on ``ranks`` ranks writes them: each rank the partitions it owns
       (:func:`write_commit_partitions`), all kinds in one launch;
    3. this process commits them in order: each commit is the index library's atomic switch.

    A kill anywhere leaves every index not yet switched as forked (a kill of one rank fails the job, and
    nothing is committed); the rerun skips a kind that already holds the label, begins the others again
    (removing what the killed run left) and writes them to the same bytes, on any number of ranks."""
    begun = []
    for kind, stage, params in COMMITTED_INDEXES:
        if (dedup_index_dir(out, kind) / CURRENT).exists():
            pending = begin_commit(out, kind, params(manifests[stage]), manifests[stage], label)
            if pending is not None:
                begun.append((kind, pending))
    if begun:
        launch(commit_job_command(out, [kind for kind, _ in begun], label), ranks, f"{COMMIT_JOB} of {out}")
    for _, pending in begun:
        pending.commit()


def begin_commit(
    out: Path, kind: str, params: dict[str, Any], m: StageManifest, label: str
) -> PendingGeneration | None:
    """One kind's pending generation, begun (None when the index already holds ``label``: committed
    by an earlier run). A generation of an earlier build into this directory (other candidates) is
    dropped first: the index starts again from its base's (or empty, where the base has none of this
    kind)."""
    root = dedup_index_dir(out, kind)
    index = PersistentIndex.open(root, kind, params)
    if label in index.labels:
        return None
    index_record_parts(out, kind, m)  # a stage made without the index is refused before anything changes
    record_path = dedup_base_path(out)
    recorded = json.loads(record_path.read_text()) if record_path.exists() else None
    base_labels = set(recorded["labels"]) if recorded else set()
    if any(not set(g.labels) <= base_labels for g in index.generations):
        shutil.rmtree(root)
        base_root = dedup_index_dir(out / recorded["base"], kind) if recorded else None
        if base_root is not None and (base_root / CURRENT).exists():
            PersistentIndex.open(base_root).fork(root)
        else:
            PersistentIndex.create(root, kind, index.params, index.partitions, bloom_spec=index.bloom_spec)
        index = PersistentIndex.open(root, kind, params)
    return index.begin(label)


def index_record_parts(out: Path, kind: str, m: StageManifest) -> list[ShardRef]:
    """The ``index_records`` artifacts of stage manifest ``m`` (every part of a run inside a build
    writes one, empty or not)."""
    parts = [s for s in m.side_outputs if s.path.startswith(f"{INDEX_RECORDS}/")]
    if not parts:
        raise UserError(
            f"{stage_dir(out, m.stage)} was made without the build's {kind} index: remove it and rerun the build"
        )
    return parts


#: records read from an ``index_records`` artifact at a time when writing a generation (2 MiB of exact
#: records: the writer's buffer, not this, bounds a rank's memory)
READ_RECORDS = 1 << 16


def write_commit_partitions(
    out: Path, kind: str, label: str, owned: range, run_records: int = RUN_RECORDS
) -> int:
    """One rank's share of a commit: partitions ``owned`` of the pending generation ``label`` that
    :func:`begin_commit` began, from the records of the stage's ``index_records`` artifacts that fall in
    them; returns how many records it read for them. Every rank reads every artifact (they are per stage
    part, not per index partition) in chunks of :data:`READ_RECORDS`, keeping its own records, and checks
    each file against the sha256 the stage's manifest lists; it writes, sorts and merges only its own,
    through a writer bounded by ``run_records``. A rank owning no partition (more ranks than ``P``)
    writes nothing."""
    stage, params = COMMITTED[kind]
    m = require_stage_manifest(stage_dir(out, stage))
    pending = _begun(PersistentIndex.open(dedup_index_dir(out, kind), kind, params(m)).pending(label))
    if not owned:
        return 0
    record, partitions, directory = KINDS[kind].record, pending.index.partitions, stage_dir(out, stage)
    mine = 0
    with pending.writer(owned, run_records) as writer:
        for part in index_record_parts(out, kind, m):
            path = directory / part.path
            damaged = f"{path} is not the file {stage} wrote: remove {directory} and rerun the build"
            if path.stat().st_size != part.records * record.itemsize:
                raise UserError(damaged)
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                while data := f.read(READ_RECORDS * record.itemsize):
                    digest.update(data)
                    rows = np.frombuffer(data, dtype=record)
                    p = partition_of(kind, rows["key"], partitions)
                    rows = rows[(p >= owned.start) & (p < owned.stop)]
                    writer.add(rows)
                    mine += len(rows)
            if digest.hexdigest() != part.sha256:  # the job fails: nothing of it is committed
                raise UserError(damaged)
    return mine


def write_compaction_partitions(out: Path, kind: str, owned: range) -> None:
    """One rank's share of a compaction (``corpus compact``): partitions ``owned`` of the merged
    generation :meth:`PersistentIndex.begin_compaction` began, from every generation's same partitions."""
    pending = _begun(PersistentIndex.open(dedup_index_dir(out, kind)).pending_compaction())
    pending.compact_partitions(owned)


def _begun(pending: PendingGeneration) -> PendingGeneration:
    """``pending`` if one process began it (its directory exists): the writers never create it."""
    if not pending.path.is_dir():
        raise UserError(
            f"{pending.path} was not begun: the process that commits the index begins it, then runs this job"
        )
    return pending


def read_stage_manifests(build_dir: Path) -> list[StageManifest]:
    """The manifests of a build's completed stages, in pipeline order."""
    found = []
    for name in PIPELINE:
        m = read_stage_manifest(stage_dir(build_dir, name))
        if m is not None:
            found.append(m)
    if not found:
        raise UserError(f"{build_dir} holds no completed stage (expected {STAGES_DIR}/<stage>/manifest.json)")
    return found
