"""Versions: a selection of a build's stored documents, made from the metadata table alone.

A version directory holds ``manifest.json`` (format ``corpus-version/1``) and one bitmap per shard
(``selection/<shard>.bits``: bit i, little-endian within each byte, says whether document i of the
shard is selected). Its id, ``snapshot_id``, is the digest of everything in the manifest but
``run_info`` (where the base lives, who made it): the base snapshot's id, the selection's canonical
form, and per shard its name, the sha256 of its tokens and of its metadata, and the bitmap's sha256 and
counts. So the same selection of the same build gives the same id wherever the directories are.

A version never copies or changes the build: it points at the base snapshot directory (recorded in
``run_info.base``) and refuses to open when a shard there no longer has the digest it was selected
from. The build's own snapshot (``BUILD/snapshot/``) is the version that selects everything.

Why bitmaps: the loader's sampler works from sizes alone, so a version records per shard the selected
documents and tokens; the bits say which, one bit a document (125 MB for 10⁹ documents).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from corpus.digest import canonical_json, json_digest, sha256_hex
from corpus.docshard import atomic_write_bytes
from corpus.errors import UserError
from corpus.layout import MANIFEST, SNAPSHOT_DIR
from corpus.model import SnapshotManifest
from corpus.policy import PolicyConfig, decide_rows, missing_values
from corpus.provenance import COPY_COLUMNS
from corpus.selection import Selection, check_columns, selection_sql

VERSION_FORMAT = "corpus-version/1"
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
class ShardRef:
    """One shard as a table reader needs it."""

    name: str
    bucket: str
    docs: int
    tokens: int
    sha256: str
    metadata: Path
    meta: Path

    @property
    def metadata_sha256(self) -> str:
        """From the shard's ``.meta.json`` (written by write_shards, vouched for by the manifest)."""
        return json.loads(self.meta.read_text())["metadata_sha256"]


@dataclass(frozen=True)
class Version:
    """An opened build snapshot or version: the base snapshot, its shards, and the selection bits
    (``None`` for the base itself, which selects everything)."""

    base_dir: Path
    base: SnapshotManifest
    shards: tuple[ShardRef, ...]
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
    def live_shards(self) -> tuple[ShardRef, ...]:
        """The shards whose files are still there (not tombstoned)."""
        return tuple(s for s in self.shards if s.name not in self.tombstones)

    def selected(self, shard: ShardRef) -> np.ndarray:
        if self.manifest is None:
            return np.ones(shard.docs, dtype=bool)
        if shard.name in self.tombstones:
            return np.zeros(shard.docs, dtype=bool)
        entry = next(s for s in self.manifest["shards"] if s["name"] == shard.name)
        data = (self.dir / entry["bitmap"]).read_bytes()
        if sha256_hex(data) != entry["bitmap_sha256"]:
            raise UserError(f"version {self.dir}: bitmap of shard {shard.name} does not match its digest")
        return unpack_bits(data, shard.docs)

    def selected_counts(self) -> Iterator[tuple[ShardRef, int, int]]:
        """(shard, selected docs, selected tokens) as the manifest records them."""
        if self.manifest is None:
            for s in self.shards:
                yield s, s.docs, s.tokens
            return
        by_name = {s["name"]: s for s in self.manifest["shards"]}
        for s in self.shards:
            yield s, by_name[s.name]["selected_docs"], by_name[s.name]["selected_tokens"]


def _shard_refs(snap_dir: Path, m: SnapshotManifest) -> tuple[ShardRef, ...]:
    refs = []
    for s in m.shards:
        name = Path(s.path).name.removesuffix(".bin")
        if "metadata" not in s.files:
            raise UserError(
                f"snapshot {m.snapshot_id} has no metadata table (shard {name}): it was built before "
                f"write_shards wrote one; rebuild it to query or select from it"
            )
        refs.append(
            ShardRef(
                name,
                s.bucket,
                s.docs,
                s.tokens,
                s.sha256,
                snap_dir / s.files["metadata"],
                snap_dir / s.files["meta"],
            )
        )
    return tuple(refs)


