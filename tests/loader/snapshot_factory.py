"""Real snapshots for loader tests: Megatron shards written with ``corpus.formats.megatron`` and a SnapshotManifest.

``write_id_snapshot`` makes every token of the snapshot a distinct id (int32, EOS = 0 never used by a
document), so a test can tell exactly which token was delivered how often. ``write_text_snapshot``
tokenizes real text with the project's pinned HF tokenizer into uint16 shards.

Every shard also gets its per-document metadata table, as write_shards writes it, from lineage records
made up here (:func:`lineage_for`: hosts, languages and quality scores that vary by document), so a test
can make versions of these snapshots with ``corpus.version``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from corpus.formats.block_layout import FIXED, BlockLayout, LayoutHasher
from corpus.formats.megatron import BLOCK_SIZE, block_file_bytes, write_indexed_shard
from corpus.formats.metadata import metadata_table, write_metadata
from corpus.model import SnapshotManifest, SnapshotShard
from corpus.model.digest import file_sha256
from loader import SnapshotLoader, load_manifest

EOS = 0
#: The mixture and epoch caps most loader tests use on the id snapshot's three buckets.
MIXTURE = {"code": 0.2, "web": 0.5, "wiki": 0.3}
CAPS = {"code": 1, "web": 1, "wiki": 2}
#: The loader settings (examples/train.py's flags, see :func:`flags`) of the training runs on the id snapshot.
TRAIN_SETTINGS = dict(mixture=MIXTURE, epoch_caps=CAPS, seq_len=16, batch_size=2, run_len=2, chunk_tokens=24)
#: The tokenizer sha256 the recipe snapshot's manifest records (recipes are pinned to it).
RECIPE_TOKENIZER = "5a" * 32
ROOT = Path(__file__).resolve().parents[2]
#: ``corpus mixture-audit``'s flags for the stated tolerance (0.02 absolute): 8 ranks, 2,000 steps, runs of 4.
AUDIT_2000_STEPS_ON_8 = dict(world=8, steps=2000, seq_len=16, batch_size=2, run_len=4, seed=3)


HOSTS = ("a.example.org", "b.example.org", "c.example.net")
LANGS = ("en", "fr")


def small_loader(root: Path, rank: int, world: int, **kw) -> SnapshotLoader:
    """A loader of a factory snapshot in small steps (16-token sequences, 24-token chunks), what the
    fault and prefetch tests read; ``kw`` overrides any setting."""
    params = dict(
        mixture=MIXTURE,
        seed=4,
        seq_len=16,
        batch_size=2,
        epoch_caps=CAPS,
        run_len=2,
        chunk_tokens=24,
        max_skip_fraction=0.2,
    )
    return SnapshotLoader(root, dp_rank=rank, dp_world=world, **{**params, **kw})


def lineage_for(bucket: str, shard: int, doc: int) -> dict:
    """A made-up lineage record for document ``doc`` of shard number ``shard`` (in manifest order):
    host, language and quality cycle with the document."""
    return {
        "doc_id": f"{shard:016x}{doc:016x}",
        "source": bucket,
        "source_tier": "web",
        "url": f"https://{HOSTS[doc % 3]}/{bucket}/{shard}/{doc}",
        "crawl_date": "2026-03-01",
        "lang": LANGS[doc % 2],
        "lang_confidence": 0.9,
        "scores": {"quality": ((doc * 37 + shard * 11) % 100) / 100},
        "annotations": [],
    }


def write_lineage(root: Path, name: str, records: list[dict]) -> dict[str, str]:
    """A shard's lineage files as a snapshot holds them (one JSON record per document, and the byte
    offsets of the records), each record with a made-up dup cluster; the manifest's ``files`` entries."""
    (root / "lineage").mkdir(exist_ok=True)
    lines = [
        json.dumps({**r, "dup_cluster_id": f"cluster-{r['doc_id'][-4:]}", "dup_cluster_size": 1}).encode()
        + b"\n"
        for r in records
    ]
    (root / "lineage" / f"{name}.jsonl").write_bytes(b"".join(lines))
    np.save(root / "lineage" / f"{name}.offsets.npy", np.cumsum([0, *map(len, lines)]).astype(np.int64))
    return {"lineage": f"lineage/{name}.jsonl", "lineage_offsets": f"lineage/{name}.offsets.npy"}


