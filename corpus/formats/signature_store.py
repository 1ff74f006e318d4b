"""The MinHash signature store a build keeps beside its band index, so that a later build can verify a
document that shares a band key with a base cluster at the same threshold as an in-build pair.

One HDF5 file per store part (``signature_store/PART.h5``, h5py): every text document of the build
with its cluster id (``dup_cluster_id``, a base cluster's included; its own doc_id outside a cluster)
and its signature cut to 32 bits a value (a chance agreement of two different values is 2^-32, against
the estimate's standard error of ~0.045 at K=112), sorted by (cluster, doc_id); a cluster's members lie
in the part of its id (:func:`store_part`). A reader finds a cluster through a fence (the first
cluster id of every block of :data:`BLOCK_ROWS` rows) and reads only the blocks that hold it.
docs/incremental.md "Verified against the base".
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import h5py
import numpy as np

from corpus.dedup.candidates import part_of_hash
from corpus.formats.docshard import atomic_write_json, sidecar_path

#: bump when the layout or the meaning of a value changes (a reader refuses another scheme)
STORE_SCHEME = "signature-store/1"
#: the artifact directory (a stage's side output) and a part file's suffix
SIGNATURE_STORE, STORE_SUFFIX = "signature_store", ".h5"
#: rows of one HDF5 chunk, and of one fence entry
BLOCK_ROWS = 256
ID = np.dtype("V16")


def store_part(clusters: np.ndarray, parts: int) -> np.ndarray:
    """The store part of each cluster id ((n, 16) uint8 rows or V16): a hash of the id, never of
    the rank count."""
    raw = np.ascontiguousarray(clusters).view(np.uint8).reshape(-1, ID.itemsize)
    return part_of_hash(raw, parts)


def truncated(signatures: np.ndarray) -> np.ndarray:
    """Signatures as the store keeps them: the low 32 bits of each value."""
    return (np.asarray(signatures) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def write_part(path: Path, part: int, parts: int, num_perm: int, batches: Iterable[np.ndarray]) -> int:
    """Write one part from ``batches`` of rows (``cluster``, ``doc`` V16, ``sig`` (K,) uint32), each
    batch sorted and every batch after the one before it; returns the rows written. The file appears
    under its name only when complete (written under a temporary name, fsynced, renamed), then its
    sidecar (sha256, records). The bytes are a function of the rows alone: no time stamps
    (``track_times=False``)."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    n = 0
    with h5py.File(tmp, "w", libver="v110", track_order=False) as f:
        f.attrs["scheme"], f.attrs["part"], f.attrs["parts"] = STORE_SCHEME, part, parts

        def dataset(name: str, shape: tuple[int, ...], dtype: str, compression: str | None) -> h5py.Dataset:
            return f.create_dataset(
                name,
                (0, *shape),
                dtype=dtype,
                maxshape=(None, *shape),
                chunks=(BLOCK_ROWS, *shape),
                compression=compression,
                track_times=False,
            )

        # cluster ids repeat along a cluster (lzf finds that); doc ids and hash values are random bytes
        cluster = dataset("cluster", (16,), "u1", "lzf")
        doc = dataset("doc", (16,), "u1", None)
        sig = dataset("sig", (num_perm,), "u4", None)
        for rows in batches:
            m = len(rows)
            for ds, values in (
                (cluster, np.ascontiguousarray(rows["cluster"]).view(np.uint8).reshape(m, 16)),
                (doc, np.ascontiguousarray(rows["doc"]).view(np.uint8).reshape(m, 16)),
                (sig, rows["sig"]),
            ):
                ds.resize(n + m, axis=0)
                ds[n : n + m] = values
            n += m
        fence = np.ascontiguousarray(cluster[::BLOCK_ROWS]) if n else np.empty((0, 16), np.uint8)
        f.create_dataset("fence", data=fence, track_times=False)
    digest = hashlib.sha256()
    with open(tmp, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
        os.fsync(f.fileno())
    os.replace(tmp, path)
    atomic_write_json(sidecar_path(path), {"sha256": digest.hexdigest(), "records": n})
    return n


class SignatureStore:
    """The store of one build, read-only: :meth:`members` reads the signatures of given clusters."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.files = sorted(self.directory.glob(f"*{STORE_SUFFIX}"))
        if not self.files:
            raise FileNotFoundError(f"{self.directory} holds no signature store")
        with h5py.File(self.files[0], "r") as f:
            self.parts, scheme = int(f.attrs["parts"]), str(f.attrs["scheme"])
        if scheme != STORE_SCHEME or self.parts != len(self.files):
            raise ValueError(
                f"{self.directory}: a {scheme} store of {self.parts} parts, {len(self.files)} files"
            )

    def members(self, clusters: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """For sorted, distinct cluster ids (V16), their members' signatures as (cluster index into
        ``clusters``, (m, K) uint32), one part file at a time; a cluster the build never held yields
        nothing. Reads the fence, the cluster ids of the blocks that may hold the clusters (each
        run of neighbouring blocks in one read) and the signature rows of the members found."""
        clusters = np.ascontiguousarray(clusters).view(ID).reshape(-1)
        where = store_part(clusters, self.parts)
        for p in np.unique(where).tolist():
            asked = np.flatnonzero(where == p)
            with h5py.File(self.files[p], "r") as f:
                fence = np.ascontiguousarray(f["fence"][...]).view(ID).reshape(-1)
                if not len(fence):
                    continue
                n = f["cluster"].shape[0]
                first = np.maximum(np.searchsorted(fence, clusters[asked], side="left") - 1, 0)
                last = np.searchsorted(fence, clusters[asked], side="right")
                wanted = np.zeros(len(fence) + 1, dtype=np.int64)  # blocks that may hold an asked cluster
                np.add.at(wanted, first, 1)
                np.add.at(wanted, last, -1)
                covered = np.cumsum(wanted)[:-1] > 0
                edges = np.flatnonzero(np.diff(np.concatenate([[False], covered, [False]]).astype(np.int8)))
                for lo_block, hi_block in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
                    lo, hi = lo_block * BLOCK_ROWS, min(hi_block * BLOCK_ROWS, n)
                    ids = np.ascontiguousarray(f["cluster"][lo:hi]).view(ID).reshape(-1)
                    here = asked[(first >= lo_block) & (last <= hi_block)]
                    a = np.searchsorted(ids, clusters[here], "left")
                    b = np.searchsorted(ids, clusters[here], "right")
                    for i, start, stop in zip(here.tolist(), a.tolist(), b.tolist(), strict=True):
                        if stop > start:
                            yield np.full(stop - start, i, dtype=np.int64), f["sig"][lo + start : lo + stop]
