"""Opening a version: its manifest checked against its id and its build, its shards and its bitmaps.

A version directory holds ``manifest.json`` (``corpus-version/2``: its shard entries in a table beside it,
:mod:`corpus.version.table`; ``corpus-version/1`` listed them in it) and one bitmap per shard (bit i,
little-endian within each byte: document i selected). It points at its build's snapshot and refuses to
open when a shard there no longer has the digests it was selected from (a shard's metadata is checked when
its entry is first read); a build's own snapshot is the version that selects everything. What the loader
reads: numpy only, never DuckDB nor pyarrow (a test checks the loader's import closure). See
docs/versions.md ("Versions").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from corpus.model import SnapshotManifest, SnapshotShard
from corpus.model.digest import json_digest, sha256_hex
from corpus.model.errors import UserError
from corpus.model.layout import BASE_CANDIDATES, MANIFEST, SNAPSHOT_DIR
from corpus.model.line_table import Lazily
from corpus.version.table import VersionTable, key_dtype, table_bytes

VERSION_FORMAT = "corpus-version/2"
#: the form that lists its shard entries in the manifest (every version made before the table): read as before
LISTED_FORMAT = "corpus-version/1"
VERSION_FORMATS = (LISTED_FORMAT, VERSION_FORMAT)
SELECTION_DIR = "selection"
BITS_SUFFIX = ".bits"


def pack_bits(selected: np.ndarray) -> bytes:
    return np.packbits(np.asarray(selected, dtype=bool), bitorder="little").tobytes()


def unpack_bits(data: bytes, n: int) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=n, bitorder="little")
    if bits.shape[0] != n:
        raise ValueError(f"bitmap holds {len(data) * 8} bits, the shard has {n} documents")
    return bits.astype(bool)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path.parent} is neither a build, a snapshot nor a version (no {path.name})"
        ) from None
    except ValueError as e:
        raise UserError(f"{path}: not JSON: {e}") from None


@dataclass(frozen=True)
class StoredShard:
    """One shard as a table reader needs it."""

    name: str
    bucket: str
    docs: int
    tokens: int
    sha256: str
    metadata: Path
    meta: Path
    #: how many builds back the shard was stored (:func:`build_age`; 0: the build's own shard)
    age: int = 0
    #: its position in the build's manifest (where a version's entry for it is)
    index: int = 0

    @property
    def metadata_sha256(self) -> str:
        """From the shard's ``.meta.json`` (written by write_shards, vouched for by the manifest)."""
        return json.loads(self.meta.read_text())["metadata_sha256"]


