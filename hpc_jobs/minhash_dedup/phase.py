"""What every step of minhash_dedup's global phase shares: step names, part file suffixes, the run's
context (:class:`Run`, fixed once ``prepare`` has opened the phase), the two clustering graphs
(:class:`Graph`) and the readers of signature parts.

A step is a module-level function of the :class:`Run` (and, for the graph steps, a :class:`Graph`);
what one step hands the next is a part on disk, never state held between calls. docs/dedup.md.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from corpus.decont.holdout import HoldoutFile
from corpus.dedup.candidates import concat
from corpus.dedup.records import BAND_ROW, shard_numbers
from mpi_kernels.minhash import MinHasher
from runtime.against_base import AgainstBase
from runtime.global_phase import GlobalPhase, decisions_of
from runtime.input_shard import InputShard
from runtime.runner import assign

if TYPE_CHECKING:
    from hpc_jobs.minhash_dedup.stage import MinhashDedupConfig

SIGNATURES, BUCKETS, LABELS, CLUSTERS, DECISIONS = "signatures", "buckets", "labels", "clusters", "decisions"
#: the components verified across every rank (``hpc_jobs.minhash_dedup.giant``): found, then verified
COMPONENTS, GIANT_CLUSTERS = "components", "giant_clusters"
#: the repository graph's steps (code documents): their repositories, then the same four steps as text
REPOS, REPO_FILES = "repos", "repo_files"
REPO_BUCKETS, REPO_LABELS, REPO_CLUSTERS = "repo_buckets", "repo_labels", "repo_clusters"
REPO_DECISIONS, REPO_DOCS = "repo_decisions", "repo_docs"
HELD_SIGNATURES, HOLDOUT = "holdout_signatures", "holdout"
BASE_LINKS, BAND_RECORDS = "base_links", "band_records"
#: the build's signature store (``hpc_jobs.minhash_dedup.signature_store``), beside its band records
SIGNATURE_STORE_STEP = "signature_store"

SIG_FILES = (".ids.npy", ".rep.npy", ".sigs.npy")
#: what per-shard processing needs to pass an untouched document on without parsing it again: its
#: yield cell ("source<TAB>lang") and its text's UTF-8 size, per ordinal
PASS_FILES = (".groups.npy", ".text_bytes.npy")
BANDS = ".bands"
BAND_OFFSETS = ".band_offsets.npy"
EDGES = ".edges"
LABEL_ROWS = ".labels"


@dataclass(frozen=True, slots=True)
class ClusterVerdict:
    """A member of a cluster, as its shard's decision table stores it: the cluster's id (its smallest
    doc_id, or the base cluster's it joined), its size, the representative it duplicates (``""``: it is
    the representative) and, for a repository cluster, its rank in the representative order and its
    similarity and file share with the representative."""

    cluster: str
    size: int
    dup_of: str
    rank: int | None = None
    similarity: float | None = None
    file_share: float | None = None

    def to_json(self) -> dict[str, Any]:
        d = {"cluster": self.cluster, "size": self.size, "dup_of": self.dup_of}
        more = {"rank": self.rank, "similarity": self.similarity, "file_share": self.file_share}
        return d | {k: v for k, v in more.items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ClusterVerdict:
        return cls(
            d["cluster"], d["size"], d["dup_of"], d.get("rank"), d.get("similarity"), d.get("file_share")
        )


@dataclass(frozen=True)
class GroupUnit:
    """A bucket part as the unit of a map step (it names the part and is its own digest)."""

    name: str
    sha256: str


def group_units(groups: list[str]) -> list[GroupUnit]:
    """The bucket parts as units of a map step (each reads its rows from every signature part)."""
    return [GroupUnit(g, g) for g in groups]


class SignatureParts:
    """The signatures a signature step wrote, one memory map per shard (``.sigs.npy``), the most
    recently used few kept open: a component's owner reads its members' signatures where they are."""

    OPEN = 64

    def __init__(self, phase: GlobalPhase, shards: list[str], step: str = SIGNATURES) -> None:
        self.phase, self.shards, self.step = phase, shards, step
        self._open: OrderedDict[int, np.ndarray] = OrderedDict()

    def of(self, shard_no: int) -> np.ndarray:
        sigs = self._open.pop(shard_no, None)
        if sigs is None:
            part = self.phase.part(self.step, self.shards[shard_no])
            sigs = np.load(part.path(SIG_FILES[2]), mmap_mode="r", allow_pickle=False)
            if len(self._open) >= self.OPEN:
                self._open.popitem(last=False)
        self._open[shard_no] = sigs
        return sigs


@dataclass(frozen=True)
class Graph:
    """One clustering graph of the phase: the text graph (a node per document) or the repository graph
    (a node per repository, ``repos`` parts in place of input shards). Both go through the same steps:
    buckets of band rows, connected components, verified clusters, verdicts."""

    signatures: str  # the step whose parts hold the nodes' SIG_FILES and band rows
    buckets: str
    labels: str
    clusters: str
    decisions: str
    names: list[str]  # the parts of ``signatures`` (node tags are their shard tags)
    tags: dict[bytes, str]
    parts: SignatureParts
    groups: list[str]  # the bucket parts
    facts: str = ""  # prefix of the graph's facts
    ranked: bool = False  # verdicts carry each member's rank in its cluster's representative order

    @property
    def text(self) -> bool:
        return self.signatures == SIGNATURES


@dataclass(frozen=True)
class Run:
    """One run of the phase, as ``prepare`` opened it: what every step reads, never written by one."""

    phase: GlobalPhase
    config: MinhashDedupConfig
    hasher: MinHasher
    inputs: list[InputShard]  # sorted by name
    held: list[HoldoutFile]  # the eval holdout's files, sorted by name
    held_parts: SignatureParts
    index: AgainstBase  # the build's band index: records written, and the base probed
    text: Graph
    repo: Graph

    @property
    def probed(self) -> bool:
        """Whether the run probes a base's band index (a build against a base that has band records)."""
        return self.index.probed

    @cached_property
    def has_code(self) -> bool:
        """Whether the signatures found a code document (collective: each rank reads the markers of the
        signature parts it owns, O(shards / ranks)); without one the repository graph costs nothing."""
        mine = assign(self.inputs, self.phase.ctx.rank, self.phase.ctx.size)
        code = sum(self.phase.part(SIGNATURES, s.name).facts.get("code_docs", 0) for s in mine)
        return self.phase.comm.allreduce(code) > 0

    @property
    def shards(self) -> list[str]:
        return self.text.names

    @property
    def held_names(self) -> list[str]:
        return [f.name for f in self.held]


