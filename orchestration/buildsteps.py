"""The steps of an orchestrated build besides the stage jobs, run on the cluster's side (where the build
directory is) through the same backend that submits the jobs:

    python -m orchestration.buildsteps prepare  --out DIR --input PATH... [--config FILE] [--seed S]
                                                       [--overrides JSON] [--base BUILD | --latest-base ROOT]
    python -m orchestration.buildsteps finalize --out DIR --stages a,b,c [--config FILE]

``prepare`` does what ``corpus build`` does before its stages (inputs, build config, dedup indexes,
forked from a base when there is one); ``finalize`` what it does after them
(:func:`runtime.build.finish_build`, then the data card) and prints one JSON line;
:func:`verify_stage` checks a stage's manifest against the previous stage's. See docs/orchestration.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from corpus.model import GroupCounts, StageManifest, YieldCounts
from corpus.model.config import ConfigError, check_build_config, load_config_file, stage_config
from corpus.model.errors import UserError
from corpus.model.layout import build_config_path, dedup_base_path, manifest_path, snapshot_dir
from corpus.report.alarms import BuildAlarmError, alarm_config, enforce
from corpus.report.build_view import open_build
from corpus.report.counts import funnel_table
from runtime import build as pipeline


class VerifyError(RuntimeError):
    """A stage's manifest does not hold up: the stage must not be built on."""


class NothingLeft(UserError):
    """A stage kept no document: the build stops here, with the reasons (retrying changes nothing)."""


def verify_stage(
    stage: str, manifest: dict[str, Any], previous: dict[str, Any] | None, inputs: list[str] | None = None
) -> dict[str, Any]:
    """Check a completed stage's manifest; return its digest and totals (what the DAG passes on).

    * it is the manifest of ``stage``, with one count record per output shard;
    * every shard's counts and the totals reconcile (in = out + filtered + quarantined), and the
      totals are the sum of the shards';
    * it was made from the previous stage's outputs: the same shard digests, and as many documents in
      as the previous stage let out;
    * given the build's ``inputs``, it kept a document (:class:`NothingLeft` otherwise, the one line
      ``corpus build`` prints: :func:`runtime.build.check_documents_left`).
    """
    m = StageManifest.from_dict(manifest)
    if m.stage != stage:
        raise VerifyError(f"manifest is of stage {m.stage!r}, expected {stage!r}")
    if len(m.outputs) != len(m.shard_counts):
        raise VerifyError(f"{stage}: {len(m.outputs)} output shards but counts for {len(m.shard_counts)}")
    summed = GroupCounts()
    for name, counts in sorted(m.shard_counts.items()):
        t = YieldCounts.from_dict(counts).total()
        if not t.reconciles():
            raise VerifyError(f"{stage}/{name}: counts do not reconcile: {t.to_dict()}")
        summed.add(t)
    totals = GroupCounts.from_dict(m.totals)
    if not totals.reconciles():
        raise VerifyError(f"{stage}: totals do not reconcile: {m.totals}")
    if summed.to_dict() != totals.to_dict():
        raise VerifyError(f"{stage}: totals {m.totals} are not the sum of the shards' {summed.to_dict()}")
    if previous is not None:
        p = StageManifest.from_dict(previous)
        if Counter(s.sha256 for s in m.inputs) != Counter(s.sha256 for s in p.outputs):
            raise VerifyError(f"{stage}: its inputs are not the outputs of {p.stage} (stale or mixed build?)")
        p_out = GroupCounts.from_dict(p.totals).docs_out
        if totals.docs_in != p_out:
            raise VerifyError(f"{stage}: {totals.docs_in} documents in, but {p.stage} let {p_out} out")
    if inputs is not None:
        try:
            pipeline.check_documents_left(m, [Path(p) for p in inputs])
        except UserError as e:
            raise NothingLeft(str(e)) from e
    return {"stage": stage, "manifest_digest": m.digest, "totals": totals.to_dict(), "shards": len(m.outputs)}


def stage_config_class(name: str) -> type:
    """The config dataclass of stage ``name`` (its module imported by name, as its job imports it)."""
    return importlib.import_module(f"hpc_jobs.{name}.stage").STAGE.Config


def check_stage_tables(cfg: dict[str, Any]) -> None:
    """Build every stage's config from its table now, as its job will (an unknown key or a bad value
    fails here, in ``prepare``, not hours later when that stage's job starts), and the alarms' config."""
    check_build_config(cfg, pipeline.PIPELINE)
    for name in pipeline.PIPELINE:
        if isinstance(cfg.get(name), dict):
            stage_config(stage_config_class(name), cfg[name], name)
        elif name in cfg:
            raise ConfigError(f"[{name}] must be a table, got {cfg[name]!r}")
    pipeline.default_selection(cfg)  # [policy]: the default version's quality policy
    alarm_config(cfg)


def check_config_file(config_file: Path | None) -> None:
    """A build config file checked whole, as before any stage runs: every stage's table, ``[policy]``,
    ``[alarms]`` and the index settings (``[dedup_index]``); one line naming what is wrong."""
    cfg = load_config_file(config_file)
    pipeline.IndexSettings.of(cfg.pop(pipeline.DEDUP_INDEX, None))
    check_stage_tables(cfg)


