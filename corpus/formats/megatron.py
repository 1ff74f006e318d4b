"""Megatron-LM's indexed dataset (``MMIDIDX``): a flat token array ``.bin`` and its index ``.idx``.

The layout is Megatron-LM's ``megatron/core/datasets/indexed_dataset.py``, so Megatron and NeMo read our
shards directly. The ``.idx`` file is :data:`HEADER` (magic, version, :class:`DType` code, sequence count
S, document count D = S + 1), then int32[S] sequence lengths (tokens), int64[S] byte offsets of the
sequences in the ``.bin`` and int64[D] document indices (0, 1, ..., S: one sequence per document), all
little-endian. The ``.bin`` is the sequences' tokens back to back in the declared dtype. Megatron has no
uint32 code, so a vocabulary above 65,535 ids is stored as int32 (ids stay far below 2**31).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np

from corpus.model.layout import fsync_dir

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
#: the ``.idx`` header, packed (34 bytes), little-endian
HEADER = np.dtype(
    [
        ("magic", "V9"),  # MAGIC
        ("version", "<u8"),  # VERSION
        ("dtype", "u1"),  # the tokens' DType code
        ("sequence_count", "<u8"),  # S: one sequence per document
        ("document_count", "<u8"),  # D = S + 1: document_indices has a leading 0
    ]
)


class DType(IntEnum):
    """Megatron's token dtype codes (``DType`` of ``indexed_dataset.py``), named by the numpy dtype."""

    uint8 = 1
    int8 = 2
    int16 = 3
    int32 = 4
    int64 = 5
    float64 = 6
    float32 = 7
    uint16 = 8

    @classmethod
    def of(cls, dtype: str | np.dtype) -> DType:
        return cls[np.dtype(dtype).name]

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.name)


# Block size of the per-block .bin digests. A reader verifies only the blocks it touches, so a block
# is the unit of read amplification (a small read hashes one whole block, once per process) and the
# manifest carries 64 hex characters per block: 4 MiB keeps both small (16 KiB of digests per GiB).
BLOCK_SIZE = 4 << 20


def token_dtype_for_vocab(vocab_size: int) -> str:
    """uint16 when every id fits in 65,535, else int32 (Megatron's widest integer token type)."""
    return "uint16" if vocab_size <= 65535 else "int32"


@dataclass(frozen=True)
class IndexedShardIndex:
    dtype: np.dtype
    lengths: np.ndarray  # int32[S]
    offsets: np.ndarray  # int64[S], bytes
    doc_indices: np.ndarray  # int64[S+1]

    @property
    def num_docs(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))

    def token_starts(self) -> np.ndarray:
        """Token offset of every document (int64[S+1], the last entry is the total)."""
        starts = np.zeros(self.num_docs + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=starts[1:])
        return starts


def index_bytes(lengths: np.ndarray, dtype: str) -> bytes:
    lengths = np.asarray(lengths, dtype=np.int32)
    itemsize = np.dtype(dtype).itemsize
    offsets = np.zeros(lengths.shape[0], dtype=np.int64)
    if lengths.shape[0] > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * itemsize, out=offsets[1:])
    doc_indices = np.arange(lengths.shape[0] + 1, dtype=np.int64)
    header = np.array(
        [(MAGIC, VERSION, DType.of(dtype), lengths.shape[0], doc_indices.shape[0])], dtype=HEADER
    )
    return header.tobytes() + lengths.tobytes() + offsets.tobytes() + doc_indices.tobytes()


def write_indexed_shard(prefix: Path, documents: list[np.ndarray], dtype: str) -> tuple[Path, Path]:
    """Write ``prefix.bin`` and ``prefix.idx`` atomically (temp names, then rename; .idx last)."""
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    bin_path, idx_path = prefix.with_suffix(".bin"), prefix.with_suffix(".idx")
    lengths = np.array([d.shape[0] for d in documents], dtype=np.int32)
    for path, payload in ((bin_path, None), (idx_path, index_bytes(lengths, dtype))):
        tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
        with open(tmp, "wb") as f:
            if payload is None:
                for d in documents:
                    f.write(np.ascontiguousarray(d, dtype=dtype).tobytes())
            else:
                f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    fsync_dir(prefix.parent)  # the two renames survive a crash
    return bin_path, idx_path


class BlockHasher:
    """sha256 of each ``block_size`` block of a stream, computed while it is written (so nothing is read
    back; memory: one block). :func:`block_digests` is the same rule over a finished file."""

    def __init__(self, block_size: int = BLOCK_SIZE) -> None:
        self.block_size = block_size
        self.block = hashlib.sha256()
        self.in_block = 0
        self.blocks: list[str] = []

    def update(self, data: bytes) -> None:
        view = memoryview(data)
        while view.nbytes:
            take = min(view.nbytes, self.block_size - self.in_block)
            self.block.update(view[:take])
            self.in_block += take
            view = view[take:]
            if self.in_block == self.block_size:
                self.blocks.append(self.block.hexdigest())
                self.block, self.in_block = hashlib.sha256(), 0

    def block_digests(self) -> list[str]:
        return self.blocks + ([self.block.hexdigest()] if self.in_block else [])