def is_version(ref: Path) -> bool:
    """Whether ``ref`` is a version directory (or its manifest), as ``corpus version`` writes them, or
    a build directory (whose ``snapshot/`` is its default version)."""
    ref = Path(ref)
    paths = [ref] if ref.name == MANIFEST else [ref / MANIFEST, ref / SNAPSHOT_DIR / MANIFEST]
    for path in paths:
        if path.is_file():
            try:
                return json.loads(path.read_text()).get("format") == VERSION_FORMAT
            except (OSError, ValueError, AttributeError):
                return False
    return False


def open_version(ref: Path) -> Version:
    """A build directory (its ``snapshot/``), a snapshot directory or a version directory."""
    ref = Path(ref)
    for candidate in (ref / MANIFEST, ref / SNAPSHOT_DIR / MANIFEST):
        if candidate.is_file():
            data = _read_json(candidate)
            break
    else:
        raise UserError(f"{ref} is neither a build, a snapshot nor a version (no {MANIFEST})")
    if data.get("format") == VERSION_FORMAT:
        vdir = candidate.parent
        digested = {k: v for k, v in data.items() if k not in ("snapshot_id", "run_info")}
        if json_digest(digested) != data.get("snapshot_id"):
            raise UserError(f"version {vdir}: manifest does not match its id {data.get('snapshot_id')}")
        base_dir = Path(data["run_info"]["base"])
        if not base_dir.is_absolute():
            base_dir = (vdir / base_dir).resolve()
        if not (base_dir / MANIFEST).is_file():
            raise UserError(f"version {vdir}: its build's snapshot is not at {base_dir} (moved or deleted)")
        base = _open_base(base_dir)
        refs = _shard_refs(base_dir, base)
        _check_shards(vdir, data, refs)
        if base.snapshot_id != data["base_snapshot_id"]:
            raise UserError(
                f"version {vdir}: its build at {base_dir} has changed (snapshot {base.snapshot_id}, "
                f"the version was made from {data['base_snapshot_id']})"
            )
        return Version(base_dir, base, refs, data, vdir)
    base = _open_base(candidate.parent)
    return Version(candidate.parent, base, _shard_refs(candidate.parent, base))


def _open_base(snap_dir: Path) -> SnapshotManifest:
    try:
        return SnapshotManifest.from_dict(_read_json(snap_dir / MANIFEST))
    except (KeyError, ValueError) as e:
        raise UserError(f"{snap_dir / MANIFEST}: {e}") from None


def _check_shards(vdir: Path, data: dict[str, Any], refs: tuple[ShardRef, ...]) -> None:
    """Refuse a version whose build's shards are not the ones it selected from (moved or changed)."""
    have = {r.name: r for r in refs}
    gone = {t["name"] for t in data.get("tombstones", [])}
    for s in data["shards"]:
        if s["name"] in gone:
            continue
        r = have.get(s["name"])
        if r is None:
            raise UserError(f"version {vdir}: shard {s['name']} is not in its build any more")
        if (r.sha256, r.metadata_sha256) != (s["sha256"], s["metadata_sha256"]):
            raise UserError(f"version {vdir}: shard {s['name']} of its build has changed (digests differ)")
        if not r.metadata.is_file():
            raise UserError(f"version {vdir}: shard {s['name']}'s metadata {r.metadata} is missing")


