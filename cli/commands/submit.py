"""``corpus submit``: a whole build on SLURM. Prepare runs here (the config checked, the build config
written, the dedup indexes started; against ``--base``, its inputs skipped), then the nine stage jobs
and the finalize job are queued, each after the one before; the job ids are printed and kept in
``OUT/submitted.json`` for ``corpus status``. Resubmitting the same command resumes a stopped build
(finished stages and shards are not redone). The sbatch options a run may add are the deployment's
(``CORPUS_DEPLOYMENT`` sbatch_options, as for the DAGs). docs/guide/slurm.md."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from corpus.model.errors import UserError
from corpus.model.stages import PIPELINE
from orchestration.buildsteps import check_config_file, prepare
from orchestration.chain import JobSettings, chain_jobs, read_record, submit_chain, write_record
from orchestration.deployment import NAME, TIME_LIMIT, Deployment
from orchestration.submit import LocalBackend, SubmitError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="submit a whole build to SLURM: prepare, the nine stage jobs, finalize")
    p.add_argument("--input", nargs="+", required=True, type=Path, metavar="PATH", help="as corpus build's")
    p.add_argument(
        "--out", required=True, type=Path, metavar="DIR", help="build directory, seen by every node"
    )
    p.add_argument("--config", type=Path, default=None, metavar="FILE", help="build config (TOML)")
    p.add_argument(
        "--seed", type=int, default=None, metavar="S", help="shuffle seed (overrides the config's)"
    )
    p.add_argument(
        "--base", type=Path, default=None, metavar="BUILD", help="a complete build to build against"
    )
    p.add_argument(
        "--ranks", type=int, default=2, metavar="N", help="MPI ranks (SLURM tasks) per job (default 2)"
    )
    p.add_argument(
        "--ranks-per-stage",
        action="append",
        default=[],
        metavar="STAGE=N",
        help="another rank count for one stage, e.g. minhash_dedup=8 (repeatable)",
    )
    p.add_argument("--partition", default="", metavar="NAME", help="SLURM partition (default: the cluster's)")
    p.add_argument("--time", default="", metavar="LIMIT", help="time limit of each job, e.g. 04:00:00")
    p.add_argument("--account", default="", metavar="NAME", help="SLURM account to charge")
    p.add_argument("--qos", default="", metavar="NAME", help="SLURM quality of service")
    p.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="--OPTION[=VALUE]",
        help="another sbatch option the deployment allows, written --sbatch-arg=--exclusive (repeatable)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="check and print the sbatch commands; queue nothing"
    )
    p.set_defaults(func=run)


def job_settings(args: argparse.Namespace, deployment: Deployment) -> JobSettings:
    """The flags as job settings, within the deployment's bounds: one line naming what is refused."""
    per_stage = {}
    for item in args.ranks_per_stage:
        stage, _, n = item.partition("=")
        if stage not in PIPELINE or not n.isdigit() or int(n) < 1:
            raise UserError(
                f"--ranks-per-stage {item!r}: expected STAGE=N with STAGE one of {', '.join(PIPELINE)}"
            )
        per_stage[stage] = int(n)
    if args.ranks < 1:
        raise UserError(f"--ranks must be at least 1, got {args.ranks}")
    allowed = not deployment.partitions or args.partition in deployment.partitions
    if args.partition and not (re.fullmatch(NAME, args.partition) and allowed):
        raise UserError(
            f"--partition {args.partition!r} is not one the deployment allows ({', '.join(deployment.partitions)})"
        )
    if args.time and not re.fullmatch(TIME_LIMIT, args.time):
        raise UserError(f"--time {args.time!r} is not a SLURM time (minutes, HH:MM:SS or D-HH:MM:SS)")
    extra = [f"--{name}={value}" for name, value in (("account", args.account), ("qos", args.qos)) if value]
    if refused := deployment.refused_sbatch_args([*extra, *args.sbatch_arg]):
        raise UserError(
            f"sbatch option {refused[0].split('=', 1)[0]} is not allowed by the deployment "
            f"(CORPUS_DEPLOYMENT sbatch_options: {', '.join(deployment.sbatch_options)})"
        )
    for option in [*extra, *args.sbatch_arg]:
        if re.search(r"[\n\r\x00]", option):
            raise UserError(f"sbatch option {option.split('=', 1)[0]}: its value must be one line")
    return JobSettings(
        ranks=args.ranks,
        ranks_per_stage=per_stage,
        partition=args.partition,
        time_limit=args.time,
        sbatch_args=(*extra, *args.sbatch_arg),
        root=deployment.cluster_root,
        python=deployment.interpreter,
    )


def refuse_live_chain(out: Path, backend: LocalBackend) -> None:
    """One chain per build: a job of an earlier submission still queued or running would write beside it."""
    for step, job in read_record(out).items():
        try:
            status = backend.status(job)
        except SubmitError:
            continue  # SLURM has forgotten it: it ended long ago
        if not status.done:
            raise UserError(
                f"{out}: job {job.job_id} ({step}) of an earlier corpus submit is {status.state}: "
                f"wait for it (corpus status {shlex.quote(str(out))}) or scancel it first"
            )


def run(args: argparse.Namespace) -> int:
    deployment = Deployment.from_env()
    settings = job_settings(args, deployment)
    backend = LocalBackend()
    out = args.out.resolve()
    if out.exists():
        refuse_live_chain(out, backend)
    if args.dry_run:  # the config checked as prepare checks it; nothing written
        check_config_file(args.config)
        inputs = args.input
    else:
        _, inputs = prepare(out, args.config, args.seed, {}, args.input, args.base)
    jobs = chain_jobs(out, inputs, args.config, settings)
    if args.dry_run:
        print("# each job after the one before: --dependency=afterok:ID --kill-on-invalid-dep=yes")
        for job in jobs:
            print(shlex.join(job.sbatch_argv()))
        return 0
    try:
        submitted = submit_chain(backend, jobs)
    except SubmitError as e:  # no sbatch here, a refused account, partition or option: nothing is left queued
        raise UserError(f"the jobs could not be queued, none is left: {e}") from e
    record = write_record(out, submitted)
    for job in submitted:
        print(f"{job.stage:<14} job {job.job_id}  log {job.log_path}")
    print(f"submitted {len(submitted)} jobs ({record}); follow with: corpus status {shlex.quote(str(out))}")
    return 0
