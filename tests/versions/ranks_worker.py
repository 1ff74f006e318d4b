"""Run under ``mpiexec -n N``: make a version of BUILD for each selection of a JSON list with the
partitioned version step, into OUT/<i>; rank 0 prints one JSON line of the ids (a refusal: its message)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mpi4py import MPI

from corpus.model.errors import UserError
from corpus.select.selection import parse_inline
from hpc_jobs.version.partitioned import make_on_ranks
from runtime.job_failure import StageError


def main() -> None:
    build, selections, out = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), Path(sys.argv[3])
    comm = MPI.COMM_WORLD
    ids = []
    for i, toml in enumerate(selections):
        try:
            made, _ = make_on_ranks(comm, build, parse_inline(toml), out / str(i))
            ids.append(made.manifest["snapshot_id"] if made else None)
        except (StageError, UserError) as e:
            ids.append(f"refused: {e}")
    if comm.Get_rank() == 0:
        print(json.dumps(ids), flush=True)


if __name__ == "__main__":
    main()
