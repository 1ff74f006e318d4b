"""A version's export, spread across ranks: ``corpus export`` launches it, ``sbatch`` can too.

    mpiexec -n N python -m hpc_jobs.export --input VERSION --format megatron|parquet|jsonl --out DIR

Rank 0 records the request in DIR (or finds the same export there, complete or in parts); every rank
writes the units :func:`corpus.export.units.assign_units` gives it, each one whole or not at all; rank 0
gathers the units' records and writes the manifest. What a unit holds never depends on the rank count,
so the export's bytes and id are the same on any number of ranks, and a rerun after a kill writes only
the units left. Rank 0 prints one JSON line per rank (units, documents, seconds, peak RSS), then
``export_id sha256:…``. docs/export.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from corpus.export.export import FORMATS, begin, export_unit, finish_export, request
from corpus.export.megatron import check_weights
from corpus.export.parquet import score_columns
from corpus.export.units import assign_units, export_units
from corpus.model.errors import UserError
from corpus.version.open import open_version
from runtime.job_failure import EXPECTED, from_rank0
from runtime.mpi_world import world_comm
from runtime.runner import fail_job, peak_rss_mb

JOB = "export"


def parse_weights(text: str | None) -> dict[str, float] | None:
    """``web=0.7,curated=0.3`` (bucket weights for Megatron's blend); None: by tokens."""
    if not text:
        return None
    weights = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip() or weights[name.strip()] < 0:
            raise UserError(f"--weights: {item!r} is not BUCKET=WEIGHT (a weight >= 0)")
    return dict(sorted(weights.items()))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=f"python -m hpc_jobs.{JOB}", description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, type=Path, metavar="VERSION", help="a build or version")
    ap.add_argument("--format", required=True, choices=FORMATS)
    ap.add_argument("--out", required=True, type=Path, metavar="DIR", help="new or empty, or this export")
    ap.add_argument("--added", metavar="DATE", help="jsonl: the records' `added` (default: null)")
    ap.add_argument("--weights", metavar="B=W,...", help="megatron: bucket weights (default: by tokens)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    comm = world_comm()
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        t = time.perf_counter()
        version = open_version(args.input)
        req = request(version, args.format, args.added, parse_weights(args.weights))
        units = export_units(version)
        if req["options"]["weights"]:  # before anything is written
            check_weights(req["options"]["weights"], {u.bucket for u in units})
        if not from_rank0(comm, lambda: begin(args.out, req)):
            if rank == 0:
                print(f"{args.out}: complete already")
                print(f"export_id {export_id_of(args.out)}", flush=True)
            return 0
        mine = assign_units(units, size)[rank]
        scores = set()
        if args.format == "parquet":  # one schema for every file: each rank reads its units' footers
            scores = set().union(*(score_columns(units[i].shard.metadata) for i in mine))
        scores = sorted(set().union(*comm.allgather(scores)))
        records = {i: export_unit(version, units[i], req, args.out, scores) for i in mine}
        line = {
            "rank": rank,
            "units": len(mine),
            "docs": sum(r["docs"] for r in records.values()),
            "seconds": round(time.perf_counter() - t, 3),
            "peak_rss_mb": peak_rss_mb(),
        }
        gathered = comm.gather((records, line), root=0)
        if rank == 0:
            merged = {i: r for recs, _ in gathered for i, r in recs.items()}
            export_id = finish_export(version, req, args.out, [merged[i] for i in range(len(units))])
            print(json.dumps({"job": JOB, "format": args.format, "ranks": [ln for _, ln in gathered]}))
            print(f"export_id {export_id}", flush=True)
    except (*EXPECTED, ValueError) as e:
        return fail_job(comm, JOB, e)
    except BaseException:
        return fail_job(comm, JOB)
    return 0


def export_command(version: Path, fmt: str, out: Path, added: str | None, weights: str | None) -> list[str]:
    """The job's command line (without ``mpiexec``), as ``corpus export`` launches it."""
    command = [
        sys.executable,
        "-m",
        f"hpc_jobs.{JOB}",
        "--input",
        str(version),
        "--format",
        fmt,
        "--out",
        str(out),
    ]
    for flag, value in (("--added", added), ("--weights", weights)):
        if value is not None:
            command += [flag, value]
    return command


def export_id_of(out: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    return manifest.get("export_id") or manifest["snapshot_id"]