def write_snapshot(
    root: Path,
    buckets: dict[str, list[list[np.ndarray]]],
    dtype: str,
    eos_id: int,
    tokenizer: dict | None = None,
    block_size: int = BLOCK_SIZE,
    lineage: bool = False,
    inline_block_digests: bool = False,
    block_layout: str = FIXED,
) -> SnapshotManifest:
    """Write ``buckets`` (bucket -> shards -> documents) under ``root`` and its manifest.json.

    Shards carry block digests of ``block_size`` bytes in a ``.blocks`` file (``inline_block_digests``:
    listed in the manifest, as snapshots did before the file), fixed blocks over the file as write_shards
    wrote them before version 11, or each document's own (``block_layout="documents"``, as it writes them
    now); ``block_size=0`` writes a manifest as snapshots did before block digests (whole-file sha256 only).
    ``lineage``: also the lineage files ``corpus trace`` reads.
    """
    root.mkdir(parents=True, exist_ok=True)
    shards = []
    for bucket in sorted(buckets):
        for n, docs in enumerate(buckets[bucket]):
            prefix = root / "shards" / bucket / f"{bucket}-{n:05d}"
            bin_path, idx_path = write_indexed_shard(prefix, docs, dtype)
            name = prefix.name
            (root / "metadata").mkdir(exist_ok=True)
            records = [lineage_for(bucket, len(shards), d) for d in range(len(docs))]
            write_metadata(
                metadata_table(records, name, [d.shape[0] for d in docs]),
                root / "metadata" / f"{name}.parquet",
            )
            meta = prefix.with_suffix(".meta.json")
            meta.write_text(
                json.dumps({"metadata_sha256": file_sha256(root / "metadata" / f"{name}.parquet")})
            )
            digests = []
            if block_size:
                offsets = np.cumsum([0] + [d.nbytes for d in docs[:-1]]) if docs else np.zeros(0, np.int64)
                layout = BlockLayout.of(
                    block_layout,
                    block_size,
                    bin_path.stat().st_size,
                    offsets,
                    [d.shape[0] for d in docs],
                    np.dtype(dtype).itemsize,
                )
                hasher = LayoutHasher(layout)
                hasher.update(bin_path.read_bytes())
                digests = hasher.block_digests()
            blocks: dict[str, str] = {}
            if block_size and not inline_block_digests:
                prefix.with_suffix(".blocks").write_bytes(block_file_bytes(digests))
                blocks = {"blocks": str(prefix.with_suffix(".blocks").relative_to(root))}
            shards.append(
                SnapshotShard(
                    path=str(bin_path.relative_to(root)),
                    sha256=file_sha256(bin_path),
                    bucket=bucket,
                    docs=len(docs),
                    tokens=int(sum(d.shape[0] for d in docs)),
                    files={
                        "idx": str(idx_path.relative_to(root)),
                        "meta": str(meta.relative_to(root)),
                        "metadata": f"metadata/{name}.parquet",
                        **(write_lineage(root, name, records) if lineage else {}),
                        **blocks,
                    },
                    block_size=block_size,
                    block_sha256=tuple(digests) if inline_block_digests else (),
                    blocks_sha256=file_sha256(root / blocks["blocks"]) if blocks else "",
                    block_layout=block_layout if block_size else FIXED,
                )
            )
    manifest = SnapshotManifest(
        shards=tuple(shards),
        stage_versions={"test": {"version": "1"}},
        seed=0,
        token_dtype=dtype,
        tokenizer={"eos_id": eos_id, **(tokenizer or {})},
    )
    (root / "manifest.json").write_text(json.dumps(manifest.to_dict(), indent=1))
    return manifest


def write_id_snapshot(
    root: Path,
    shards_per_bucket: dict[str, int],
    seed: int = 0,
    doc_len: tuple[int, int] = (1, 40),
    docs_per_shard: tuple[int, int] = (1, 12),
    block_size: int = BLOCK_SIZE,
    tokenizer: dict | None = None,
    lineage: bool = False,
    inline_block_digests: bool = False,
    block_layout: str = FIXED,
) -> SnapshotManifest:
    """Shards whose tokens are the distinct ids 1, 2, 3, ... (documents of random length); ``tokenizer``:
    more facts for the manifest's tokenizer (a ``sha256`` for a recipe to be pinned to); ``lineage``: write
    lineage files too; ``inline_block_digests``, ``block_layout``: as :func:`write_snapshot`."""
    rng = np.random.default_rng(seed)
    next_id = 1
    buckets: dict[str, list[list[np.ndarray]]] = {}
    for bucket in sorted(shards_per_bucket):
        buckets[bucket] = []
        for _ in range(shards_per_bucket[bucket]):
            docs = []
            for _ in range(int(rng.integers(*docs_per_shard, endpoint=True))):
                n = int(rng.integers(*doc_len, endpoint=True))
                docs.append(np.arange(next_id, next_id + n, dtype=np.int32))
                next_id += n
            buckets[bucket].append(docs)
    return write_snapshot(
        root,
        buckets,
        "int32",
        EOS,
        tokenizer,
        block_size=block_size,
        lineage=lineage,
        inline_block_digests=inline_block_digests,
        block_layout=block_layout,
    )


