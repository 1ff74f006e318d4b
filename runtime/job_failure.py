"""How an MPI job that fails ends: its error said once, by one rank, and every rank stopped.

An error every rank meets at one point (:class:`StageError` with ``every_rank``, or a setup step run
:func:`agreed` / :func:`from_rank0`) is said by rank 0, and the job exits 2 without ``MPI_Abort``. Any
other is said by the first rank to fail: it claims ``failed/<run>`` in a directory every rank sees
(created exclusively: a rank failing later finds it and stays silent), then aborts the job once its
line has had time to reach the log, without MPICH's own abort banner. A user's error is one line, exit
2; a bug is its traceback and a line, exit 1. Ctrl-C ends a rank silently (130): whoever launched the
job says so once. Lines go through :mod:`runtime.logline`. docs/scale.md, *Log lines*.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from corpus.model.config import ConfigError
from corpus.model.errors import UserError
from mpi_kernels.barrier import sleeping_barrier, sleeping_bcast
from runtime.logline import LogRecord, emit, json_lines

T = TypeVar("T")

#: seconds a failing rank waits between printing its error and aborting the job: MPI_Abort makes
#: Hydra kill every rank and proxy at once, and a line still in a proxy's pipe is lost (seen in CI: a
#: stage failed with exit status 2 and no error line in its log)
ABORT_GRACE_S = 1.0
#: exit status of a rank ended by Ctrl-C (SIGINT), as a shell reports it
INTERRUPTED_EXIT = 130


class StageError(RuntimeError):
    """A stage cannot run or cannot finish; the message names the problem for a person.

    ``every_rank``: every rank raises it at the same point (a collective verdict), so the job ends
    without ``MPI_Abort``, which can drop the message still on its way to the job's log."""

    def __init__(self, message: str, every_rank: bool = False) -> None:
        super().__init__(message)
        self.every_rank = every_rank


#: the failures a person can fix (bad input, bad config): one line, exit 2
EXPECTED = (StageError, ConfigError, UserError, FileNotFoundError)


def agreed(comm: Any, step: Callable[[], T]) -> T:
    """Collective: ``step()`` on every rank; where any rank fails with an expected error, every rank
    raises the lowest such rank's as a :class:`StageError` of every rank (said once, by rank 0)."""
    result, error = _attempt(step)
    sleeping_barrier(comm)  # the ranks' steps are uneven (each its share of the files): wait asleep
    errors = comm.allgather(error)
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise StageError(first, every_rank=True)
    return result  # type: ignore[return-value]


def from_rank0(comm: Any, step: Callable[[], T]) -> T:
    """Collective: ``step()`` on rank 0 only, its result on every rank; its expected error, every rank's."""
    result, error = _attempt(step) if comm.Get_rank() == 0 else (None, None)
    result, error = sleeping_bcast(comm, (result, error))
    if error is not None:
        raise StageError(error, every_rank=True)
    return result  # type: ignore[return-value]


def _attempt(step: Callable[[], T]) -> tuple[T | None, str | None]:
    try:
        return step(), None
    except EXPECTED as e:
        return None, str(e)


class FailureClaim:
    """Which rank of one run of a job says its error: the first to create ``DIR/failed/<run>``. A
    claim that cannot be made (a directory that cannot be written) is taken: said twice, never lost."""

    def __init__(self, directory: Path | None, run: str) -> None:
        self.directory = Path(directory) / "failed" if directory is not None else None
        self.run = run

    @classmethod
    def of_run(cls, comm: Any, directory: Path | None) -> FailureClaim:
        """Collective (one broadcast, before anything can fail): the run's name, rank 0's."""
        return cls(directory, comm.bcast(secrets.token_hex(8) if comm.Get_rank() == 0 else None, root=0))

    def take(self) -> bool:
        if self.directory is None:
            return True
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.directory / self.run, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        except OSError:
            return True
        return True

    def sweep(self) -> None:
        """Remove the claims of earlier, failed runs (by rank 0, once this run has succeeded)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def say_error(job: str, message: str, rank: int | None, size: int, **fields: Any) -> None:
    """``error: JOB rRANK/SIZE: message`` (no rank: every rank's), or its JSON object."""
    emit(
        LogRecord(
            message=message, event="error", level="error", stage=job, rank=rank, ranks=size, fields=fields
        )
    )


def quiet_abort(comm: Any, code: int) -> NoReturn:
    """``MPI_Abort``: every rank of the job ends; MPICH's banner (``Abort(2) on node …``) goes nowhere."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    comm.Abort(code)
    os._exit(code)  # not reached: Abort does not return


def abort_job(comm: Any, code: int, said: bool = True) -> None:
    """End every rank of the job after the grace that lets the error line reach the log; a rank that
    said nothing waits twice as long, so the rank that did aborts first."""
    if comm.Get_size() > 1:
        time.sleep(ABORT_GRACE_S if said else 2 * ABORT_GRACE_S)
        quiet_abort(comm, code)


def fail_job(
    comm: Any, job: str, error: BaseException | None = None, claim: FailureClaim | None = None
) -> int:
    """End every rank of a failed job; the exit status. ``error``: an expected failure, one line (2);
    None: the exception being handled is unexpected, its traceback and a line (1). Said by this rank
    if ``claim`` says it is the first to fail (without a claim: always)."""
    if error is not None and getattr(error, "every_rank", False):
        if comm.Get_rank() == 0:
            say_error(job, str(error), None, comm.Get_size(), every_rank=True)
        return 2
    said = claim is None or claim.take()
    code = 2 if error is not None else 1
    if said:
        _say_failure(job, error, comm.Get_rank(), comm.Get_size())
    abort_job(comm, code, said)
    return code


def _say_failure(job: str, error: BaseException | None, rank: int, size: int) -> None:
    if error is not None:
        say_error(job, str(error), rank, size)
        return
    kind, value, _ = sys.exc_info()
    text = traceback.format_exc()
    if not json_lines():
        sys.stderr.write(text)
    say_error(job, f"{kind.__name__ if kind else 'error'}: {value}", rank, size, traceback=text)


def end_interrupted() -> NoReturn:
    """Ctrl-C reached this rank: end it now and silently (the launcher, or the shell, says so); no
    ``MPI_Finalize``, which would wait for ranks still busy (Hydra ends them when this one exits)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED_EXIT)