@dataclass(frozen=True)
class Version:
    """An opened build snapshot or version: the base snapshot, its shards, and the selection bits
    (``None`` for the base itself, which selects everything). The shards and a version's entries are
    read as asked: a loader rank parses those of the shards it opens (:mod:`corpus.version.table`)."""

    base_dir: Path
    base: SnapshotManifest
    shards: Sequence[StoredShard]  # StoredShards (read as asked), or a tuple
    manifest: dict[str, Any] | None = None
    dir: Path | None = None

    @property
    def snapshot_id(self) -> str:
        return self.manifest["snapshot_id"] if self.manifest else self.base.snapshot_id

    @property
    def tombstones(self) -> dict[str, dict[str, Any]]:
        """Shards physically deleted since the build, by name: their files may be gone."""
        return {t["name"]: t for t in (self.manifest or {}).get("tombstones", [])}

    @property
    def takedowns(self) -> list[dict[str, Any]]:
        """Documents taken down since the build (``corpus takedown``), oldest first: per shard rewritten,
        the documents' ids and indices, the reason, and the shard's digests before and after."""
        return list((self.manifest or {}).get("takedowns", []))

    @property
    def removed(self) -> dict[str, np.ndarray]:
        """The indices (ascending) of the documents taken down, by shard: no selection ever keeps them.
        A build made against a base inherits the base's (its manifest's ``extra.takedowns``)."""
        out: dict[str, set[int]] = {}
        for t in [*self.base.extra.get("takedowns", []), *self.takedowns]:
            out.setdefault(t["name"], set()).update(t["indices"])
        return {name: np.array(sorted(ix), dtype=np.int64) for name, ix in sorted(out.items())}

    @cached_property
    def readable_base(self) -> SnapshotManifest:
        """The build's manifest with each taken-down shard's current digests (its .bin rewritten in
        place, its block digests in a new file): what a reader checks the bytes it reads against. The
        build's own manifest (``base``, whose id the version names) is never changed."""
        last = {t["name"]: t for t in self.takedowns}
        if not last:
            return self.base
        shards = self.base.shards
        return replace(self.base, shards=Lazily(len(shards), lambda i: as_taken_down(shards[i], last)))

    @property
    def live_shards(self) -> tuple[StoredShard, ...]:
        """The shards whose files are still there (not tombstoned)."""
        return tuple(s for s in self.shards if s.name not in self.tombstones)

    @property
    def bucket_names(self) -> tuple[str, ...]:
        """The buckets by predicate the version defines, in order; none: the build's physical buckets."""
        return tuple(b["name"] for b in (self.manifest or {}).get("buckets", []))

    def shard_named(self, name: str) -> StoredShard:
        return next(s for s in self.shards if s.name == name)

    @cached_property
    def entries(self) -> Sequence[dict[str, Any]]:
        """The version's shard entries, in the build's order: its table, read as asked, or (listed
        form) the manifest's list."""
        if "shard_table" in self.manifest:
            return VersionTable(self.dir, self.manifest["shard_table"], self.bucket_names)
        return self.manifest["shards"]

    @cached_property
    def columns(self) -> np.ndarray:
        """A row per shard (:func:`corpus.version.table.key_dtype`): what it selects, in all and per
        bucket by predicate, and whether it is tombstoned, without parsing an entry of the table."""
        if isinstance(self.entries, VersionTable):
            try:
                return self.entries.columns
            except ValueError as e:
                raise UserError(f"version {self.dir}: {e}") from None
        keys, _, _ = table_bytes(self.entries, self.bucket_names, set(self.tombstones))
        return np.frombuffer(keys, dtype=key_dtype(len(self.bucket_names)))

    @cached_property
    def _checked(self) -> set[int]:
        return set()

    def entry(self, shard: StoredShard) -> dict[str, Any]:
        """``shard``'s entry, checked against the build when first read: the shard's digests and its
        metadata's are the ones it was selected from, and its metadata table is there."""
        try:
            e = self.entries[shard.index]
        except ValueError as err:
            raise UserError(f"version {self.dir}: {err}") from None
        if shard.index in self._checked:
            return e
        if e["name"] != shard.name:
            raise UserError(f"version {self.dir}: shard {shard.name} is not in its build any more")
        if e["name"] not in self.tombstones:
            if (shard.sha256, shard.metadata_sha256) != (e["sha256"], e["metadata_sha256"]):
                raise UserError(
                    f"version {self.dir}: shard {e['name']} of its build has changed (digests differ)"
                )
            if not shard.metadata.is_file():
                raise UserError(
                    f"version {self.dir}: shard {e['name']}'s metadata {shard.metadata} is missing"
                )
        self._checked.add(shard.index)
        return e

    def _bitmap(self, shard: StoredShard, entry: dict[str, Any], what: str) -> np.ndarray:
        data = (self.dir / entry["bitmap"]).read_bytes()
        if sha256_hex(data) != entry["bitmap_sha256"]:
            raise UserError(f"version {self.dir}: bitmap of {what} does not match its digest")
        return unpack_bits(data, shard.docs)

    def selected(self, shard: StoredShard) -> np.ndarray:
        if self.manifest is None:
            return np.ones(shard.docs, dtype=bool)
        if shard.name in self.tombstones:
            return np.zeros(shard.docs, dtype=bool)
        return self._bitmap(shard, self.entry(shard), f"shard {shard.name}")

    def bucket_selected(self, shard: StoredShard, bucket: str) -> np.ndarray:
        """The selected documents of ``shard`` in predicate bucket ``bucket`` (one bool per document)."""
        if shard.name in self.tombstones:
            return np.zeros(shard.docs, dtype=bool)
        entry = self.entry(shard)["buckets"][bucket]
        return self._bitmap(shard, entry, f"shard {shard.name} bucket {bucket}")

    def bucket_counts(self) -> Iterator[tuple[StoredShard, str, int, int]]:
        """(shard, bucket, docs, tokens) of every (shard, predicate bucket) pair, shard-major, buckets in
        the order defined (empty pairs included), as the manifest records them."""
        docs, tokens = self.columns["bucket_docs"].tolist(), self.columns["bucket_tokens"].tolist()
        for s, d, t in zip(self.shards, docs, tokens, strict=True):
            yield from ((s, b, bd, bt) for b, bd, bt in zip(self.bucket_names, d, t, strict=True))

    def selected_counts(self) -> Iterator[tuple[StoredShard, int, int]]:
        """(shard, selected docs, selected tokens) as the manifest records them."""
        if self.manifest is None:
            for s in self.shards:
                yield s, s.docs, s.tokens
            return
        docs, tokens = self.columns["selected_docs"].tolist(), self.columns["selected_tokens"].tolist()
        yield from zip(self.shards, docs, tokens, strict=True)