def write_lineage_snapshot(root: Path) -> Path:
    """The id snapshot's three buckets at ``root``, its manifest with the recipe tokenizer's sha256 (for
    recipes to pin), its shards with lineage files (what trace answers from); ``root``."""
    write_id_snapshot(
        root, {"code": 3, "web": 7, "wiki": 5}, tokenizer={"sha256": RECIPE_TOKENIZER}, lineage=True
    )
    return root


def expected_tokens(root: Path, manifest: SnapshotManifest, caps: dict[str, int]) -> Counter:
    """Every token of every bucket epoch up to its cap, plus one EOS per document per epoch."""
    from corpus.formats.megatron import read_index

    out: Counter = Counter()
    for s in manifest.shards:
        idx = read_index(root / s.files["idx"])
        toks = np.fromfile(root / s.path, dtype=idx.dtype)
        cap = caps[s.bucket]
        out.update({int(t): cap for t in toks})
        out[EOS] += cap * s.docs
    return out


def bucket_token_ids(root: Path, manifest: SnapshotManifest, bucket: str) -> set[int]:
    """The distinct ids of one bucket's tokens (in an id snapshot every token is distinct)."""
    return {
        int(t)
        for s in manifest.shards
        if s.bucket == bucket
        for t in np.fromfile(root / s.path, dtype=manifest.token_dtype)
    }


def write_text_snapshot(
    root: Path, tokenizer_path: Path, texts: dict[str, list[str]], docs_per_shard: int
) -> SnapshotManifest:
    """Real text through the pinned tokenizer, uint16 shards of ``docs_per_shard`` documents per bucket."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    eos_id = tok.token_to_id("<|endoftext|>")
    buckets = {}
    for bucket, docs in texts.items():
        ids = [np.array(e.ids, dtype=np.uint16) for e in tok.encode_batch(docs)]
        buckets[bucket] = [ids[i : i + docs_per_shard] for i in range(0, len(ids), docs_per_shard)]
    return write_snapshot(root, buckets, "uint16", eos_id, {"path": tokenizer_path.name})


def lockstep(loaders: list, steps: int | None = None) -> Iterator[list]:
    """Step every rank together (as training does) until all are done or ``steps`` steps ran: each step's
    batches of the ranks that still had one."""
    n = 0
    while steps is None or n < steps:
        batches = [ld.next_batch() for ld in loaders]
        if all(b is None for b in batches):
            return
        yield [b for b in batches if b is not None]
        n += 1


def consume(loaders: list, delivered: Counter, steps: int | None = None) -> int:
    """Step every rank together until all are done or ``steps`` steps ran, counting the delivered tokens."""
    n = 0
    for batches in lockstep(loaders, steps):
        for b in batches:
            delivered.update(b.tokens[b.loss_mask].tolist())
        n += 1
    return n


def checkpoint(loaders: list) -> dict:
    """The run's loader record from every rank's local state (what a training script saves)."""
    return loaders[0].global_record([ld.local_state() for ld in loaders])


def through_worlds(make, root: Path, world: int, plan: list[tuple[int, int | None]]) -> Counter:
    """Tokens a run delivers when it starts on ``world`` ranks and, for each (new world, steps) of
    ``plan``, runs ``steps`` steps (None: to the end), checkpoints and resumes on the new world."""
    delivered: Counter = Counter()
    loaders = [make(root, r, world) for r in range(world)]
    for new_world, steps in plan:
        consume(loaders, delivered, steps=steps if steps is not None else 10**9)
        record = checkpoint(loaders)
        loaders = [make(root, r, new_world) for r in range(new_world)]
        for ld in loaders:
            ld.load_record(record)
    consume(loaders, delivered)
    return delivered


def stream_ids(root: Path, shard) -> np.ndarray:
    """One shard's stream as the loader reads it (appended EOS): its documents, each followed by EOS."""
    from corpus.formats.megatron import read_index

    idx = read_index(root / shard.files["idx"])
    toks = np.fromfile(root / shard.path, dtype=idx.dtype).astype(np.int64)
    ends = np.cumsum(idx.lengths.astype(np.int64))
    return np.insert(toks, ends, EOS)