def prepare(
    out: Path,
    config_file: Path | None,
    seed: int | None,
    overrides: dict[str, Any],
    inputs: list[Path],
    base: Path | None = None,
) -> tuple[Path, list[Path]]:
    """Write ``OUT/build-config.json`` (the config file, each stage table updated by ``overrides``, every
    stage's table checked against its config) and start the build's dedup indexes, against ``base`` when
    given; returns the config and the inputs left to process (with a base, those it has not ingested)."""
    missing = [str(p) for p in inputs if not p.exists()]
    if missing:
        raise UserError(f"input not found: {', '.join(missing)}")
    if base is not None and base.resolve() == out.resolve():
        raise UserError(
            f"base {base} is the build's own directory: a build is never rewritten, use a new out"
        )
    found = pipeline.BaseBuild.open(base) if base is not None else None
    if found is not None:
        inputs = found.new_inputs(inputs)
    cfg = load_config_file(config_file)
    settings = pipeline.IndexSettings.of(cfg.pop(pipeline.DEDUP_INDEX, None))
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    check_stage_tables(cfg)
    out.mkdir(parents=True, exist_ok=True)
    with pipeline.build_lock(out):  # one block: the config and the indexes of one writer
        if not overrides:
            written = pipeline.write_build_config(out, config_file, seed)
        else:
            with tempfile.TemporaryDirectory(dir=out) as tmp:
                merged = Path(tmp) / "config.json"
                merged.write_text(json.dumps(cfg))
                written = pipeline.write_build_config(out, merged, seed)
        pipeline.start_indexes(out, found, settings)
    return written, inputs


def check_band_index(out: Path, manifests: list[StageManifest], config_file: Path | None) -> None:
    """What ``corpus build`` does once minhash_dedup has run: the band index with the stage's parameters,
    created (``[dedup_index]`` of the config file) or, with a base, checked against the base's fork."""
    minhash = {m.stage: m for m in manifests}.get("minhash_dedup")
    if minhash is None:
        return
    record = dedup_base_path(out)
    base = pipeline.BaseBuild.open(out / json.loads(record.read_text())["base"]) if record.exists() else None
    settings = pipeline.IndexSettings.of(load_config_file(config_file).get(pipeline.DEDUP_INDEX))
    pipeline.check_band_index(out, minhash, settings, base)


def record_card(out: Path) -> bool:
    """``corpus report OUT --record``: the build recorded in the yield history and its card written, the
    funnel table and any alarms to the log; whether a yield or stage alarm fired in "fail" mode."""
    from corpus.report.card import alarm_lines, write_card  # the card's renderers, only where one is written

    try:
        enforce(out, None)
        failed = False
    except BuildAlarmError:
        failed = True
    view = open_build(out)
    card_path = out / "report" / "card.html"
    card = write_card(view, card_path, None)
    print(funnel_table(view.stages), file=sys.stderr)
    for line in alarm_lines(card):
        print(line, file=sys.stderr)
    print(f"report html {card_path}", file=sys.stderr)
    return failed


def finalize(out: Path, stages: list[str], config_file: Path | None = None) -> dict[str, Any]:
    """The snapshot of a build whose stages are all complete, written as ``corpus build`` writes it,
    then the build's data card (``corpus report``: ``OUT/report/card.html`` and ``card.json``), recorded
    in the yield history; a yield alarm or a stage's own alarm fails the build (or only warns, by config)."""
    manifests = pipeline.read_stage_manifests(out)
    have = [m.stage for m in manifests]
    if have != stages:
        raise UserError(f"{out}: completed stages are {have}, expected {stages}")
    if not build_config_path(out).is_file():  # the stages were run by hand without a prepare
        raise UserError(
            f"{out} has no {build_config_path(out).name}: a build starts with prepare "
            "(sbatch/prepare.sbatch --out OUT --input …, or corpus submit; docs/guide/slurm.md)"
        )
    check_band_index(out, manifests, config_file)
    snapshot_id = pipeline.finish_build(out, manifests)
    manifest = manifest_path(snapshot_dir(out))
    failed = record_card(out)
    if failed:
        raise UserError(
            f"alarm on {out}: a stage's retention left its band, or a stage raised an alarm about its "
            f'output ([alarms] on_alarm = "warn" only logs it); the alarms are above and at the top of '
            f"{out / 'report' / 'card.html'}"
        )
    return {
        "snapshot_id": snapshot_id,
        "manifest": str(manifest),
        "report": str(out / "report" / "card.html"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestration.buildsteps")
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--input", nargs="+", required=True, type=Path)
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--overrides", default="{}", help="JSON object of per-stage config tables")
    based = p.add_mutually_exclusive_group()
    based.add_argument("--base", type=Path, default=None, help="a complete build to build against")
    based.add_argument(
        "--latest-base",
        type=Path,
        default=None,
        metavar="ROOT",
        help="build against the latest complete build under ROOT",
    )
    f = sub.add_parser("finalize")
    f.add_argument("--out", required=True, type=Path)
    f.add_argument("--stages", required=True, help="comma-separated stages that must be complete")
    f.add_argument("--config", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        if args.step == "prepare":
            base = pipeline.latest_build(args.latest_base, args.out) if args.latest_base else args.base
            cfg, inputs = prepare(
                args.out, args.config, args.seed, json.loads(args.overrides), args.input, base
            )
            print(
                json.dumps(
                    {
                        "build_config": str(cfg),
                        "inputs": [str(p.resolve()) for p in inputs],
                        "base": str(base.resolve()) if base else None,
                    }
                )
            )
        else:
            print(json.dumps(finalize(args.out, [s for s in args.stages.split(",") if s], args.config)))
    except (UserError, ValueError, OSError) as e:
        print(f"buildsteps {args.step}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