def as_taken_down(
    s: SnapshotShard, last: dict[str, dict[str, Any]], where: Callable[[str], str] = str
) -> SnapshotShard:
    """``s`` with the digests and files of its bytes now when ``last`` (each shard's last takedown
    record, by name) has one for it (its .bin zeroed in place, new .blocks and .meta.json beside);
    ``where``: a record's relative path as ``s``'s manifest lists it (a delta's, through ``base/``)."""
    t = last.get(PurePosixPath(s.path).name.removesuffix(".bin"))
    if t is None:
        return s
    files = {**s.files, "meta": where(t["meta"]), **({"blocks": where(t["blocks"])} if t["blocks"] else {})}
    return replace(s, sha256=t["sha256"], blocks_sha256=t["blocks_sha256"], files=files)


def build_age(path: str) -> int:
    """How many builds back a shard of a candidates (or snapshot) manifest was stored: the number of
    leading ``base/`` components of its listed path (a delta's candidates list its base's shards through
    their ``base`` link, a base's base's through ``base/base/``: :func:`corpus.snapshot.inherit.inherit_base`).
    0 for the build's own shards, so every shard of a full build. A fact of the manifest (its relative
    paths, which its id digests), never of where the builds lie."""
    parts = PurePosixPath(path).parts
    age = 0
    while age < len(parts) - 1 and parts[age] == BASE_CANDIDATES:
        age += 1
    return age


def _stored(snap_dir: Path, m: SnapshotManifest, i: int) -> StoredShard:
    s = m.shards[i]
    name = Path(s.path).name.removesuffix(".bin")
    if "metadata" not in s.files:
        raise UserError(
            f"snapshot {m.snapshot_id} has no metadata table (shard {name}): it was built before "
            f"write_shards wrote one; rebuild it to query or select from it"
        )
    return StoredShard(
        name,
        s.bucket,
        s.docs,
        s.tokens,
        s.sha256,
        snap_dir / s.files["metadata"],
        snap_dir / s.files["meta"],
        build_age(s.path),
        i,
    )


def stored_shards(snap_dir: Path, m: SnapshotManifest) -> Sequence[StoredShard]:
    """``m``'s shards as table readers need them, each made from its entry when first asked."""
    return Lazily(len(m.shards), lambda i: _stored(snap_dir, m, i))


def is_version(ref: Path) -> bool:
    """Whether ``ref`` is a version directory (or its manifest), as ``corpus version`` writes them, or
    a build directory (whose ``snapshot/`` is its default version)."""
    path = _manifest_in(Path(ref))
    if path is None:
        return False
    try:
        return json.loads(path.read_text()).get("format") in VERSION_FORMATS
    except (OSError, ValueError, AttributeError):
        return False


