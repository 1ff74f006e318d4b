"""The repository graph: code documents (tier ``code``) are clustered as repositories, never as text.

Step ``repos`` merges each repository's documents at its part (signature: elementwise minimum, the
MinHash of the union of their line sets) into a signature part of the repository graph; ``repo_files``
keeps each repository's distinct file hashes. The graph then goes through the text graph's steps
(``hpc_jobs.minhash_dedup.graph``), and ``repo_docs`` turns each repository's verdict into one per
document, with its similarity and file share to the representative (``corpus.code.repo_dedup``).
docs/dedup.md "Repositories (code)".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from corpus.code.repo_dedup import (
    FILE_ROUTE,
    FILE_ROW,
    REPO_MEMBER,
    code_doc_dtype,
    encode_repository_key,
    estimated_similarity,
    exact_jaccard,
)
from corpus.dedup.candidates import part_of_hash
from corpus.dedup.records import DOC_ID_BYTES, REP_KEY_BYTES, shard_tags, unrouted
from corpus.model import Document
from corpus.model.annotations import REPO_CLUSTER, REPO_CLUSTER_SIZE, REPO_DUP_OF, REPO_RANK
from corpus.model.digest import canonical_json
from hpc_jobs.minhash_dedup.phase import (
    REPO_DECISIONS,
    REPO_DOCS,
    REPO_FILES,
    REPOS,
    SIG_FILES,
    SIGNATURES,
    ClusterVerdict,
    Run,
    group_units,
    load_signatures,
)
from hpc_jobs.minhash_dedup.signatures import CODE_DOCS, CODE_FILES, band_rows, write_band_rows
from runtime.global_phase import DECISIONS as DECISION_TABLE
from runtime.global_phase import GlobalPhase, PartWriter, decisions_of, part_of_name

#: a repository part's members (REPO_MEMBER rows) and its repositories' file hashes (FILE_ROW rows)
MEMBERS, FILE_HASHES = ".members", ".file_hashes"


def repositories(run: Run) -> None:
    """Step ``repos``: every code document's row to its repository's part, which merges each
    repository's documents: its signature (their elementwise minimum, the MinHash of the union of
    their line sets), its file count, its representative key (``encode_repository_key``) and band
    rows, written as a signature part (SIG_FILES, BANDS) of the repository graph, and ``.members``
    (its documents, to send its verdict back to)."""
    phase, repos = run.phase, run.repo.names
    k = run.config.num_perm
    dtype = code_doc_dtype(k)

    def send(shard: Any) -> Iterator[np.ndarray]:
        yield np.fromfile(phase.part(SIGNATURES, shard.name).path(CODE_DOCS), dtype=dtype)

    def reduce(p: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        merged = RepositoryMerge(k)
        for batch in batches:  # sorted by repository, then the other fields
            merged.add(batch.astype(dtype, copy=False))
        ids, keys, sigs, members = merged.arrays()
        for suffix, array in zip(SIG_FILES, (ids, keys, sigs), strict=True):
            np.save(writer.open(suffix), array, allow_pickle=False)
        writer.open(MEMBERS).write(members.tobytes())
        write_band_rows(writer, band_rows(run.hasher, ids, sigs, repos[p], len(repos)), len(repos))
        return {"repositories": len(ids)}

    phase.exchange_rows(REPOS, repos, run.inputs, send, reduce, dtype=dtype, order_fields=("repo",))


def repository_files(run: Run) -> None:
    """Step ``repo_files``: every file hash to its repository's part, which keeps each repository's
    distinct ones (FILE_ROW, sorted) for the exact share."""
    phase = run.phase

    def send(shard: Any) -> Iterator[np.ndarray]:
        yield np.fromfile(phase.part(SIGNATURES, shard.name).path(CODE_FILES), dtype=FILE_ROUTE)

    def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        out, last = writer.open(FILE_HASHES), None
        for batch in batches:  # sorted by (repository, hash): a repeat follows its first
            rows = unrouted(batch, FILE_ROUTE, FILE_ROW)
            raw = rows.view(np.uint8).reshape(len(rows), -1)
            new = np.append(True, np.any(raw[1:] != raw[:-1], axis=1)) if len(rows) else np.empty(0, bool)
            if len(rows) and last is not None and raw[0].tobytes() == last:
                new[0] = False
            if len(rows):
                last = raw[-1].tobytes()
            out.write(rows[new].tobytes())
        return {}

    phase.exchange_rows(
        REPO_FILES, run.repo.names, run.inputs, send, reduce, dtype=FILE_ROUTE, order_fields=("repo", "hash")
    )


def repository(phase: GlobalPhase, repos: list[str], repo: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(signature, distinct file hashes) of a repository by its id, read from its part (found by
    the same hash that routed it there)."""
    name = repos[int(part_of_hash(np.frombuffer(repo, np.uint8).reshape(1, -1), len(repos))[0])]
    ids, _, sigs = load_signatures(phase, name, REPOS)
    keys = np.ascontiguousarray(ids).view(f"V{DOC_ID_BYTES}").reshape(-1)  # sorted: rows came by repo
    at = int(np.searchsorted(keys, np.void(repo)))
    path = phase.part(REPO_FILES, name).path(FILE_HASHES)  # memory-mapped: a part is not held
    files = np.memmap(path, dtype=FILE_ROW, mode="r") if path.stat().st_size else np.empty(0, FILE_ROW)
    lo = np.searchsorted(files["repo"], np.void(repo), side="left")
    hi = np.searchsorted(files["repo"], np.void(repo), side="right")
    return np.asarray(sigs[at]), files["hash"][lo:hi].astype(np.uint64)