def load_signatures(phase: GlobalPhase, shard_name: str, step: str = SIGNATURES) -> tuple[np.ndarray, ...]:
    """(doc_ids, representative keys, signatures) of a signature part, memory-mapped."""
    part = phase.part(step, shard_name)
    if part is None:
        raise FileNotFoundError(f"signatures of {shard_name} are not complete")
    return tuple(np.load(part.path(s), mmap_mode="r", allow_pickle=False) for s in SIG_FILES)


def cluster_ids(phase: GlobalPhase, shard_name: str, doc_ids: np.ndarray) -> np.ndarray:
    """Each document's cluster id ((n, 16) uint8 rows) as the shard's verdicts set it (a base
    cluster's included), its own doc_id (``doc_ids``) outside a cluster."""
    clusters = np.array(doc_ids)
    for ordinal, verdict in decisions_of(phase.root, DECISIONS, shard_name).items():
        clusters[int(ordinal)] = np.frombuffer(
            bytes.fromhex(ClusterVerdict.from_json(verdict).cluster), np.uint8
        )
    return clusters


def band_run(phase: GlobalPhase, step: str, names: list[str], g: int) -> np.ndarray:
    """Bucket part ``g``'s band rows of every signature part of ``step`` (a contiguous run of each,
    found by the part's offsets), one after another."""
    runs = []
    for name in names:
        part = phase.part(step, name)
        lo, hi = np.load(part.path(BAND_OFFSETS), allow_pickle=False)[g : g + 2]
        runs.append(
            np.fromfile(
                part.path(BANDS), dtype=BAND_ROW, offset=int(lo) * BAND_ROW.itemsize, count=int(hi - lo)
            )
        )
    return concat(runs, BAND_ROW)


def signature_rows(parts: SignatureParts, nodes: np.ndarray, tag_names: list[str]) -> np.ndarray:
    """The signatures of ``nodes`` (NODE rows of the shards ``parts`` holds, whose tags are those of
    ``tag_names``), read from their signature parts by ordinal."""
    shard = shard_numbers(nodes["shard_tag"], tag_names)
    ordinal = nodes["ordinal"].astype(np.int64)
    out = np.empty((len(nodes), parts.of(int(shard[0])).shape[1] if len(nodes) else 0), dtype=np.uint64)
    for s in np.unique(shard).tolist():
        at = np.flatnonzero(shard == s)
        out[at] = parts.of(s)[ordinal[at]]
    return out


def among(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is one of ``sorted_keys`` (byte fields of the same width)."""
    if not len(sorted_keys) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[at] == values


def row_bytes(rows: np.ndarray) -> list[bytes]:
    """Each row of a byte field as ``bytes``."""
    raw = np.ascontiguousarray(rows).tobytes()
    w = rows.dtype.itemsize
    return [raw[i : i + w] for i in range(0, len(raw), w)]
