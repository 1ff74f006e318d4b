"""Global phases resume in parts: a rank killed (kill -9) or asked to stop (SIGUSR1) in the middle of a
global phase costs only the part it was on. The rerun redoes no completed part (counted from the markers
on disk before the rerun, not assumed) and its outputs are byte-identical to an uninterrupted run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from runtime.global_phase import GlobalPhase, PartWriter
from runtime.preemption import parse_fault
from tests.conftest import ROOT
from tests.dedup.dedup_corpus import make_doc, perl_sections, write_stage_dir
from tests.dedup.stage_io import output_digests, run_stage
from tests.support.interruptions import assert_resumes_after_interruption

#: (stage, step, signal, rank): one kill -9 and one SIGUSR1 inside each stage's global phase
INTERRUPTIONS = [
    ("ingest", "keys", "KILL", 1),
    ("ingest", "groups", "USR1", 0),
    ("exact_dedup", "groups", "KILL", 1),
    ("exact_dedup", "decisions", "USR1", 0),
    ("line_dedup", "lines", "KILL", 1),
    ("line_dedup", "lines", "USR1", 0),
]


@pytest.fixture(scope="module")
def dedup_input(shared_data, tmp_path_factory):
    sections = perl_sections(shared_data)[:60]
    docs = [make_doc(t, i) for i, t in enumerate(sections)]
    docs += [make_doc(t.upper(), 100 + i, crawl_date="2026-06-01") for i, t in enumerate(sections[:10])]
    return write_stage_dir(tmp_path_factory.mktemp("phase") / "in", docs, shards=6)


@pytest.fixture(scope="module")
def stage_input(dedup_input):
    """What each stage reads: raw files for ingest (the sample's edge cases: recrawls, bad records),
    a previous stage's shards for the others."""
    return lambda stage: ROOT / "sample" / "edge" if stage == "ingest" else dedup_input


@pytest.fixture(scope="module")
def small_parts(tmp_path_factory) -> Path:
    """Exchanges of a few records a part, so each step has parts on every rank to interrupt."""
    cfg = tmp_path_factory.mktemp("config") / "small-parts.toml"
    cfg.write_text(
        "".join(f"[{stage}]\npart_rows = 4\n" for stage in ("ingest", "exact_dedup", "line_dedup"))
    )
    return cfg


@pytest.fixture(scope="module")
def uninterrupted(stage_input, small_parts, tmp_path_factory):
    runs = {}

    def get(stage: str) -> dict:
        if stage not in runs:
            out = tmp_path_factory.mktemp(f"{stage}-whole") / "out"
            run_stage(stage, 2, stage_input(stage), out, small_parts)
            runs[stage] = output_digests(out)
        return runs[stage]

    return get


@pytest.mark.parametrize(("stage", "step", "sig", "rank"), INTERRUPTIONS)
def test_an_interrupted_global_phase_resumes_from_its_completed_parts(
    stage, step, sig, rank, stage_input, uninterrupted, small_parts, tmp_path, monkeypatch
):
    assert_resumes_after_interruption(
        stage,
        step,
        sig,
        rank,
        stage_input(stage),
        tmp_path / "out",
        uninterrupted(stage),
        monkeypatch,
        config=small_parts,
    )


# -- the runtime's own logic, on one in-process rank (MPI.COMM_SELF) ---------------------------------------
def _ctx(work: Path) -> SimpleNamespace:
    from mpi4py import MPI

    return SimpleNamespace(
        comm=MPI.COMM_SELF, rank=0, size=1, work_dir=work, memory_budget_bytes=1 << 20, say=lambda msg: None
    )


def _unit(name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, sha256=f"sha256:{name}")


def test_an_exchange_reduces_every_part_once_with_its_records_sorted(tmp_path):
    phase = GlobalPhase(_ctx(tmp_path), {"stage": "toy", "v": 1})
    seen = {}

    def send(unit):
        for i in range(6):
            yield i % 3, f"{unit.name}-{5 - i}".encode(), b"x"

    def reduce(part_no, records, writer: PartWriter):
        seen[part_no] = [k for k, _ in records]
        writer.write_json(".keys.json", [k.decode() for k in seen[part_no]])
        return {"n": len(seen[part_no])}

    phase.exchange("s", ["p0", "p1", "p2", "p3"], [_unit("a"), _unit("b")], send, reduce)
    assert sorted(seen) == [0, 1, 2, 3]  # part 3 received nothing and is still written
    assert seen[0] == sorted(seen[0]) and len(seen[0]) == 4 and seen[3] == []
    assert [p.facts["n"] for p in phase.parts("s", ["p0", "p1", "p2", "p3"])] == [4, 4, 4, 0]


def test_a_rerun_sends_nothing_to_completed_parts_and_a_new_key_starts_afresh(tmp_path):
    calls = []

    def send(unit):
        yield 0, b"k0", b""
        yield 1, b"k1", b""

    def reduce(part_no, records, writer):
        calls.append((part_no, [k for k, _ in records]))
        return {}

    phase = GlobalPhase(_ctx(tmp_path), {"stage": "toy", "v": 1})
    phase.exchange("s", ["p0", "p1"], [_unit("a")], send, reduce)
    (tmp_path / "phase" / "s" / "p1.done.json").unlink()  # as if the rank writing p1 was killed
    calls.clear()
    GlobalPhase(_ctx(tmp_path), {"stage": "toy", "v": 1}).exchange(
        "s", ["p0", "p1"], [_unit("a")], send, reduce
    )
    assert calls == [(1, [b"k1"])]
    calls.clear()
    GlobalPhase(_ctx(tmp_path), {"stage": "toy", "v": 2}).exchange(
        "s", ["p0", "p1"], [_unit("a")], send, reduce
    )
    assert [p for p, _ in calls] == [0, 1], "another key must not reuse the old parts"


def test_a_failing_part_leaves_no_file_a_rerun_would_trust(tmp_path):
    phase = GlobalPhase(_ctx(tmp_path), {"stage": "toy"})

    def fn(unit, writer):
        writer.open(".bin").write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        phase.map("m", [_unit("a")], fn)
    assert phase.part("m", "a") is None
    assert not [p for p in (tmp_path / "phase" / "m").iterdir()]


def test_the_phase_digest_covers_the_part_files_not_the_run(tmp_path):
    def run(work: Path) -> str:
        phase = GlobalPhase(_ctx(work), {"stage": "toy"})
        phase.map(
            "m",
            [_unit("a"), _unit("b")],
            lambda u, w: w.write_bytes(".bin", u.name.encode()) or {"u": u.name},
        )
        return phase.finish({"m": ["a", "b"]}, {"total": 2})

    assert run(tmp_path / "one") == run(tmp_path / "two")


def test_fault_specs_are_checked():
    assert parse_fault("exact_dedup/groups:2:KILL:1")[1:2] == (2,)
    with pytest.raises(ValueError, match="STEP:N:SIGNAL"):
        parse_fault("exact_dedup/groups:two:KILL")
    with pytest.raises(ValueError, match="KILL or USR1"):
        parse_fault("x:1:TERM")


def test_a_damaged_part_is_forgotten_and_redone_not_trusted(tmp_path):
    phase = GlobalPhase(_ctx(tmp_path), {"stage": "toy"})
    phase.map("m", [_unit("a")], lambda u, w: w.write_bytes(".bin", b"good") or {})
    assert phase.verified_part("m", "a") is not None
    (tmp_path / "phase" / "m" / "a.bin").write_bytes(b"torn")
    assert phase.verified_part("m", "a") is None and phase.part("m", "a") is None
    phase.map("m", [_unit("a")], lambda u, w: w.write_bytes(".bin", b"good") or {})
    assert (tmp_path / "phase" / "m" / "a.bin").read_bytes() == b"good"


def test_without_sender_units_each_rank_sends_what_it_holds_once(tmp_path):
    phase = GlobalPhase(_ctx(tmp_path), {"stage": "toy"})
    calls, got = [], {}

    def send(unit):
        calls.append(unit)
        yield 1, b"held", b""

    def reduce(part_no, records, writer):
        got[part_no] = [k for k, _ in records]
        return {}

    phase.exchange("s", ["p0", "p1"], None, send, reduce)
    assert calls == [None] and got == {0: [], 1: [b"held"]}


def test_an_exchange_of_fixed_width_rows_gives_each_part_its_rows_sorted(tmp_path):
    import numpy as np

    row = np.dtype([("part", "<u4"), ("key", "<u8")])
    phase = GlobalPhase(_ctx(tmp_path), {"stage": "toy"})
    got = {}

    def send(unit):
        keys = np.arange(10, dtype=np.uint64)[::-1] + (100 if unit.name == "b" else 0)
        rows = np.empty(len(keys), dtype=row)
        rows["part"], rows["key"] = keys % 3, keys
        yield rows

    def reduce(part_no, batches, writer):
        got[part_no] = [int(k) for rows in batches for k in rows["key"]]
        return {"n": len(got[part_no])}

    phase.exchange_rows(
        "s",
        ["p0", "p1", "p2", "p3"],
        [_unit("a"), _unit("b")],
        send,
        reduce,
        dtype=row,
        order_fields=("key",),
    )
    assert sorted(got) == [0, 1, 2, 3] and got[3] == []
    assert got[1] == sorted(k for k in list(range(10)) + list(range(100, 110)) if k % 3 == 1)


def test_a_finished_step_is_read_from_its_step_index_and_only_in_the_run_that_wrote_it(tmp_path):
    """A rank that needs every part of a step (senders, the phase digest) reads the ranks' step indexes
    (one file per rank), not a marker per part; another run trusts only the markers."""
    units = [_unit(n) for n in ("a", "b", "c")]
    phase = GlobalPhase(_ctx(tmp_path), {"stage": "toy"})
    phase.map("m", units, lambda u, w: w.write_bytes(".bin", u.name.encode()) or {"u": u.name})
    step = tmp_path / "phase" / "m"
    assert sorted(p.name for p in step.glob("index.*.json")) == ["index.0.json"]
    for marker in step.glob("*.done.json"):
        marker.unlink()  # the markers are not read again in this run
    assert [p.facts["u"] for p in phase.parts("m", ["a", "b", "c"])] == ["a", "b", "c"]
    with pytest.raises(FileNotFoundError):
        GlobalPhase(_ctx(tmp_path), {"stage": "toy"}).parts("m", ["a", "b", "c"])