def repo_docs(run: Run) -> None:
    """Step ``repo_docs``: each repository part turns the verdicts on its repositories into verdicts
    on their documents, adding the repository's similarity to its cluster's representative
    (estimated from the signatures) and the share of files they share (exact Jaccard of their
    file hashes), and sends them to their shards' decision tables."""
    phase, graph, shards = run.phase, run.repo, run.shards
    shard_no, tags = part_of_name(shards), shard_tags(shards)
    senders = group_units(graph.names)

    def send(unit: Any) -> Iterator[tuple[int, bytes, bytes]]:
        decisions = decisions_of(phase.root, REPO_DECISIONS, unit.name)
        if not decisions:
            return
        members = np.fromfile(phase.part(REPOS, unit.name).path(MEMBERS), dtype=REPO_MEMBER)
        ids, _, _ = load_signatures(phase, unit.name, REPOS)
        starts = np.searchsorted(members["repo"], np.arange(len(ids) + 1))
        for key in sorted(decisions, key=int):
            v, r = ClusterVerdict.from_json(decisions[key]), int(key)
            sig, files = repository(phase, graph.names, ids[r].tobytes())
            rep_sig, rep_files = (sig, files)
            if v.dup_of:
                rep_sig, rep_files = repository(phase, graph.names, bytes.fromhex(v.dup_of))
            similarity, share = estimated_similarity(sig, rep_sig), exact_jaccard(files, rep_files)
            verdict = canonical_json(replace(v, similarity=similarity, file_share=share).to_json())
            for m in members[starts[r] : starts[r + 1]]:
                yield shard_no(tags[m["shard_tag"].tobytes()]), str(int(m["ordinal"])).encode(), verdict

    def reduce(_: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
        table = {k.decode(): json.loads(v) for k, v in records}
        writer.write_json(DECISION_TABLE, table)
        return {"code_docs_in_repo_clusters": len(table)}

    phase.exchange(REPO_DOCS, shards, senders, send, reduce)


def annotate_repository(doc: Document, verdict: ClusterVerdict) -> Document:
    """A code document with its repository's cluster: ``repo_cluster`` (the smallest repository id of
    the cluster), ``repo_cluster_size`` (repositories), ``repo_rank`` (its repository's place in the
    cluster's representative order, 0 = the representative), ``repo_dup_of`` (the representative's id;
    only on other members), and the scores ``repo_similarity`` (estimated Jaccard of line sets with
    the representative) and ``repo_file_share`` (exact Jaccard of their file hashes). Every member
    stays a candidate: a version keeps, per cluster, the best-ranked selected repository."""
    dup = verdict.dup_of
    notes = [
        REPO_CLUSTER.note(verdict.cluster),
        REPO_CLUSTER_SIZE.note(verdict.size, "fail" if dup else "pass"),
        REPO_RANK.note(verdict.rank),
    ]
    if dup:
        notes.append(REPO_DUP_OF.note(dup))
    scores = {
        **doc.scores,
        "repo_file_share": verdict.file_share,
        "repo_similarity": verdict.similarity,
    }
    return doc.annotate(*notes, scores=dict(sorted(scores.items())))


class RepositoryMerge:
    """A repository part's code-document rows (sorted by repository) merged into one record per
    repository as they stream in: signature = elementwise minimum, files summed, most trusted tier."""

    def __init__(self, num_perm: int) -> None:
        self.k = num_perm
        self.ids: list[bytes] = []
        self.keys: list[bytes] = []
        self.sigs: list[np.ndarray] = []
        self.members: list[tuple[int, bytes, int]] = []
        self._open: list[Any] | None = None  # [repo, tier, release, files, signature]

    def add(self, rows: np.ndarray) -> None:
        sigs = np.ascontiguousarray(rows["sig"]).view(np.uint64).reshape(len(rows), self.k)
        for j in range(len(rows)):
            repo = rows["repo"][j].tobytes()
            if self._open is None or self._open[0] != repo:
                self._close()
                self._open = [repo, int(rows["tier"][j]), rows["release"][j].tobytes(), 0, sigs[j].copy()]
            else:
                np.minimum(self._open[4], sigs[j], out=self._open[4])
                self._open[1] = min(self._open[1], int(rows["tier"][j]))
            self._open[3] += int(rows["files"][j])
            self.members.append((len(self.ids), rows["shard_tag"][j].tobytes(), int(rows["ordinal"][j])))

    def _close(self) -> None:
        if self._open is not None:
            repo, tier, release, files, sig = self._open
            self.ids.append(repo)
            self.keys.append(encode_repository_key(tier, files, release, repo))
            self.sigs.append(sig)
            self._open = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids (n, 16) uint8, representative keys (n, 35) uint8, signatures (n, K), REPO_MEMBER rows)."""
        self._close()
        n = len(self.ids)
        ids = np.frombuffer(b"".join(self.ids), np.uint8).reshape(n, DOC_ID_BYTES)
        keys = np.frombuffer(b"".join(self.keys), np.uint8).reshape(n, REP_KEY_BYTES)
        sigs = np.stack(self.sigs) if n else np.empty((0, self.k), dtype=np.uint64)
        members = np.array(self.members, dtype=REPO_MEMBER) if self.members else np.empty(0, REPO_MEMBER)
        return ids, keys, sigs, members
