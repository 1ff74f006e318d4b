"""The records and indexes of the snapshot phases, without MPI: every codec round-trips, the streamed
numbers equal the whole-array ones, and the partitioned indexes answer like one sorted array."""

from __future__ import annotations

import io

import numpy as np
import pytest

from corpus.decont.doc_grams import DOC_GRAM_RECORD, DocGramIndex, SortedRowWriter, write_parts
from corpus.formats.doc_index import (
    DOC_INDEX_RECORD,
    PartitionedDocIndex,
    decode_doc_index,
    encode_doc_index,
    part_of_doc_id,
    parts_of_doc_ids,
)
from corpus.formats.megatron import BlockHasher, block_digests
from corpus.formats.partitions import map_records, part_of_hashes, prefix_bits
from corpus.text.tokenizer import PinnedTokenizer
from hpc_jobs.write_shards.census import CENSUS_RECORD
from hpc_jobs.write_shards.doc_index import DOC_INDEX_ROW
from hpc_jobs.write_shards.shard_writer import SHARD_ROW, _in_shard_order, stage_part
from hpc_jobs.write_shards.validation import ShardStatsAccumulator, shard_stats
from mpi_kernels.row_order import sort_rows
from tests.snapshot.conftest import OLMO, perl_docs

DOC_IDS = sorted(d.doc_id for d in perl_docs(n=40))


def test_the_phase_rows_round_trip_and_sort_by_part_key_as_a_number_then_doc_id():
    rows = np.zeros(5, dtype=SHARD_ROW)
    rows["part"] = [1, 0, 0, 0, 0]
    rows["key"] = [0, 256, 255, 255, 2**64 - 1]
    rows["doc_id"] = [DOC_IDS[0], DOC_IDS[0], DOC_IDS[2], DOC_IDS[1], DOC_IDS[0]]
    rows["tokens_at"] = [2**40, 0, 1, 2, 3]
    rows["lineage_bytes"] = 2**32 - 1
    assert np.array_equal(np.frombuffer(rows.tobytes(), dtype=SHARD_ROW), rows)
    order = sort_rows(rows, ("part", "key", "doc_id"))  # what exchange_rows gives each part's owner
    assert order["key"].tolist() == [255, 255, 256, 2**64 - 1, 0]
    assert order["doc_id"][:2].tolist() == [DOC_IDS[1].encode(), DOC_IDS[2].encode()]
    index = np.zeros(3, dtype=DOC_INDEX_ROW)
    index["doc_id"] = [DOC_IDS[1], DOC_IDS[0], DOC_IDS[0]]
    index["shard"], index["doc"] = [0, 2, 1], [0, 0, 2**31]
    assert np.array_equal(np.frombuffer(index.tobytes(), dtype=DOC_INDEX_ROW), index)
    assert sort_rows(index, ("part", "doc_id"))[["shard", "doc"]].tolist() == [(1, 2**31), (2, 0), (0, 0)]
    assert CENSUS_RECORD.names == ("key", "tokens", "bucket")


class _Spool:
    """Lineage lines by (input shard, offset), as DocumentReader would read them from the spools."""

    def __init__(self, lines: dict[tuple[int, int], bytes]) -> None:
        self.lines = lines

    def lineage(self, shard: int, at: int, nbytes: int) -> bytes:
        assert len(self.lines[(shard, at)]) == nbytes
        return self.lines[(shard, at)]


def test_documents_sharing_a_doc_id_keep_the_order_of_their_lineage_records():
    """The order the bytes-path shuffle gave them (payload: record length as 4 little-endian bytes,
    then the record), so that the shards' bytes are those of the version before rows."""
    long = b'"' + b"x" * 254 + b'"\n'  # 256 bytes: 00 01 00 00 as little-endian bytes, before 2
    lines = {
        (0, 0): b'{"url":"b"}\n',
        (1, 0): b'{"url":"a"}\n',
        (2, 0): b'{"url":"zz"}\n',
        (3, 0): b"{}\n",
        (4, 0): long,
    }
    rows = np.zeros(6, dtype=SHARD_ROW)
    rows["key"] = [5, 5, 5, 5, 5, 6]
    rows["doc_id"] = [DOC_IDS[0]] * 5 + [DOC_IDS[1]]
    rows["shard"] = [0, 1, 2, 3, 4, 0]
    rows["lineage_bytes"] = [len(lines[(s, 0)]) for s in rows["shard"].tolist()]
    got = [(d, line) for d, _, _, _, line in _in_shard_order(iter([rows[:2], rows[2:]]), _Spool(lines))]
    assert got == [
        (DOC_IDS[0].encode(), long),
        (DOC_IDS[0].encode(), b"{}\n"),
        (DOC_IDS[0].encode(), b'{"url":"a"}\n'),
        (DOC_IDS[0].encode(), b'{"url":"b"}\n'),
        (DOC_IDS[0].encode(), b'{"url":"zz"}\n'),
        (DOC_IDS[1].encode(), b'{"url":"b"}\n'),
    ]