#: a block's digest in a ``.blocks`` file: the raw sha256
BLOCK_DIGEST_BYTES = 32


def block_file_bytes(digests: list[str]) -> bytes:
    """A shard's block digests as its ``.blocks`` file: the raw sha256 of block b at ``32 * b``. The
    snapshot manifest names the file by one digest instead of listing 256 digests per GiB of tokens, so
    a loader rank reads the digests of the shards it reads, not of every shard in the snapshot."""
    return b"".join(bytes.fromhex(d) for d in digests)


def read_block_file(path: Path, sha256: str) -> np.ndarray:
    """A ``.blocks`` file as (blocks, 32) bytes, after checking it against the manifest's ``sha256``
    (ValueError when it does not match)."""
    data = Path(path).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256.removeprefix("sha256:"):
        raise ValueError(f"{path}: block digests do not match the manifest's sha256")
    if len(data) % BLOCK_DIGEST_BYTES:
        raise ValueError(f"{path}: {len(data)} bytes is not a whole number of block digests")
    return np.frombuffer(data, dtype=np.uint8).reshape(-1, BLOCK_DIGEST_BYTES)


def block_digests(bin_path: Path, block_size: int = BLOCK_SIZE) -> list[str]:
    """Hex sha256 of each ``block_size``-byte block of a file, the last block possibly short.

    Streamed one block at a time, so memory stays at one block whatever the file size. An empty file
    has no blocks. The loader checks each block the first time it reads from it, so a rank hashes
    what it reads rather than every shard it touches.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    hasher = BlockHasher(block_size)
    with open(bin_path, "rb") as f:
        while block := f.read(block_size):
            hasher.update(block)
    return hasher.block_digests()


def read_index(idx_path: Path, mmap: bool = False) -> IndexedShardIndex:
    """The index of a shard; with ``mmap`` its arrays are views of a read-only mapping of the file.

    A mapped index costs address space, not memory: pages are read when touched and dropped with the
    mapping, so a reader holding many shards open keeps its footprint to what it reads. A file too
    short for the counts its header declares is refused (ValueError), never read past its end.
    """
    if mmap:
        size = Path(idx_path).stat().st_size
        buf = np.memmap(idx_path, dtype=np.uint8, mode="r") if size else np.zeros(0, dtype=np.uint8)
    else:
        buf = np.frombuffer(Path(idx_path).read_bytes(), dtype=np.uint8)
    if bytes(buf[: len(MAGIC)]) != MAGIC:
        raise ValueError(f"{idx_path}: not a Megatron indexed dataset index (bad magic)")
    if buf.shape[0] < HEADER.itemsize:
        raise ValueError(f"{idx_path}: truncated index header ({buf.shape[0]} bytes)")
    header = np.frombuffer(buf, dtype=HEADER, count=1)[0]
    version = int(header["version"])
    if version != VERSION:
        raise ValueError(f"{idx_path}: unsupported index version {version}")
    code, n_seq, n_doc = int(header["dtype"]), int(header["sequence_count"]), int(header["document_count"])
    if code not in DType._value2member_map_:
        raise ValueError(f"{idx_path}: unknown token dtype code {code}")
    need = HEADER.itemsize + 12 * n_seq + 8 * n_doc
    if buf.shape[0] < need:
        raise ValueError(f"{idx_path}: index holds {buf.shape[0]} bytes, its header needs {need}")
    off = HEADER.itemsize
    lengths = np.frombuffer(buf, dtype=np.int32, count=n_seq, offset=off)
    off += 4 * n_seq
    offsets = np.frombuffer(buf, dtype=np.int64, count=n_seq, offset=off)
    off += 8 * n_seq
    doc_indices = np.frombuffer(buf, dtype=np.int64, count=n_doc, offset=off)
    return IndexedShardIndex(DType(code).numpy, lengths, offsets, doc_indices)


class IndexedShard:
    """Read-only, memory-mapped view of one ``.bin``/``.idx`` pair."""

    def __init__(self, prefix: Path) -> None:
        prefix = Path(prefix)
        self.index = read_index(prefix.with_suffix(".idx"))
        bin_path = prefix.with_suffix(".bin")
        if bin_path.stat().st_size == 0:  # an empty shard: mmap refuses zero-length files
            self.tokens = np.zeros(0, dtype=self.index.dtype)
        else:
            self.tokens = np.memmap(bin_path, dtype=self.index.dtype, mode="r")
        if self.tokens.shape[0] != self.index.num_tokens:
            raise ValueError(
                f"{prefix}: .bin holds {self.tokens.shape[0]} tokens, .idx says {self.index.num_tokens}"
            )

    def __len__(self) -> int:
        return self.index.num_docs

    def document(self, i: int) -> np.ndarray:
        start = int(self.index.offsets[i]) // self.index.dtype.itemsize
        return self.tokens[start : start + int(self.index.lengths[i])]
