"""The persistent dedup index (corpus/formats/dedup_*.py, corpus/formats/bloom.py): the record
codec, key-range partitions, deterministic generation bytes, keep-first across generations and through
compaction, Bloom filters that never change an answer, refusal of a mismatching base, and a real
``kill -9`` at every point of an update or a compaction, then a rerun: the same bytes as without it."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus.formats import dedup_files, dedup_keys, dedup_probe
from corpus.formats import dedup_index as pi
from corpus.formats.bloom import BloomFilter, BloomSpec, expected_fp_rate, mix64

ROOT = Path(__file__).resolve().parents[2]
P = 4
N = 3000  # records per build
RUN = 1000  # records a writer buffers: every build spills 3 runs

# the builds' records, shared with the child process of the kill tests
DATA = """
import numpy as np
from corpus.formats import dedup_files, dedup_keys
from corpus.formats import dedup_index as pi

def build(seed, n=3000, shared=0):
    # n exact records of build `seed`; its first `shared` keys are also keys of build 1 (other values)
    r = np.random.default_rng(seed)
    keys = r.integers(0, 256, (n, 16), dtype=np.uint8)
    if shared:
        keys[:shared] = np.random.default_rng(1).integers(0, 256, (n, 16), dtype=np.uint8)[:shared]
    return dedup_keys.records("exact", keys, r.integers(0, 256, (n, 16), dtype=np.uint8))

def batches(rows, size=700):
    return [rows[i : i + size] for i in range(0, len(rows), size)]
"""
_ns: dict = {}
exec(DATA, _ns)
build, batches = _ns["build"], _ns["batches"]

CHILD = (
    DATA
    + """
import sys, time
root, op, point = sys.argv[1:4]
name, _, nth = point.partition(":")
seen = 0

def hook(at):
    global seen
    if at == name:
        seen += 1
        if seen == int(nth or 1):
            print("AT", point, flush=True)
            time.sleep(300)

dedup_files._HOOK = hook
idx = pi.PersistentIndex.open(root)
if op == "add":
    idx.add_generation("b2", batches(build(2, shared=400)), run_records=1000)
else:
    idx.compact(merge_records=1024)