def _manifest_in(ref: Path) -> Path | None:
    """The manifest ``ref`` names: itself, its own, or its ``snapshot/``'s; None where there is none."""
    paths = [ref] if ref.name == MANIFEST else [ref / MANIFEST, ref / SNAPSHOT_DIR / MANIFEST]
    return next((path for path in paths if path.is_file()), None)


def open_version(ref: Path) -> Version:
    """A build directory (its ``snapshot/``), a snapshot directory or a version directory."""
    candidate = _manifest_in(Path(ref))
    if candidate is None:
        raise UserError(f"{ref} is neither a build, a snapshot nor a version (no {MANIFEST})")
    data = _read_json(candidate)
    if data.get("format") in VERSION_FORMATS:
        return _version(candidate.parent, data)
    base = _open_base(candidate.parent)
    return Version(candidate.parent, base, stored_shards(candidate.parent, base))


def manifest_at(ref: Path) -> tuple[Path, dict[str, Any]] | None:
    """The manifest ``ref`` names (itself, its own, or its ``snapshot/``'s) and its parsed content; None
    where there is none. With :func:`as_version` a caller parses it once, where :func:`is_version` and
    then :func:`open_version` parsed it twice (a loader rank's start at 30,000 shards: 3.1-3.3 -> 2.4
    CPU s)."""
    path = _manifest_in(Path(ref))
    return None if path is None else (path, _read_json(path))


def as_version(path: Path, data: dict[str, Any]) -> Version | None:
    """The version whose manifest, read from ``path``, is ``data``; None where it is a snapshot's."""
    return _version(path.parent, data) if data.get("format") in VERSION_FORMATS else None


def _version(vdir: Path, data: dict[str, Any]) -> Version:
    """The version whose manifest in ``vdir`` is ``data``, checked against its id and its build's id (a
    shard's own digests when its entry is first read: :meth:`Version.entry`)."""
    digested = {k: v for k, v in data.items() if k not in ("snapshot_id", "run_info")}
    if json_digest(digested) != data.get("snapshot_id"):
        raise UserError(f"version {vdir}: manifest does not match its id {data.get('snapshot_id')}")
    base_dir = Path(data["run_info"]["base"])
    if not base_dir.is_absolute():
        base_dir = (vdir / base_dir).resolve()
    if not (base_dir / MANIFEST).is_file():
        raise UserError(f"version {vdir}: its build's snapshot is not at {base_dir} (moved or deleted)")
    base = _open_base(base_dir)
    version = Version(base_dir, base, stored_shards(base_dir, base), data, vdir)
    if base.snapshot_id != data["base_snapshot_id"]:
        raise _changed_build(version)
    if len(version.columns) != len(base.shards):
        raise UserError(
            f"version {vdir}: it lists {len(version.columns)} shards, its build {len(base.shards)}"
        )
    return version


def _open_base(snap_dir: Path) -> SnapshotManifest:
    try:
        return SnapshotManifest.from_dict(_read_json(snap_dir / MANIFEST), snap_dir)
    except (KeyError, ValueError) as e:
        raise UserError(f"{snap_dir / MANIFEST}: {e}") from None


def _changed_build(v: Version) -> UserError:
    """Why ``v``'s build is no longer the one it was selected from, naming the first shard that changed
    or went (a comparison of every shard, made only once the build's id differs)."""
    keys, rows = v.base.shard_keys(), v.columns
    for i, row in enumerate(rows):
        if i >= len(keys):
            return UserError(f"version {v.dir}: shard {v.entries[i]['name']} is not in its build any more")
        if not row["tombstoned"] and row["sha256"].tobytes().hex() != keys[i].sha256:
            return UserError(
                f"version {v.dir}: shard {v.entries[i]['name']} of its build has changed (digests differ)"
            )
    return UserError(
        f"version {v.dir}: its build at {v.base_dir} has changed (snapshot {v.base.snapshot_id}, "
        f"the version was made from {v.manifest['base_snapshot_id']})"
    )
