"""Repository-level near-duplicate dedup: what a repository is as a set, and how clusters pick one.

A repository is the unit of code dedup: a version keeps one release or fork of a project whole, or
none of it. Its set is its distinct line keys (:func:`corpus.text.normalize.line_key`, file header
lines excluded); its signature is the elementwise minimum of its documents' set MinHashes, which is
the MinHash of the union however it was split or signed. The representative is the smallest
:func:`encode_repository_key` (byte order = preference): most trusted tier, most files, newest release
(a name without a version loses), repository id. Why lines and not file hashes, and the measurements:
docs/dedup.md ("Repositories (code)") and docs/code.md ("Repository-level dedup").
"""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np

from corpus.dedup.records import DOC_ID_BYTES, REP_KEY_BYTES, SHARD_TAG_BYTES
from corpus.model import Document
from corpus.model.annotations import REPO_FILES
from corpus.model.tiers import source_rank
from corpus.text.normalize import line_key

PART_FRAGMENT = "#part="
RELEASE_BYTES = 10  # five version components of two bytes each
_VERSION = re.compile(r"[-_]v?(\d+(?:\.\d+){0,4})(?:[.-]?(?:post|dev|rc|a|b)\d*)?$", re.I)


def code_doc_dtype(num_perm: int) -> np.dtype:
    """A code document on its way to its repository's part (``repos`` step): the part, the repository,
    its rank-key fields, where the document is, its file count and its line-set signature (native
    uint64 bytes). Byte order = (part, repository, ...): a part's rows arrive grouped by repository."""
    return np.dtype(
        [
            ("part", ">u4"),
            ("repo", f"V{DOC_ID_BYTES}"),
            ("tier", "u1"),
            ("release", f"V{RELEASE_BYTES}"),
            ("ordinal", ">u4"),
            ("shard_tag", f"V{SHARD_TAG_BYTES}"),
            ("files", ">u4"),
            ("sig", f"V{8 * num_perm}"),
        ]
    )


#: a kept file's content hash on its way to its repository's part (``repo_files`` step)
FILE_ROUTE = np.dtype([("part", ">u4"), ("repo", f"V{DOC_ID_BYTES}"), ("hash", ">u8")])
#: what a repository part keeps of the above: its repositories' distinct file hashes, sorted
FILE_ROW = np.dtype([("repo", f"V{DOC_ID_BYTES}"), ("hash", ">u8")])
#: a document of a repository (``repos`` step's ``.members``): the repository's index in its part,
#: then where the document is
REPO_MEMBER = np.dtype([("repo", ">u4"), ("shard_tag", f"V{SHARD_TAG_BYTES}"), ("ordinal", ">u4")])


def repository_url(doc: Document) -> str:
    """The repository a code document belongs to: its url without the ``#part=K`` of a split one."""
    return doc.url.split(PART_FRAGMENT, 1)[0]


def repository_name(url: str) -> str:
    """``repo://requests-2.32.3/`` -> ``requests-2.32.3`` (the last path segment of any url)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def repository_id(url: str) -> bytes:
    """16 bytes naming a repository (a hash of its url: fixed width in every record)."""
    return hashlib.blake2b(url.encode("utf-8"), digest_size=DOC_ID_BYTES, person=b"repo-v1").digest()


def release_key(name: str) -> bytes:
    """The version at the end of ``name`` as bytes whose order is newest first (each of five numeric
    components stored as 65535 - value); a name without a version sorts after every version."""
    m = _VERSION.search(name)
    if not m:
        return b"\xff" * RELEASE_BYTES
    parts = [min(int(p), 65535) for p in m.group(1).split(".")][:5]
    parts += [0] * (5 - len(parts))
    return b"".join((65535 - p).to_bytes(2, "big") for p in parts)


def encode_repository_key(tier_rank: int, files: int, release: bytes, repo: bytes) -> bytes:
    """The representative order of a repository as REP_KEY_BYTES bytes (smallest wins): tier rank, most
    files (stored as 2^64-1 - files), newest release, repository id last (where the cluster stage reads
    a member's id, as it reads a document's doc_id in a representative key)."""
    key = bytes([tier_rank]) + ((1 << 64) - 1 - files).to_bytes(8, "big") + release + repo
    assert len(key) == REP_KEY_BYTES
    return key


def document_files(doc: Document) -> list[tuple[str, str]]:
    """(path, text) of each file of a code document, cut at the header lines ``<|file|> PATH`` of the
    paths its ``ingest/repo_files`` annotation lists, in that order. Headers are searched for rather
    than byte lengths trusted, because annotate's PII scrub may change a file's length; a file
    containing the very header line of the file after it would be cut there (never seen). A code
    document that did not come from a repository archive (no ``repo_files``: a JSONL of code declared
    tier ``code``) is one file, path "", and so a repository of its own."""
    # imported here, not with this module: the header is all it is needed for, and reading archives
    # (licence detection, language rules: ~0.1 CPU s of imports) is no part of a dedup rank's start-up
    from corpus.code.repository import FILE_HEADER

    note = REPO_FILES.of(doc)
    if note is None:
        return [("", doc.text)]
    paths = [f[0] for f in json.loads(note.value)]
    text, out, at = doc.text, [], 0
    for i, path in enumerate(paths):
        head = f"{FILE_HEADER}{path}\n"
        if not text.startswith(head, at):
            raise ValueError(f"{doc.url}: file {i} ({path}) does not start where its header should")
        start = at + len(head)
        if i + 1 < len(paths):
            nxt = text.find(f"\n{FILE_HEADER}{paths[i + 1]}\n", start - 1)
            if nxt < 0:
                raise ValueError(f"{doc.url}: no header for file {i + 1} ({paths[i + 1]})")
            at = nxt + 1
        else:
            at = len(text)
        out.append((path, text[start:at]))
    return out


def line_hashes(files: list[tuple[str, str]]) -> np.ndarray:
    """The distinct line keys of the files (uint64, sorted): the repository's set, this document's share."""
    keys = {k for _, body in files for line in body.split("\n") if (k := line_key(line)) is not None}
    return np.unique(np.frombuffer(b"".join(sorted(keys)), dtype=">u8").astype(np.uint64))


def file_hashes(files: list[tuple[str, str]]) -> np.ndarray:
    """The distinct content hashes of the files (uint64, sorted), each of the file's exact text."""
    raw = b"".join(hashlib.blake2b(body.encode("utf-8"), digest_size=8).digest() for _, body in files)
    return np.unique(np.frombuffer(raw, dtype=">u8").astype(np.uint64))


def document_rank_fields(doc: Document) -> tuple[bytes, int, bytes]:
    """(repository id, tier rank, release key) of a code document."""
    url = repository_url(doc)
    return repository_id(url), source_rank(doc.source_tier), release_key(repository_name(url))


def estimated_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Estimated Jaccard of two sets from their signatures: the share of permutations that agree."""
    return float(np.mean(np.asarray(a) == np.asarray(b))) if len(a) else 0.0


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|A & B| / |A | B| of two sorted distinct arrays (0 for two empty sets)."""
    union = len(np.union1d(a, b))
    return len(np.intersect1d(a, b, assume_unique=True)) / union if union else 0.0