print("DONE", flush=True)
"""
)


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def new_index(path: Path, partitions: int = P, **kw) -> pi.PersistentIndex:
    return pi.PersistentIndex.create(path, "exact", dedup_keys.exact_key_params(), partitions, **kw)


def rand_keys(seed: int, n: int, width: int = 16) -> np.ndarray:
    return dedup_keys.as_void(np.random.default_rng(seed).integers(0, 256, (n, width), dtype=np.uint8), width)


@pytest.fixture(scope="module")
def states(tmp_path_factory) -> dict[str, Path]:
    """Reference states, uninterrupted: base (build 1), added (+ build 2), compacted."""
    d = tmp_path_factory.mktemp("ref")
    idx = new_index(d / "base").add_generation("b1", batches(build(1)), run_records=RUN)
    shutil.copytree(d / "base", d / "added")
    added = pi.PersistentIndex.open(d / "added").add_generation(
        "b2", batches(build(2, shared=400)), run_records=RUN
    )
    shutil.copytree(d / "added", d / "compacted")
    pi.PersistentIndex.open(d / "compacted").compact(merge_records=1024)
    assert [g.id for g in idx.generations] == ["g000001"] and len(added.generations) == 2
    return {s: d / s for s in ("base", "added", "compacted")}


def test_record_codec_round_trips():
    from mpi_kernels.minhash import BAND_KEY_BYTES

    assert dedup_keys.EXACT_RECORD.names == dedup_keys.BAND_RECORD.names == ("key", "value")
    assert (dedup_keys.EXACT_RECORD.itemsize, dedup_keys.BAND_RECORD.itemsize) == (32, 34)
    assert dedup_keys.BAND_RECORD["key"].itemsize == BAND_KEY_BYTES  # the stage's band keys, as they are
    doc_ids = [hashlib.md5(str(i).encode()).hexdigest() for i in range(5)]
    keys = [hashlib.blake2b(str(i).encode(), digest_size=16).digest() for i in range(5)]
    rows = dedup_keys.records("exact", keys, doc_ids)
    back = np.frombuffer(rows.tobytes(), dtype=dedup_keys.EXACT_RECORD)
    assert [bytes(k) for k in back["key"]] == keys and dedup_keys.doc_ids(back["value"]) == doc_ids
    assert rows.tobytes()[:32] == keys[0] + bytes.fromhex(doc_ids[0])  # packed: key then value
    band = np.random.default_rng(0).integers(0, 256, (5, 18), dtype=np.uint8)
    brows = dedup_keys.records("band", band, doc_ids)
    assert np.frombuffer(brows.tobytes(), dedup_keys.BAND_RECORD).tobytes() == brows.tobytes()
    assert bytes(brows["key"][3]) == band[3].tobytes()
    with pytest.raises(ValueError, match="32 hex"):
        dedup_keys.records("exact", keys[:1], ["not-a-doc-id"])


def test_partitions_are_contiguous_key_ranges():
    keys = np.sort(rand_keys(3, 2000))
    raw = np.frombuffer(keys.tobytes(), np.uint8).reshape(-1, 16)
    order = np.argsort(raw[:, :8].copy().view(">u8").reshape(-1), kind="stable")
    parts = dedup_keys.partition_of("exact", keys[order], 7)
    assert (np.diff(parts) >= 0).all() and set(parts) == set(range(7))  # monotone: ranges of the key
    edge = dedup_keys.as_void([b"\0" * 16, b"\xff" * 16], 16)
    assert list(dedup_keys.partition_of("exact", edge, 7)) == [0, 6]
    # band keys: by the hash bytes [2, 10), never by the band number
    band = np.zeros((2, 18), np.uint8)
    band[0, :2], band[1, 2] = 255, 255
    assert list(dedup_keys.partition_of("band", band, 4)) == [0, 3]
    owned = [dedup_keys.owned_partitions(r, 3, 10) for r in range(3)]
    assert [x for o in owned for x in o] == list(range(10))


def test_bloom_filter_sizing_no_false_negatives_and_file():
    spec = BloomSpec.from_fp_rate(0.01)
    assert (spec.millibits_per_key, spec.hashes) == (9586, 7)
    h = mix64(np.arange(40_000, dtype=np.uint64))
    f = BloomFilter.for_keys(20_000, spec)
    f.add(h[:20_000])
    assert f.might_contain(h[:20_000]).all()
    fp = f.might_contain(h[20_000:]).mean()
    assert 0.005 < fp < 0.016 and abs(expected_fp_rate(20_000, f.bits, 7) - 0.01) < 0.001
    g = BloomFilter.from_bytes(f.to_bytes())
    assert g.to_bytes() == f.to_bytes() and g.keys == 20_000


def test_same_records_same_bytes_whatever_the_order_runs_and_writers(tmp_path):
    rows = build(5)
    rows = np.concatenate([rows, rows[:50]])  # a key twice: the smallest value is kept
    rows["value"][-50:] = dedup_keys.as_void(np.zeros((50, 16), np.uint8), 16)
    one = new_index(tmp_path / "one").add_generation("b", [rows], run_records=10_000)  # in memory
    shuffled = rows[np.random.default_rng(1).permutation(len(rows))]
    two = new_index(tmp_path / "two").add_generation("b", batches(shuffled, 333), run_records=500)
    # two writers, as two ranks would: each owns a range of partitions
    three = new_index(tmp_path / "three")
    pending = three.begin("b")
    for rank in range(2):
        mine = three.owned(rank, 2)
        in_mine = np.isin(three.partition_of(shuffled["key"]), list(mine))
        with pending.writer(mine, run_records=400) as w:
            for b in batches(shuffled[in_mine], 250):
                w.add(b)
    three = pending.commit()
    assert tree(tmp_path / "one") == tree(tmp_path / "two") == tree(tmp_path / "three")
    assert one.records == two.records == three.records == N and not list(
        (tmp_path / "two" / "generations" / "g000001").glob("runs")
    )
    r = one.probe(rows["key"][:50])
    assert r.found.all() and (r.values == rows["value"][-50:]).all()


def test_keep_first_and_compaction_keep_every_answer(states, tmp_path):
    base, added = pi.PersistentIndex.open(states["base"]), pi.PersistentIndex.open(states["added"])
    b1, b2 = build(1), build(2, shared=400)
    q = np.concatenate([b1["key"][:300], b2["key"][:600], rand_keys(9, 2000)])
    r = added.probe(q)
    assert r.found[:900].all() and not r.found[900:].any()
    # the 400 keys both builds hold keep build 1's values; build 2's own keys have build 2's
    assert (r.values[:300] == b1["value"][:300]).all() and (r.values[300:700] == b1["value"][:400]).all()
    assert (r.values[700:900] == b2["value"][400:600]).all()
    assert list(r.generation[:900]) == [0] * 700 + [1] * 200
    compacted = pi.PersistentIndex.open(states["compacted"])
    c = compacted.probe(q)
    assert (c.found == r.found).all() and (c.values == r.values).all()
    assert [g.id for g in compacted.generations] == ["g000003"] and compacted.labels == ["b1", "b2"]
    assert compacted.records == 2 * N - 400 and sorted(os.listdir(states["compacted"] / "generations")) == [
        "g000003"
    ]
    # a rerun of an added build, or of a compaction of one generation, changes nothing
    shutil.copytree(states["added"], tmp_path / "again")
    again = pi.PersistentIndex.open(tmp_path / "again").add_generation("b2", [build(7)])
    assert len(again.generations) == 2 and tree(tmp_path / "again") == tree(states["added"])
    assert compacted.compact() is compacted and base.probe(q[300:700]).found.all()


def test_line_counts_are_summed_over_a_generations_inputs_over_generations_and_through_compaction(
    tmp_path,
):
    """The lines kind answers a key with the number of documents of every build that held it: the counts
    of one build's parts (the same key from two parts, across the writer's runs) add up in its
    generation, a probe adds every generation's, compaction keeps every sum, and a key no build held is
    not found. The other kinds still answer with the oldest value (tested above)."""

    def rows(keys, counts):
        return dedup_keys.records(
            "lines",
            np.ascontiguousarray(np.asarray(keys, np.uint64).astype(">u8")).view("V8"),
            dedup_keys.count_values(np.asarray(counts)),
        )

    keys = np.unique(np.random.default_rng(5).integers(0, 2**64 - 1, 2500, dtype=np.uint64))
    march = np.concatenate([rows(keys, np.full(len(keys), 2)), rows(keys[::2], np.full(len(keys[::2]), 3))])
    params = dedup_keys.line_key_params()
    idx = pi.PersistentIndex.create(tmp_path / "lines", "lines", params, P)
    idx = idx.add_generation("march", [march[1::2], march[::2]], run_records=RUN)
    june = keys[: len(keys) // 3]
    idx = idx.add_generation("june", [rows(june, np.full(len(june), 10))], run_records=RUN)
    expected = np.full(len(keys), 2, np.uint64)
    expected[::2] += 3
    expected[: len(june)] += 10
    asked = np.ascontiguousarray(np.concatenate([keys, [keys.max() + 1]]).astype(">u8")).view("V8")
    found = idx.probe(asked)
    assert found.found[:-1].all() and not found.found[-1]
    assert np.array_equal(dedup_keys.counts_of(found.values)[:-1], expected)
    assert set(found.generation[:-1].tolist()) == {0}, "the oldest generation holding the key"
    assert sum(g.records for g in idx.generations) == len(keys) + len(june), "a key once per generation"
    compacted = idx.compact(merge_records=700)
    assert len(compacted.generations) == 1 and compacted.records == len(keys)
    again = compacted.probe(asked)
    assert np.array_equal(dedup_keys.counts_of(again.values)[:-1], expected) and not again.found[-1]


def test_a_fork_shares_the_base_generations_and_never_changes_the_base(states, tmp_path):
    base_tree = tree(states["base"])
    fork = pi.PersistentIndex.open(states["base"]).fork(tmp_path / "next")
    rec = "generations/g000001/part-00000.rec"
    assert os.stat(states["base"] / rec).st_ino == os.stat(tmp_path / "next" / rec).st_ino  # hard links
    fork = fork.add_generation("b2", batches(build(2, shared=400)), run_records=RUN)
    assert tree(tmp_path / "next") == tree(states["added"]) and tree(states["base"]) == base_tree
    fork.compact()
    assert (
        tree(states["base"]) == base_tree
        and pi.PersistentIndex.open(states["base"]).probe(build(1)["key"]).found.all()
    )


def test_a_false_positive_never_changes_an_answer(states, tmp_path):
    tiny = new_index(tmp_path / "tiny", bloom_spec=BloomSpec(millibits_per_key=400, hashes=1))
    tiny = tiny.add_generation("b1", [build(1)]).add_generation("b2", [build(2, shared=400)])
    q = np.concatenate([build(2)["key"][:500], rand_keys(11, 3000)])
    stats = dedup_probe.ProbeStats()
    with_bloom, without = tiny.probe(q, stats=stats), tiny.probe(q, use_bloom=False)
    assert stats.false_positives > 500  # a filter this small says "maybe" to most absent keys
    assert (with_bloom.found == without.found).all() and (with_bloom.values == without.values).all()
    assert (with_bloom.generation == without.generation).all()
    normal = pi.PersistentIndex.open(states["added"])
    s = dedup_probe.ProbeStats()
    r = normal.probe(q, stats=s)
    assert s.fp_rate < 0.03 and s.bloom_rejected > 0.95 * 2 * 3000
    assert (r.found == with_bloom.found).all() and (r.values == with_bloom.values).all()


def test_a_mismatching_or_damaged_base_is_refused(states, tmp_path):
    band = dedup_keys.band_key_params(num_perm=112, bands=14, rows=8, seed=0, ngram=5, char_ngram=5)
    pi.PersistentIndex.create(tmp_path / "band", "band", band, 2)
    with pytest.raises(pi.IndexMismatch, match="num_perm=112, this build uses num_perm=128"):
        pi.PersistentIndex.open(tmp_path / "band", "band", {**band, "num_perm": 128})
    with pytest.raises(pi.IndexMismatch, match="key_version='2'"):
        pi.PersistentIndex.open(
            states["base"], "exact", {**dedup_keys.exact_key_params(), "key_version": "3"}
        )
    with pytest.raises(pi.IndexMismatch, match="'exact' keys"):
        pi.PersistentIndex.open(states["base"], "band", band)
    shutil.copytree(states["base"], tmp_path / "bad")
    bloom = tmp_path / "bad" / "generations" / "g000001" / "part-00001.bloom"
    data = bytearray(bloom.read_bytes())
    data[40] ^= 1
    bloom.write_bytes(bytes(data))
    idx = pi.PersistentIndex.open(tmp_path / "bad")
    with pytest.raises(dedup_files.IndexDamaged, match="part-00001.bloom"):
        idx.probe(build(1)["key"])
    with pytest.raises(dedup_files.IndexDamaged):
        idx.verify()


def _kill_at(root: Path, op: str, point: str) -> None:
    """Runs the update ``op`` in a child process, kill -9 it when it reaches ``point``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), op, point],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line == f"AT {point}", f"child never reached {point}: {line!r} {proc.stderr.read()[-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    "op, point",
    [
        ("add", "run-spilled:2"),
        ("add", "partition-written:3"),
        ("add", "generation-staged"),
        ("add", "generation-renamed"),
        ("add", "pointer-written"),
        ("add", "switched"),
        ("compact", "partition-written:2"),
        ("compact", "pointer-written"),
    ],
)
def test_kill_9_during_an_update_then_rerun_gives_the_uninterrupted_bytes(states, tmp_path, op, point):
    before, after = ("base", "added") if op == "add" else ("added", "compacted")
    root = tmp_path / "index"
    shutil.copytree(states[before], root)
    q = np.concatenate([build(1)["key"][:200], build(2)["key"][:1000]])
    expected_before = pi.PersistentIndex.open(states[before]).probe(q)
    _kill_at(root, op, point)
    idx = pi.PersistentIndex.open(root)  # the pointer is valid: the old generations, or the new ones
    in_force = after if point == "switched" else before
    assert [g.id for g in idx.generations] == [
        g.id for g in pi.PersistentIndex.open(states[in_force]).generations
    ]
    if in_force == before:
        r = idx.probe(q)
        assert (r.found == expected_before.found).all() and (r.values == expected_before.values).all()
    if op == "add":
        idx.add_generation("b2", batches(build(2, shared=400)), run_records=RUN)
    else:
        idx.compact(merge_records=1024)
    assert tree(root) == tree(states[after])