def owed_tokens(root: Path, record: dict) -> Counter:
    """What exactly-once says had to be delivered by the time of ``record`` (a global loader record, all
    ranks' cursors): every epoch some rank of a bucket has opened, each stream position once, less the
    unread rest of the open epochs; a bucket nobody has left open was read to its cap. Comparing it with
    what was delivered checks every stream position of every bucket epoch, whatever the resumes in between."""
    from loader.state import Plan, remaining_pieces, stream_layout

    manifest = SnapshotManifest.from_dict(json.loads((root / "manifest.json").read_text()))
    layout = stream_layout(
        manifest.shards,
        int(record["seed"]),
        int(record["chunk_tokens"]),
        record["epoch_caps"],
        bool(record["append_eos"]),
        int(record["plan"]["world"]),
        cuts=record["chunk_cuts"],
    )
    plan = Plan.from_dict(record["plan"])
    cursors = [{b: tuple(c) for b, c in rank.items()} for rank in record["cursors"]]
    streams = {i: stream_ids(root, s) for i, s in enumerate(manifest.shards)}
    out: Counter = Counter()
    for bucket, shards in layout.buckets.items():
        pieces, last = remaining_pieces(layout, plan, cursors, bucket)
        epochs = last + 1 if last is not None else layout.cap(bucket)
        for i, _, _ in shards:
            out.update({int(t): epochs for t in np.unique(streams[i]) if t != EOS})
            out[EOS] += epochs * int(np.count_nonzero(streams[i] == EOS))
        for p in pieces:
            out.subtract(streams[p.shard][p.start : p.end].tolist())
    assert min(out.values(), default=0) >= 0, "the record's unread pieces overlap"
    return +out


def inline_table(table: dict) -> str:
    """A TOML inline table: ``{ a = 1, b = 0.5 }``."""
    return "{ " + ", ".join(f"{k} = {v}" for k, v in table.items()) + " }"


def phase_toml(name: str, tokens: int, seq_len: int, weights: dict[str, float], **keys: object) -> str:
    """One ``[[phases]]`` table of a recipe (a blank line before it): its name, token budget, sequence length
    and bucket weights, then ``keys`` in their order (a dict as an inline table)."""
    lines = ["", "[[phases]]", f'name = "{name}"', f"tokens = {tokens}", f"seq_len = {seq_len}"]
    lines.append(f"weights = {inline_table(weights)}")
    lines += [f"{k} = {inline_table(v) if isinstance(v, dict) else v}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


#: Three phases on the recipe snapshot (positions per epoch: code 484, web 832, wiki 873): shorter sequences
#: in the middle, web capped from the second phase on, code's one epoch raised to two for the last.
PHASES = "".join(
    [
        phase_toml(
            "main", 1000, 16, {"code": 0.2, "web": 0.5, "wiki": 0.3}, max_epochs={"code": 1}, run_len=2
        ),
        phase_toml("mid", 1200, 8, {"web": 0.4, "wiki": 0.6}, max_epochs={"web": 2}),
        phase_toml("anneal", 600, 16, {"code": 0.5, "wiki": 0.5}, max_epochs={"code": 2}),
    ]
)


def recipe_toml(
    snapshot_id: str, phases: str = PHASES, tokenizer: str = RECIPE_TOKENIZER, seed: int = 5
) -> str:
    return (
        f'recipe_id = "test-recipe"\nsnapshot_id = "{snapshot_id}"\ntokenizer_sha256 = "{tokenizer}"\n'
        f"seed = {seed}\n{phases}"
    )


def damaged_copy(snapshot: Path, root: Path) -> tuple[Path, int]:
    """A copy of ``snapshot`` at ``root`` with one byte of one web shard flipped (what the loader must
    detect and substitute); the copy and the damaged shard's manifest index."""
    shutil.copytree(snapshot, root)
    manifest = load_manifest(root)[0]
    bad = next(i for i, s in enumerate(manifest.shards) if s.bucket == "web" and s.tokens > 4)
    path = root / manifest.shards[bad].path
    data = bytearray(path.read_bytes())
    data[5] ^= 0x40
    path.write_bytes(bytes(data))
    return root, bad


def flags(**options: object) -> list[str]:
    """Command-line flags from keyword options, in their order: ``seq_len=16`` -> ``--seq-len 16``, a dict
    as its JSON, ``True`` -> the bare flag (``json=True`` -> ``--json``); ``None`` or ``False`` -> no flag."""
    out: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    return out


def corpus_cli(*args: object, check: bool = True) -> subprocess.CompletedProcess:
    """``python -m cli ARGS`` in the repository root, its output captured as text; with ``check`` (the
    default) a non-zero exit status raises."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *map(str, args)], capture_output=True, text=True, cwd=ROOT, check=check
    )
