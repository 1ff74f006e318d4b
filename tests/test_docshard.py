"""Document shards: deterministic bytes, atomic completion, corruption detected on read."""

import pytest

from corpus.formats.docshard import (
    ShardCorrupt,
    ShardWriter,
    is_complete,
    iter_docs,
    read_sidecar,
    write_shard,
)
from corpus.model import Document


def docs(n):
    return [
        Document.create(
            text=f"document number {i} " * 50,
            source="s",
            source_tier="web",
            url=f"u{i}",
            crawl_date="2026-01-01",
            raw_digest="x",
        )
        for i in range(n)
    ]


def test_same_records_give_the_same_bytes(tmp_path):
    lines = [d.to_json_bytes() for d in docs(3000)]
    a = write_shard(tmp_path / "a.jsonl.zst", lines)
    b = write_shard(tmp_path / "b.jsonl.zst", iter(lines))
    assert a["sha256"] == b["sha256"] and a["records"] == 3000
    assert (tmp_path / "a.jsonl.zst").read_bytes() == (tmp_path / "b.jsonl.zst").read_bytes()


def test_round_trip(tmp_path):
    original = docs(50)
    write_shard(tmp_path / "s.jsonl.zst", [d.to_json_bytes() for d in original], {"input_sha256": "abc"})
    assert list(iter_docs(tmp_path / "s.jsonl.zst")) == original
    assert is_complete(tmp_path / "s.jsonl.zst", input_sha256="abc")
    assert not is_complete(tmp_path / "s.jsonl.zst", input_sha256="other")


def test_an_aborted_writer_leaves_nothing_behind(tmp_path):
    path = tmp_path / "s.jsonl.zst"
    with pytest.raises(RuntimeError):
        with ShardWriter(path) as w:
            w.write_doc(docs(1)[0])
            raise RuntimeError("killed mid-shard")
    assert list(tmp_path.iterdir()) == []
    assert read_sidecar(path) is None


def test_a_flipped_byte_is_detected(tmp_path):
    path = tmp_path / "s.jsonl.zst"
    write_shard(path, [d.to_json_bytes() for d in docs(200)])
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(ShardCorrupt):
        list(iter_docs(path))


def test_a_shard_without_sidecar_is_incomplete(tmp_path):
    path = tmp_path / "s.jsonl.zst"
    write_shard(path, [b"{}"])
    (tmp_path / "s.jsonl.zst.json").unlink()
    with pytest.raises(ShardCorrupt, match="never completed"):
        list(iter_docs(path))
