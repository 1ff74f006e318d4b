"""A wall-clock bound on reading one input (runtime.input_deadline): a stalled reader is stopped, even
inside a blocking system call, and the code holding a record is never interrupted."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from runtime.input_deadline import InputDeadline, InputTimeout
from tests.conftest import ROOT

#: a reader blocked for good in read(2) on a pipe nobody writes to, under a 0.5 s deadline
BLOCKED_READER = """
import os, sys
from runtime.input_deadline import InputDeadline, InputTimeout
r, w = os.pipe()
def reader():
    yield os.read(r, 1)
with InputDeadline(0.5) as d:
    try:
        list(d.each(reader()))
    except InputTimeout as e:
        print("stopped:", e)
"""


def test_a_reader_blocked_in_a_system_call_is_stopped_at_its_deadline():
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED_READER], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped: no end of input within 0.5 s"


def test_the_consumer_is_never_interrupted_and_the_reader_stops_at_its_next_record():
    got = []
    with InputDeadline(0.05) as d:
        with pytest.raises(InputTimeout):
            for k in d.each(range(3)):
                time.sleep(0.5)  # past the deadline, holding record k: not interrupted
                got.append(k)
    assert got == [0]


def test_a_reader_that_ends_in_time_gives_every_record_and_leaves_no_timer_behind():
    before = signal.getsignal(signal.SIGALRM)
    with InputDeadline(60) as d:
        assert list(d.each(iter(range(5)))) == [0, 1, 2, 3, 4]
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before


def test_a_deadline_is_positive():
    with pytest.raises(ValueError):
        InputDeadline(0)