def connect(version: Version) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the table ``docs`` (one row per stored document; on a version, with a
    boolean ``selected``). Files are read where they lie, never loaded whole."""
    con = duckdb.connect()
    files = [str(s.metadata) for s in version.live_shards]
    if not files:
        raise UserError(f"snapshot {version.snapshot_id} has no shards")
    con.read_parquet(files, union_by_name=True).create_view("stored")
    copies = [
        str(version.base_dir / p["path"])
        for p in version.base.extra.get("artifacts", {}).get("copies", {}).get("parts", [])
    ]
    if copies:
        con.read_json(copies, format="newline_delimited", columns=COPY_COLUMNS).create_view("copies")
    if version.manifest is None:
        con.execute("CREATE VIEW docs AS SELECT * FROM stored")
    else:
        bits = pa.table(
            {
                "shard": pa.array([s.name for s in version.live_shards for _ in range(s.docs)], pa.string()),
                "index": pa.array(
                    np.concatenate([np.arange(s.docs) for s in version.live_shards]), pa.int64()
                ),
                "selected": pa.array(np.concatenate([version.selected(s) for s in version.live_shards])),
            }
        )
        con.register("selection_bits", bits)
        con.execute(
            'CREATE VIEW docs AS SELECT stored.*, b.selected FROM stored JOIN selection_bits b USING (shard, "index")'
        )
    return con


def columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("DESCRIBE stored").fetchall()]


def evaluate(
    version: Version, selection: Selection, policy_reasons: Counter | None = None
) -> dict[str, np.ndarray]:
    """The selected bits of every shard of the build under ``selection`` (a version's own selection is
    not applied first: a version is always a selection of the build, never of another version)."""
    base = Version(version.base_dir, version.base, version.live_shards)
    return select_rows(connect(base), selection, {s.name: s.docs for s in base.shards}, policy_reasons)


def select_rows(
    con: duckdb.DuckDBPyConnection,
    selection: Selection,
    docs: dict[str, int],
    policy_reasons: Counter | None = None,
) -> dict[str, np.ndarray]:
    """Run ``selection`` over the table ``stored`` of ``con``: per shard (``docs``: its document
    count), one bool per document. With a policy, ``policy_reasons`` (when given) is filled with the
    number of stored documents the policy rejects, by the first check each fails."""
    cols = columns(con)
    check_columns(selection, cols)
    if not con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'copies'").fetchall()[0][0]:
        empty = ", ".join(f"NULL::{t} AS {c}" for c, t in COPY_COLUMNS.items())
        con.execute(f"CREATE VIEW copies AS SELECT {empty} WHERE FALSE")  # a build without exact copies
    table = "stored"
    if selection.policy is not None:
        con.register("policy_verdicts", policy_verdicts(con, selection.policy, cols, policy_reasons))
        con.execute(
            "CREATE OR REPLACE VIEW judged AS SELECT stored.*, v.policy_pass FROM stored "
            'JOIN policy_verdicts v USING (shard, "index")'
        )
        table = "judged"
    sql, params = selection_sql(selection, table)
    table = con.execute(sql, params).fetchnumpy()
    shard_col, index_col = table["shard"], table["index"]
    sel_col = table["selected"].astype(bool)
    out: dict[str, np.ndarray] = {}
    for name, n in sorted(docs.items()):
        mask = shard_col == name
        bits = np.zeros(n, dtype=bool)
        bits[index_col[mask]] = sel_col[mask]
        out[name] = bits
    return out


#: rows the policy judges at a time (a batch of the table in memory, never the table)
POLICY_BATCH_ROWS = 65_536


def policy_verdicts(
    con: duckdb.DuckDBPyConnection, policy: PolicyConfig, cols: list[str], reasons: Counter | None = None
) -> pa.Table:
    """(shard, index, policy_pass) for every row of ``stored``: :func:`corpus.policy.decide_rows` on the
    rows' language, tier and scores (a null score counts as its check's missing value, as an absent one
    on the document: :func:`corpus.policy.missing_values`), read in batches; each rejection's reason
    counted into ``reasons``."""
    missing = missing_values(policy)
    scores = sorted(set(missing) & set(cols))
    quoted = {c: '"' + c.replace('"', '""') + '"' for c in scores}
    select = ", ".join(
        [
            "shard",
            '"index"',
            "coalesce(nullif(lang, ''), 'und') AS lang",
            "coalesce(lang_confidence, 0.0)::DOUBLE AS lang_confidence",
            "coalesce(tier, '') AS tier",
            *(f"coalesce({q}, '{missing[c]}'::DOUBLE)::DOUBLE AS {q}" for c, q in quoted.items()),
        ]
    )
    reader = con.sql(f"SELECT {select} FROM stored").to_arrow_reader(POLICY_BATCH_ROWS)
    judged = []  # per batch: its own shard and index columns, and the verdicts (a bit a row)
    for batch in reader:
        names, first = decide_rows(
            batch.column("lang").to_numpy(zero_copy_only=False),
            batch.column("lang_confidence").to_numpy(),
            batch.column("tier").to_numpy(zero_copy_only=False),
            {c: batch.column(c).to_numpy() for c in scores},
            policy,
        )
        if reasons is not None:
            for i, n in zip(*np.unique(first[first >= 0], return_counts=True), strict=True):
                reasons[names[i]] += int(n)
        judged.append(
            pa.record_batch(
                [batch.column("shard"), batch.column("index"), pa.array(first < 0, pa.bool_())],
                names=["shard", "index", "policy_pass"],
            )
        )
    schema = pa.schema([("shard", pa.string()), ("index", pa.int64()), ("policy_pass", pa.bool_())])
    return pa.Table.from_batches(judged, schema=schema) if judged else schema.empty_table()


def token_counts(version: Version, shard: ShardRef) -> np.ndarray:
    con = duckdb.connect()
    rows = con.execute(
        'SELECT tokens FROM read_parquet(?) ORDER BY "index"', [str(shard.metadata)]
    ).fetchnumpy()
    return rows["tokens"]


def _bits_for(name: str, docs: int, bits: dict[str, np.ndarray], gone: set[str]) -> np.ndarray:
    """A shard's selection: none at all once it is tombstoned."""
    return np.zeros(docs, dtype=bool) if name in gone else bits[name]


