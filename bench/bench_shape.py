"""The shape of a build: the same corpus cut into S input files, built on P ranks (issue 37).

    python bench/bench_shape.py [--n 12000] [--shards 12,1200] [--ranks 2,8] [--out DIR]

Why: a real crawl comes as 10^5-10^6 files and is built on 10^3 ranks. At a fixed number of documents
a stage's cost must not grow with the number of input files (target: CPU within 1.3x between the
fewest and the most), and what one rank opens must stay O(S / P + parts / P): an exchange whose parts
are one per input file reads S runs in each of S parts (S^2 reads), and a step that has nothing to
do for the corpus (the repository graph without code) must cost nothing.

The corpus is ``bench/bench_scale.py``'s (real crawl windows and Perl's docs, with planted copies and
boilerplate), written as S files of N / S documents. Each stage runs alone under ``mpiexec -n P``
(oversubscribed on this machine: the table measures work and files, not speed) with
``CORPUS_COUNT_OPENS`` set, so each rank counts the files it opens (``runtime.file_opens``). Per stage:
CPU seconds of all its processes (user + system, from the children's rusage), the largest rank's files
opened and all ranks' together, and the phase parts it completed (``*.done.json`` markers under its
``work/``). Then the snapshot id of every build: it must not depend on P. The exit status is 1 only
when a build fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_scale import Mix, build_config, generate, load_pool, run_assembly, write_inputs  # noqa: E402

#: the target of issue 37: a stage's CPU at the most input files within this factor of the fewest
TARGET_RATIO = 1.3


@dataclass
class StageCost:
    """What one stage of one build cost."""

    stage: str
    ok: bool
    cpu_s: float = 0.0
    sys_s: float = 0.0
    wall_s: float = 0.0
    opened_max: int = 0
    opened_total: int = 0
    markers: int = 0


def _children_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, r.ru_stime


def run_build(
    in_dir: Path, build: Path, ranks: int, config: dict, log: Path, code: Path = ROOT
) -> tuple[list[StageCost], str]:
    """Every stage alone on ``ranks`` ranks (the stages of the checkout ``code``), then the snapshot; the
    costs and the snapshot id ("" when a stage failed)."""
    from corpus.model.layout import manifest_path, stage_dir, work_dir
    from corpus.model.stages import PIPELINE
    from runtime.build import write_build_config
    from runtime.file_opens import ENV

    build.mkdir(parents=True, exist_ok=True)
    user_cfg = build.parent / f"{build.name}-config.json"
    user_cfg.write_text(json.dumps(config, indent=1))
    cfg_path = write_build_config(build, user_cfg, None)
    env = {**os.environ, "PYTHONPATH": str(code), ENV: "1"}
    costs, prev = [], [in_dir]
    with open(log, "a") as logf:
        for name in PIPELINE:
            out = stage_dir(build, name)
            cmd = [sys.executable, "-m", "cli", "stage", name, "--in", *map(str, prev), "--out", str(out)]
            cmd += ["--ranks", str(ranks), "--config", str(cfg_path)]
            cpu0, sys0 = _children_cpu()
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=code, env=env, stdout=logf, stderr=subprocess.STDOUT)
            cpu1, sys1 = _children_cpu()
            cost = StageCost(name, proc.returncode == 0, cpu1 - cpu0, sys1 - sys0, time.perf_counter() - t0)
            costs.append(cost)
            if not cost.ok:
                return costs, ""
            opened = json.loads(manifest_path(out).read_text())["run_info"].get("files_opened_by_rank", {})
            cost.opened_max, cost.opened_total = max(opened.values(), default=0), sum(opened.values())
            cost.markers = sum(1 for _ in work_dir(out).rglob("*.done.json")) if work_dir(out).exists() else 0
            print(
                f"    {name:14s} {cost.cpu_s:7.1f} CPU s ({cost.sys_s:5.1f} sys)  opened/rank "
                f"{cost.opened_max:7,d}  parts {cost.markers:6,d}",
                flush=True,
            )
            prev = [out]
        snap = run_assembly(build, logf) if code == ROOT else None
    return costs, snap.snapshot_id if snap is not None and snap.ok else ""


def format_table(
    n: int, results: dict[tuple[int, int], tuple[list[StageCost], str]], files: dict[int, int]
) -> str:
    """Per stage and (S, P): CPU s (sys), files opened by the busiest rank, parts; then the ratio of
    the most files' CPU to the fewest's at each P."""
    keys = sorted(results)
    head = "| stage | " + " | ".join(
        f"S={files[s]:,} P={p}: CPU s (sys) / opened per rank / parts" for s, p in keys
    )
    lines = [f"{n:,} documents", "", head + " |", "|---|" + "---:|" * len(keys)]
    stages = [c.stage for c in results[keys[0]][0]]
    for i, stage in enumerate(stages):
        cells = []
        for k in keys:
            costs = results[k][0]
            c = costs[i] if i < len(costs) else None
            cells.append(
                "failed"
                if c is None or not c.ok
                else f"{c.cpu_s:.1f} ({c.sys_s:.1f}) / {c.opened_max:,} / {c.markers:,}"
            )
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    shard_counts, rank_counts = sorted({s for s, _ in keys}), sorted({p for _, p in keys})
    if len(shard_counts) > 1:
        lo, hi = shard_counts[0], shard_counts[-1]
        lines += ["", f"CPU at S={files[hi]:,} over S={files[lo]:,} (target <= {TARGET_RATIO}):", ""]
        for p in rank_counts:
            a, b = results.get((lo, p)), results.get((hi, p))
            if a is None or b is None:
                continue
            ratios = [
                f"{x.stage} {y.cpu_s / max(x.cpu_s, 1e-9):.2f}"
                for x, y in zip(a[0], b[0], strict=False)
                if x.ok and y.ok
            ]
            total = sum(y.cpu_s for y in b[0]) / max(sum(x.cpu_s for x in a[0]), 1e-9)
            lines.append(f"- P={p}: " + ", ".join(ratios) + f"; whole build {total:.2f}")
    lines += ["", "snapshot ids (the same on every P at one S):", ""]
    for s in shard_counts:
        ids = {p: results[(s, p)][1] for p in rank_counts if (s, p) in results}
        same = len(set(ids.values())) == 1 and "" not in ids.values()
        lines.append(f"- S={files[s]:,}: {'same' if same else 'DIFFERENT'} {ids}")
    return "\n".join(lines)


def format_baseline(
    results: dict[tuple[int, int], tuple[list[StageCost], str]],
    baseline: dict[tuple[int, int], tuple[list[StageCost], str]],
    files: dict[int, int],
) -> str:
    """Per stage: CPU s of this checkout and of the baseline, at each S, on the same ranks."""
    keys = sorted(baseline)
    head = " | ".join(f"S={files[s]:,} P={p}: this / baseline CPU s" for s, p in keys)
    lines = [f"| stage | {head} |", "|---|" + "---:|" * len(keys)]
    stages = [c.stage for c in results[keys[0]][0]]
    for i, stage in enumerate(stages):
        cells = []
        for k in keys:
            a, b = results[k][0], baseline[k][0]
            ok = i < len(a) and i < len(b) and a[i].ok and b[i].ok
            cells.append(f"{a[i].cpu_s:.1f} / {b[i].cpu_s:.1f}" if ok else "failed")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    totals = [
        f"{sum(c.cpu_s for c in results[k][0]):.0f} / {sum(c.cpu_s for c in baseline[k][0]):.0f}"
        for k in keys
    ]
    lines.append("| all stages | " + " | ".join(totals) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12_000, help="documents in the corpus")
    ints = lambda v: [int(x) for x in v.split(",")]  # noqa: E731
    ap.add_argument(
        "--shards", type=ints, default=[12, 1200], help="input files per corpus (comma-separated)"
    )
    ap.add_argument("--ranks", type=ints, default=[2, 8], help="rank counts (comma-separated)")
    ap.add_argument("--budget-mb", type=int, default=256, help="the build's memory_budget_mb")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_shape"), help="work directory")
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout (e.g. a git worktree of an earlier commit): its stages are built on the "
        "fewest ranks at every S too, as the plain baseline of the same run",
    )
    args = ap.parse_args(argv)
    work = args.out
    work.mkdir(parents=True, exist_ok=True)
    mix = Mix()
    docs, _ = generate(load_pool(work, mix), args.n, args.seed, mix)
    config = build_config(args.budget_mb, args.seed)
    results: dict[tuple[int, int], tuple[list[StageCost], str]] = {}
    baseline: dict[tuple[int, int], tuple[list[StageCost], str]] = {}
    files: dict[int, int] = {}
    for s in args.shards:
        in_dir = work / f"in-{s}"
        shutil.rmtree(in_dir, ignore_errors=True)
        files[s] = len(write_inputs(docs, in_dir, math.ceil(args.n / s)))
        for p in args.ranks:
            print(f"S={files[s]:,} input files, P={p} ranks:", flush=True)
            build = work / f"build-{s}-{p}"
            shutil.rmtree(build, ignore_errors=True)
            results[(s, p)] = run_build(in_dir, build, p, config, work / "log.txt")
            shutil.rmtree(build, ignore_errors=True)
        if args.baseline is not None:
            p = min(args.ranks)
            print(f"S={files[s]:,} input files, P={p} ranks, baseline {args.baseline}:", flush=True)
            build = work / f"baseline-{s}-{p}"
            shutil.rmtree(build, ignore_errors=True)
            baseline[(s, p)] = run_build(in_dir, build, p, config, work / "log.txt", args.baseline)
            shutil.rmtree(build, ignore_errors=True)
    print()
    print(format_table(args.n, results, files))
    if baseline:
        print()
        print(format_baseline(results, baseline, files))
    return 0 if all(snapshot for _, snapshot in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
