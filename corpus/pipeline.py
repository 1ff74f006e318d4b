"""The build: the ordered stages, the local launcher (``mpiexec``), the candidates and the default version.

A build directory (laid out by :mod:`corpus.layout`) holds one directory per stage, the effective config
the stages ran with, the **candidates** (every document that passed the hard rules, tokenized and
sharded: ``candidates/``) and the **default version** (``snapshot/``, what the loader reads unless told
otherwise): the config's selection of the candidates, made from their metadata table. Each stage reads the
previous one's directory; the first reads the raw inputs. Stages are named, never imported: this module
launches ``python -m hpc_jobs.<name>``, so the library stays below the stages.

The hard rules, the only documents a build does not store (docs/versions.md): a record that cannot be
read or decoded (quarantined, with its reason), an eval-holdout document and an older fetch of a URL
fetched again (ingest), a page whose extraction gives no text (extract), an exact copy (stored once;
exact_dedup counts its copies), a document line dedup empties. Everything else (the quality policy,
near-duplicates, contamination, opt-outs, cutoffs, licences) is a selection.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from corpus.config import check_build_config, load_config_file
from corpus.docshard import atomic_write_json
from corpus.errors import UserError
from corpus.layout import (
    CANDIDATES_DIR,
    STAGES_DIR,
    build_config_path,
    candidates_dir,
    manifest_path,
    snapshot_dir,
    stage_dir,
)
from corpus.manifests import read_stage_manifest, require_stage_manifest
from corpus.model import SnapshotManifest, StageManifest
from corpus.selection import Selection, parse_policy

#: Every stage of a build, in order. A stage is the module ``hpc_jobs.<name>`` defining ``STAGE``.
PIPELINE: tuple[str, ...] = (
    "ingest",  # WARC / JSONL / text -> raw documents; eval holdout; recrawl collapse
    "extract",  # HTML -> text, per-document robustness
    "exact_dedup",  # before the classifiers: an exact copy is never scored (docs/versions.md, cost)
    "annotate",  # language ID, heuristic signals, quality score, PII scrub (annotates, never drops)
    "line_dedup",
    "minhash_dedup",  # clusters and representative keys (annotates; the version picks representatives)
    "decontaminate",  # contamination runs (annotates; the default version excludes contaminated documents)
    "tokenize",
    "write_shards",  # global shuffle and Megatron-format shards
)


def check_stage_name(name: str) -> None:
    """A clear error for a stage name that is not one of the pipeline's."""
    if name not in PIPELINE:
        raise UserError(f"unknown stage {name!r}; stages: {', '.join(PIPELINE)}")


def mpiexec_path() -> str:
    """The MPI launcher beside this interpreter (the PyPI ``mpich`` wheel's hydra), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if not found:
        raise UserError("mpiexec not found: install the project (`make venv`) so the mpich wheel provides it")
    return found


def stage_command(name: str, in_paths: list[Path], out_dir: Path, config: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", f"hpc_jobs.{name}", "--in", *map(str, in_paths), "--out", str(out_dir)]
    if config is not None:
        cmd += ["--config", str(config)]
    return cmd


def launch_stage(name: str, in_paths: list[Path], out_dir: Path, ranks: int, config: Path | None) -> StageManifest:
    """Run one stage on this machine as ``mpiexec -n RANKS``; progress goes to stderr."""
    check_stage_name(name)
    if ranks < 1:
        raise UserError(f"--ranks must be at least 1, got {ranks}")
    cmd = [mpiexec_path(), "-n", str(ranks), *stage_command(name, in_paths, out_dir, config)]
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.run(cmd, env=env, stdout=sys.stderr)
    if proc.returncode != 0:
        raise UserError(f"stage {name} failed with exit status {proc.returncode} (its log is above)")
    return require_stage_manifest(out_dir)


def write_build_config(out: Path, config_file: Path | None, seed: int | None) -> Path:
    """The effective config every stage of this build reads: the user's file plus the seed."""
    cfg: dict[str, Any] = load_config_file(config_file)
    check_build_config(cfg, PIPELINE)
    default_selection(cfg)  # a mistake in [policy] fails now, not after every stage has run
    if seed is not None:
        cfg["seed"] = seed
    cfg.setdefault("seed", 0)
    path = build_config_path(out)
    atomic_write_json(path, cfg)
    return path


def default_selection(cfg: dict[str, Any]) -> Selection:
    """The build's default version: the config's ``[policy]`` (PolicyConfig's defaults where it is
    silent), contaminated documents out, one representative per near-duplicate cluster."""
    return Selection(
        policy=parse_policy(cfg.get("policy") or {}), include_contaminated=False, near_duplicates="representative"
    )


def build(inputs: list[Path], out: Path, ranks: int, config_file: Path | None, seed: int | None) -> str:
    """Run every stage in order, then write the candidates and the default version; returns the
    default version's id. Reruns resume where they stopped."""
    missing = [str(p) for p in inputs if not p.exists()]
    if missing:
        raise UserError(f"input not found: {', '.join(missing)}")
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = write_build_config(out, config_file, seed)
    manifests = []
    prev: list[Path] = [p.resolve() for p in inputs]
    for name in PIPELINE:
        directory = stage_dir(out, name)
        manifests.append(launch_stage(name, prev, directory, ranks, cfg_path))
        check_documents_left(manifests[-1], inputs)
        prev = [directory]
    return finish_build(out, manifests)


def check_documents_left(m: StageManifest, inputs: list[Path]) -> None:
    """Stop the build, in one line naming the inputs and the reasons, when a stage keeps no document:
    the later stages would only write an empty snapshot and call it a success."""
    t = m.yield_counts().total()
    if t.docs_out:
        return
    dropped = sorted((t.filtered + t.quarantined).items())
    skipped = sorted(m.extra.get("skipped_records", {}).items())
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
    per-document 8-gram index, tokenizer) from the finished stages and write its manifest; see :mod:`corpus.snapshot`."""
    from corpus.snapshot import assemble

    candidates = assemble(out, manifests, seed, stage_versions(manifests), CANDIDATES_DIR)
    atomic_write_json(manifest_path(candidates_dir(out)), candidates.to_dict())
    return candidates


def finish_build(out: Path, manifests: list[StageManifest]) -> str:
    """After the last stage: the candidates, then the default version in ``out/snapshot`` (the
    config's selection, :func:`default_selection`); returns the default version's id. A default version
    may keep no document of a bucket (a tiny build's strict policy): the loader names the empty bucket
    when a mixture asks for it."""
    from corpus.version import plan_version, write_version  # DuckDB and pyarrow: not in every rank's runner

    cfg = json.loads(build_config_path(out).read_text())
    assemble_candidates(out, manifests, int(cfg["seed"]))
    planned = plan_version(candidates_dir(out), default_selection(cfg))
    shutil.rmtree(snapshot_dir(out), ignore_errors=True)
    write_version(planned.version, planned.manifest, planned.bits, snapshot_dir(out), planned.version.base_dir)
    return planned.manifest["snapshot_id"]


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