def version_manifest(
    version: Version,
    selection: Selection,
    bits: dict[str, np.ndarray],
    tombstones: list[dict[str, Any]],
    policy_reasons: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The manifest (without ``run_info``) of the version selecting ``bits`` of ``version``'s build;
    a tombstoned shard selects nothing (its files may be gone). ``policy_reasons``: the stored documents
    its policy rejects, by reason (what the yield alarms and the data card read)."""
    shards = []
    gone = {t["name"] for t in tombstones}
    for s in version.shards:
        sel = _bits_for(s.name, s.docs, bits, gone)
        selected_tokens = int(token_counts(version, s)[sel].sum()) if sel.any() else 0
        shards.append(
            {
                "name": s.name,
                "bucket": s.bucket,
                "sha256": s.sha256,
                "metadata_sha256": s.metadata_sha256 if s.name not in gone else None,
                "docs": s.docs,
                "selected_docs": int(sel.sum()),
                "selected_tokens": selected_tokens,
                "bitmap": f"{SELECTION_DIR}/{s.name}{BITS_SUFFIX}",
                "bitmap_sha256": sha256_hex(pack_bits(sel)),
            }
        )
    digested = {
        "format": VERSION_FORMAT,
        "base_snapshot_id": version.base.snapshot_id,
        "selection": selection.canonical(),
        "selection_sha256": selection.digest,
        "shards": shards,
        "tombstones": sorted(tombstones, key=lambda t: t["name"]),
    }
    if policy_reasons is not None:
        digested["policy_reasons"] = dict(sorted(policy_reasons.items()))
    return {**digested, "snapshot_id": json_digest(digested)}


def kept_table(
    con: duckdb.DuckDBPyConnection, version: Version, bits: dict[str, np.ndarray]
) -> dict[str, dict[str, dict[str, int]]]:
    """Per group (bucket, source, lang), per value: documents and tokens stored and kept by ``bits``,
    over the live shards of ``con``'s table ``stored`` (one pass a group): a --dry-run's table."""
    shards = version.live_shards
    con.register(
        "planned_bits",
        pa.table(
            {
                "shard": pa.array([s.name for s in shards for _ in range(s.docs)], pa.string()),
                "index": pa.array(np.concatenate([np.arange(s.docs) for s in shards]), pa.int64()),
                "kept": pa.array(np.concatenate([bits[s.name] for s in shards])),
            }
        ),
    )
    con.register(
        "shard_buckets", pa.table({"shard": [s.name for s in shards], "bucket": [s.bucket for s in shards]})
    )
    out: dict[str, dict[str, dict[str, int]]] = {}
    for group in GROUPS:
        col = "b.bucket" if group == "bucket" else f"s.{group}"
        rows = con.execute(
            f"SELECT {col} AS g, count(*), coalesce(sum(s.tokens), 0), count(*) FILTER (WHERE p.kept), "
            "coalesce(sum(s.tokens) FILTER (WHERE p.kept), 0) FROM stored s "
            'JOIN planned_bits p USING (shard, "index") JOIN shard_buckets b USING (shard) GROUP BY 1'
        ).fetchall()
        out[group] = {
            str(g): {"stored_docs": int(n), "stored_tokens": int(t), "docs": int(k), "tokens": int(kt)}
            for g, n, t, k, kt in sorted(rows, key=lambda r: str(r[0]))
        }
    return out


def write_version(
    version: Version,
    manifest: dict[str, Any],
    bits: dict[str, np.ndarray],
    out: Path,
    base_dir: Path,
    run_info: dict[str, Any] | None = None,
) -> None:
    """Bitmaps first, the manifest last (its presence means complete); nothing of the build is touched.
    ``run_info`` (not covered by the id) records where the build lives and facts such as dates."""
    out.mkdir(parents=True, exist_ok=True)
    (out / SELECTION_DIR).mkdir(exist_ok=True)
    gone = {t["name"] for t in manifest["tombstones"]}
    for s in manifest["shards"]:
        atomic_write_bytes(out / s["bitmap"], pack_bits(_bits_for(s["name"], s["docs"], bits, gone)))
    run_info = {**(run_info or {}), "base": os.path.relpath(base_dir.resolve(), out.resolve())}
    atomic_write_bytes(out / MANIFEST, canonical_json({**manifest, "run_info": run_info}) + b"\n")


def _groups(shard: ShardRef) -> dict[str, np.ndarray]:
    """Per document of one shard: its source, lang and tokens (read from the shard's metadata file;
    a shard deleted under a tombstone counts as source and lang "(tombstoned)", its tokens unknown)."""
    if not shard.metadata.is_file():
        unknown = np.full(shard.docs, "(tombstoned)", dtype=object)
        return {"source": unknown, "lang": unknown, "tokens": np.zeros(shard.docs, dtype=np.int64)}
    rows = (
        duckdb.connect()
        .execute('SELECT source, lang, tokens FROM read_parquet(?) ORDER BY "index"', [str(shard.metadata)])
        .fetchnumpy()
    )
    return {"source": rows["source"], "lang": rows["lang"], "tokens": rows["tokens"]}


def diff_versions(a: Version, b: Version) -> dict[str, Any]:
    """What changes from version ``a`` to version ``b`` of one build: the selection's keys, the
    tombstones, and the documents and tokens added and removed per bucket, source and language."""
    if a.base.snapshot_id != b.base.snapshot_id:
        raise UserError(
            f"versions of different builds ({a.base.snapshot_id} and {b.base.snapshot_id}): "
            f"compare the builds with corpus diff BUILD_A BUILD_B"
        )
    nothing = Selection().canonical()  # the build itself, compared key by key as the empty selection
    sel_a = (a.manifest or {}).get("selection", nothing)
    sel_b = (b.manifest or {}).get("selection", nothing)
    keys = sorted(sel_a.keys() | sel_b.keys())
    selection = [
        {"key": k, "a": sel_a.get(k), "b": sel_b.get(k)} for k in keys if sel_a.get(k) != sel_b.get(k)
    ]
    if (a.manifest is None) != (b.manifest is None):
        selection.insert(
            0,
            {
                "key": "(version)",
                "a": "the build" if a.manifest is None else "a selection",
                "b": "the build" if b.manifest is None else "a selection",
            },
        )
    tomb_a, tomb_b = a.tombstones, b.tombstones
    delta: dict[str, dict[str, dict[str, int]]] = {"bucket": {}, "source": {}, "lang": {}}
    for shard in a.shards:
        bits_a, bits_b = a.selected(shard), b.selected(shard)
        if np.array_equal(bits_a, bits_b):
            continue
        groups = _groups(shard)
        for sign, mask in (("added", bits_b & ~bits_a), ("removed", bits_a & ~bits_b)):
            for axis in ("bucket", "source", "lang"):
                keys_of = (
                    np.full(shard.docs, shard.bucket, dtype=object) if axis == "bucket" else groups[axis]
                )
                for key in sorted(set(keys_of[mask].tolist())):
                    m = mask & (keys_of == key)
                    cell = delta[axis].setdefault(
                        str(key), {"added_docs": 0, "added_tokens": 0, "removed_docs": 0, "removed_tokens": 0}
                    )
                    cell[f"{sign}_docs"] += int(m.sum())
                    cell[f"{sign}_tokens"] += int(groups["tokens"][m].sum())
    return {
        "a": a.snapshot_id,
        "b": b.snapshot_id,
        "identical": a.snapshot_id == b.snapshot_id,
        "selection": selection,
        "tombstones": {
            "added": [tomb_b[n] for n in sorted(tomb_b.keys() - tomb_a.keys())],
            "removed": [tomb_a[n] for n in sorted(tomb_a.keys() - tomb_b.keys())],
        },
        "documents": {axis: dict(sorted(rows.items())) for axis, rows in delta.items()},
    }


def diff_text(d: dict[str, Any]) -> str:
    lines = [f"a {d['a']}", f"b {d['b']}", "identical" if d["identical"] else "different"]
    for c in d["selection"]:
        lines.append(f"selection {c['key']}: {json.dumps(c['a'])} -> {json.dumps(c['b'])}")
    for t in d["tombstones"]["added"]:
        lines.append(f"tombstone added: {t['name']} ({t['reason']})")
    for t in d["tombstones"]["removed"]:
        lines.append(f"tombstone removed: {t['name']}")
    for axis, rows in d["documents"].items():
        for key, c in rows.items():
            lines.append(
                f"{axis} {key}: +{c['added_docs']:,} docs / +{c['added_tokens']:,} tokens, "
                f"-{c['removed_docs']:,} docs / -{c['removed_tokens']:,} tokens"
            )
    return "\n".join(lines)


GROUPS = ("bucket", "source", "lang")


@dataclass(frozen=True)
class Planned:
    """A version worked out but not written: its bits, its manifest and what it keeps."""

    version: Version
    bits: dict[str, np.ndarray]
    manifest: dict[str, Any]
    #: per group (bucket, source, lang), per value: docs and tokens kept, and stored
    kept: dict[str, dict[str, dict[str, int]]]

    @property
    def empty_buckets(self) -> list[str]:
        """Buckets the build has of which the selection keeps nothing."""
        return sorted(b for b, c in self.kept["bucket"].items() if c["docs"] == 0 and c["stored_docs"] > 0)


def plan_version(build: Path, selection: Selection) -> Planned:
    """What ``corpus version BUILD`` with ``selection`` would write (a version of a version keeps its
    tombstones)."""
    version = open_version(build)
    base = Version(version.base_dir, version.base, version.live_shards)
    con = connect(base)  # one connection: the table's files are opened once
    reasons: Counter = Counter()
    bits = select_rows(con, selection, {s.name: s.docs for s in base.shards}, reasons)
    kept = kept_table(con, base, bits)
    manifest = version_manifest(
        version,
        selection,
        bits,
        list(version.tombstones.values()),
        dict(reasons) if selection.policy is not None else None,
    )
    return Planned(version, bits, manifest, kept)


def make_version(build: Path, selection: Selection, out: Path) -> Planned:
    """Write the version (refused, before anything is written, when it empties a bucket)."""
    planned = plan_version(build, selection)
    if planned.empty_buckets:
        raise UserError(
            f"the selection keeps no document of bucket(s) {', '.join(planned.empty_buckets)}, which the build "
            f"has; nothing written (check it with --dry-run)"
        )
    write_version(planned.version, planned.manifest, planned.bits, Path(out), planned.version.base_dir)
    return planned


def kept_text(kept: dict[str, dict[str, dict[str, int]]]) -> str:
    """The kept table as aligned text (a --dry-run, and after a version is written)."""
    lines = []
    for g, rows in kept.items():
        lines.append(f"{g:<24} {'docs kept':>12} {'of':>10} {'tokens kept':>14} {'of':>14}")
        for k, c in rows.items():
            lines.append(
                f"  {k:<22} {c['docs']:>12,} {c['stored_docs']:>10,} {c['tokens']:>14,} {c['stored_tokens']:>14,}"
            )
    return "\n".join(lines)