def test_the_index_records_round_trip(tmp_path):
    rows = np.zeros(3, dtype=DOC_GRAM_RECORD)
    rows["gram"], rows["doc"] = [3, 2**63, 2**64 - 1], [2**64 - 1, 0, 7]
    (tmp_path / "g.dgr").write_bytes(rows.tobytes())
    assert np.array_equal(map_records(tmp_path / "g.dgr", DOC_GRAM_RECORD), rows)
    assert DOC_GRAM_RECORD.itemsize == 16 and rows.tobytes()[:8] == (3).to_bytes(8, "little")
    (tmp_path / "bad.dgr").write_bytes(rows.tobytes()[:-1])
    with pytest.raises(ValueError, match="whole number of 16-byte records"):
        map_records(tmp_path / "bad.dgr", DOC_GRAM_RECORD)
    ids = [d.encode() for d in DOC_IDS[:3]]
    rec = decode_doc_index(encode_doc_index(ids, [0, 5, 2**32 - 1], [9, 0, 1]))
    assert rec.dtype == DOC_INDEX_RECORD and rec.dtype.itemsize == 40
    assert rec["doc_id"].tolist() == ids and rec["shard"].tolist() == [0, 5, 2**32 - 1]
    with pytest.raises(ValueError, match="whole 40-byte records"):
        decode_doc_index(b"x" * 41)


def test_the_number_of_parts_follows_from_the_data_only():
    assert prefix_bits(0, 100) == prefix_bits(100, 100) == 0
    assert prefix_bits(101, 100) == 1 and prefix_bits(800, 100) == 3 and prefix_bits(801, 100) == 4
    h = np.array([0, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)
    assert part_of_hashes(h, 1).tolist() == [0, 0, 1, 1] and part_of_hashes(h, 0).tolist() == [0, 0, 0, 0]
    assert part_of_doc_id("8" + "0" * 31, 1) == 1 and part_of_doc_id("7f" + "f" * 30, 1) == 0
    ids = np.array([d.encode() for d in [*DOC_IDS, "f" * 32, "0" * 32]], dtype="S32")
    for bits in (0, 1, 7, 20, 32):
        assert parts_of_doc_ids(ids, bits).tolist() == [
            part_of_doc_id(d.decode(), bits) for d in ids.tolist()
        ]
    with pytest.raises(ValueError, match="hex digits"):
        parts_of_doc_ids(np.array([b"g" * 32]), 1)


def test_a_part_is_written_once_per_record_in_ascending_order():
    buf = io.BytesIO()
    w = SortedRowWriter(buf)
    for gram, doc in (([1, 1], [5, 5]), ([1, 1, 4, 9], [5, 6, 0, 2]), ([9], [2]), ([9, 12], [3, 1])):
        w.add_sorted(np.array(gram, dtype=np.uint64), np.array(doc, dtype=np.uint64))  # repeats straddle ends
    got = np.frombuffer(buf.getvalue(), dtype=DOC_GRAM_RECORD)
    assert got.tolist() == [(1, 5), (1, 6), (4, 0), (9, 2), (9, 3), (12, 1)] and w.count == 6
    with pytest.raises(ValueError, match="ascending"):
        w.add_sorted(np.array([12], dtype=np.uint64), np.array([0], dtype=np.uint64))
    with pytest.raises(ValueError, match="ascending"):
        w.add_sorted(np.array([20, 15], dtype=np.uint64), np.array([0, 0], dtype=np.uint64))


def test_the_partitioned_doc_gram_index_answers_like_one_table(tmp_path):
    """Random (8-gram, document) records in 8 parts: each hash's range holds exactly the documents that
    hold it, and a document holds an 8-gram exactly when the record is there."""
    rng = np.random.default_rng(0)
    grams = rng.integers(0, 2**64 - 1, size=600, dtype=np.uint64)
    rows = np.zeros(4000, dtype=DOC_GRAM_RECORD)
    rows["gram"] = grams[rng.integers(0, grams.shape[0], size=rows.shape[0])]
    rows["doc"] = rng.integers(0, 40, size=rows.shape[0])
    rows = np.concatenate([rows, rows[:100]])  # repeats are written once
    index = DocGramIndex(write_parts(rows, tmp_path, bits=3), bits=3)
    table = {(int(g), int(d)) for g, d in rows.tolist()}
    assert len(index) == len(table)
    queries = np.concatenate([grams[::3], rng.integers(0, 2**64 - 1, size=50, dtype=np.uint64)])
    parts, left, right = index.ranges(queries)
    which, docs = index.docs(parts, left, right)
    got = {(int(queries[w]), int(d)) for w, d in zip(which.tolist(), docs.tolist(), strict=True)}
    assert got == {(g, d) for g, d in table if g in set(queries.tolist())}
    probe = rng.integers(0, 40, size=queries.shape[0]).astype(np.uint64)
    held = index.holds(parts, left, right, probe)
    assert held.tolist() == [(int(g), int(d)) in table for g, d in zip(queries, probe, strict=True)]
    assert 0 < held.sum() < held.shape[0]
    with pytest.raises(ValueError, match="has 8 parts"):
        DocGramIndex([tmp_path / "g00000.dgr"], bits=3)


def test_the_partitioned_doc_index_finds_every_document_and_nothing_else(tmp_path):
    bits = 2
    rows = {d: (i % 3, i) for i, d in enumerate(DOC_IDS)}
    paths = []
    for p in range(1 << bits):
        mine = [d for d in DOC_IDS if part_of_doc_id(d, bits) == p]
        paths.append(tmp_path / f"d{p:05d}.docidx")
        paths[-1].write_bytes(
            encode_doc_index(
                [d.encode() for d in mine], [rows[d][0] for d in mine], [rows[d][1] for d in mine]
            )
        )
    index = PartitionedDocIndex(paths, bits)
    assert all(index.locate(d) == rows[d] for d in DOC_IDS) and len(index) == len(DOC_IDS)
    assert index.locate("0" * 32) is None and index.locate("not-a-doc-id") is None


def test_streamed_shard_numbers_equal_the_whole_shards():
    tok = PinnedTokenizer(OLMO)
    docs = tok.encode_batch([d.text for d in perl_docs(n=12)])
    runs = [
        np.array([7] * 5, dtype=np.uint16),
        np.array([7, 7, 8], dtype=np.uint16),
        np.array([], dtype=np.uint16),
    ]
    for shard in (docs, runs + docs + runs, [np.array([3, 3], np.uint16), np.array([4, 4], np.uint16)]):
        acc = ShardStatsAccumulator(tok.eos_id)
        for d in shard:
            acc.add(d)
        assert acc.result() == shard_stats(np.concatenate(shard), tok.eos_id)
    assert ShardStatsAccumulator(tok.eos_id).result() == shard_stats(np.zeros(0, np.uint16), tok.eos_id)


def test_block_digests_computed_while_writing_are_the_files(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, size=10_000, dtype=np.uint8).tobytes()
    for block in (1000, 999, 4096, 20_000):
        h = BlockHasher(block)
        for chunk in (data[:1], data[1:2500], data[2500:2500], data[2500:]):
            h.update(chunk)
        (tmp_path / "f.bin").write_bytes(data)
        assert h.block_digests() == block_digests(tmp_path / "f.bin", block)


class _Inputs:
    """Input shards' tokens and lineage lines by location; records the order they are read in."""

    def __init__(self, tokens: list[bytes], lines: list[bytes]) -> None:
        self.data, self.reads = (tokens, lines), []

    def tokens(self, shard: int, at: int, nbytes: int) -> bytes:
        self.reads.append(("tokens", shard, at))
        return self.data[0][shard][at : at + nbytes]

    def lineage(self, shard: int, at: int, nbytes: int) -> bytes:
        self.reads.append(("lineage", shard, at))
        return self.data[1][shard][at : at + nbytes]


def test_a_part_is_staged_reading_each_input_front_to_back_and_streams_the_same_documents(tmp_path):
    """A token shard's documents come from every input shard in shuffled order: staging reads them in
    (input shard, offset) order, and the part streamed from the copy holds the same bytes in row order."""
    rnd = np.random.default_rng(3)
    docs = [(s, i) for s in range(3) for i in range(5)]  # document i of input shard s
    token_of = {d: bytes(rnd.integers(0, 256, 4 * (1 + d[1] % 3), dtype=np.uint8)) for d in docs}
    line_of = {d: f'{{"doc": "{d[0]}-{d[1]}"}}\n'.encode() for d in docs}
    tokens = [b"".join(token_of[(s, i)] for i in range(5)) for s in range(3)]
    lines = [b"".join(line_of[(s, i)] for i in range(5)) for s in range(3)]
    arrival = [docs[k] for k in rnd.permutation(len(docs))]
    rows = np.zeros(len(arrival), dtype=SHARD_ROW)
    rows["key"] = np.arange(len(arrival))
    rows["doc_id"] = [f"{s}-{i}".ljust(16, "x").encode() for s, i in arrival]
    rows["shard"] = [s for s, _ in arrival]
    rows["tokens"] = [len(token_of[d]) // 2 for d in arrival]  # 2-byte tokens
    rows["tokens_at"] = [sum(len(token_of[(s, j)]) for j in range(i)) for s, i in arrival]
    rows["lineage_bytes"] = [len(line_of[d]) for d in arrival]
    rows["lineage_at"] = [sum(len(line_of[(s, j)]) for j in range(i)) for s, i in arrival]
    inputs = _Inputs(tokens, lines)
    staged_rows, staged = stage_part(iter([rows[:7], rows[7:]]), inputs, 2, tmp_path, "part-0")
    try:
        read = [(shard, at) for kind, shard, at in inputs.reads if kind == "tokens"]
        assert read == sorted(read), "each input shard is read once, front to back"
        streamed = [
            (staged.tokens(shard, at, n * 2), line)
            for _, shard, at, n, line in _in_shard_order(iter([staged_rows]), staged)
        ]
    finally:
        staged.close()
    assert streamed == [(token_of[d], line_of[d]) for d in arrival]
