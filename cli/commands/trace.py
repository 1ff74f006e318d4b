"""``corpus trace``: which document a token came from, with its source, URL, crawl date, filter
values, dedup cluster and license hint.

Three forms: ``--shard S --offset T`` (token T of shard S); ``--doc-id ID`` (where a document is,
and its lineage); ``--step N --rank R --world W --position P`` with the checkpoint record the run
resumed from, or its recipe or mixture and seed, where the loader itself (:mod:`loader.trace`) is
built, resumed and seeked as the run's was. Answers come from indices, not by scanning. On a version
directory every answer also says whether the document is selected in it, and in which bucket.
See docs/snapshot.md ("Lineage: `corpus trace`") and docs/loader.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cli.commands._snapshot_ref import add_snapshot_arguments
from corpus.model.errors import UserError
from corpus.snapshot.lookup import Snapshot, describe_doc
from corpus.version.open import is_version


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="the source document of a token of a snapshot")
    add_snapshot_arguments(p)
    p.add_argument("--shard", metavar="S", help="shard name or index")
    p.add_argument("--offset", type=int, metavar="T", help="token offset in the shard")
    p.add_argument("--doc-id", metavar="ID", help="where a document is in the snapshot, and its lineage")
    loader = p.add_argument_group("the loader's view (defaults: the record's settings, else the loader's)")
    loader.add_argument("--step", type=int, metavar="N", help="the training step the token was read at")
    loader.add_argument("--rank", type=int, metavar="R", help="the data-parallel rank that read it")
    loader.add_argument(
        "--world", type=int, default=1, metavar="W", help="data-parallel ranks at step N (default 1)"
    )
    loader.add_argument("--position", type=int, metavar="P", help="token position in the rank's batch")
    loader.add_argument(
        "--record",
        type=Path,
        metavar="CKPT",
        help="the run's loader record before step N: a checkpoint root or step-N directory, or a "
        "JSON record; without it the run is replayed from step 0",
    )
    loader.add_argument("--recipe", type=Path, metavar="RECIPE", help="the run's recipe (TOML)")
    loader.add_argument(
        "--mixture",
        metavar="M",
        help='bucket weights: "natural", JSON {"web": 0.7, …} or web=0.7,curated=0.3',
    )
    loader.add_argument("--epoch-caps", type=json.loads, metavar="JSON", help='{"bucket": epochs} or an int')
    loader.add_argument("--seed", type=int, metavar="S", help="the loader's seed")
    loader.add_argument("--seq-len", type=int, help="tokens per sequence")
    loader.add_argument("--batch-size", type=int, help="sequences per rank per step")
    loader.add_argument("--run-len", type=int, help="steps a rank stays on one bucket")
    loader.add_argument("--chunk-tokens", type=int, help="tokens the loader reads from a bucket at a time")
    loader.add_argument(
        "--append-eos",
        choices=("auto", "yes", "no"),
        default=None,
        help="whether the loader appended EOS after each document (default: the record's, else "
        "auto: only when the snapshot's documents do not end with one)",
    )
    loader.add_argument(
        "--shuffle-buffer",
        type=int,
        metavar="N",
        help="the run's shuffle buffer in documents (default: the record's or recipe's, else 0: off)",
    )
    loader.add_argument(
        "--replay",
        action="store_true",
        help="read every step from the record to N instead of seeking (needed only when a shard "
        "was found corrupt after the record)",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (the default output is JSON too, indented)"
    )
    p.set_defaults(func=run)


def parse_mixture(text: str | None) -> dict[str, float] | None:
    if text is None or text == "natural":
        return None
    try:
        if text.lstrip().startswith("{"):
            value = json.loads(text)
        else:
            value = {k.strip(): float(v) for k, v in (part.split("=", 1) for part in text.split(",") if part)}
    except ValueError as e:
        raise UserError(f"--mixture {text!r}: not JSON or bucket=weight,… ({e})") from e
    if not isinstance(value, dict) or not value:
        raise UserError(f"--mixture {text!r}: expected bucket weights")
    return {str(k): float(v) for k, v in value.items()}


def loader_source(loader_path: Path, args: argparse.Namespace):
    """The loader's own answer (:class:`loader.provenance.TokenSource`) for the step, rank and position."""
    from loader.checkpoint import read_record
    from loader.trace import loader_at, trace_position

    if args.rank is None or args.position is None:
        raise UserError("the loader's view needs --step, --rank and --position")
    if args.recipe is not None and args.mixture is not None:
        raise UserError("--recipe sets the mixture: give --recipe or --mixture, not both")
    record = read_record(args.record) if args.record is not None else None
    append_eos = None if args.append_eos in (None, "auto") else args.append_eos == "yes"
    loader = loader_at(
        loader_path,
        args.step,
        args.rank,
        args.world,
        record=record,
        recipe=args.recipe,
        mixture=parse_mixture(args.mixture),
        seed=args.seed,
        epoch_caps=args.epoch_caps,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        run_len=args.run_len,
        chunk_tokens=args.chunk_tokens,
        append_eos=append_eos,
        replay=args.replay,
        shuffle_buffer=args.shuffle_buffer,
    )
    per_step = loader.seq_len * loader.batch_size
    if not 0 <= args.position < per_step:
        raise UserError(f"--position must be in [0, {per_step}) (batch size × seq len at step {args.step})")
    return trace_position(loader, args.position)


def describe_source(snap: Snapshot, src, shard_of: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The document a loader position came from, with its lineage (an EOS the loader appended has no
    offset in the shard: it is its document's end). ``shard_of``: the shard of each loader stream, for a
    version with buckets by predicate (:attr:`loader.versions.LoaderVersion.shard_of`); else a stream is
    its shard."""
    i, doc = shard_of[src.shard] if shard_of else src.shard, src.doc
    starts = snap.token_starts(i)
    start, length = int(starts[doc]), int(starts[doc + 1] - starts[doc])
    return {
        "snapshot_id": snap.snapshot_id,
        "shard": snap.names[i],
        "bucket": snap.manifest.shards[i].bucket,
        "offset": None if src.appended_eos else start + src.offset_in_doc,
        "token_id": src.token_id,
        "is_eos": src.token_id == snap.manifest.tokenizer.get("eos_id"),
        "doc_index": doc,
        "doc_token_start": start,
        "doc_tokens": length,
        "offset_in_doc": src.offset_in_doc,
        "doc": describe_doc(snap.lineage(i, doc)),
        "loader": {
            "step": src.step,
            "rank": src.rank,
            "world": src.world,
            "phase": src.phase,
            "bucket": src.bucket,
            "row": src.row,
            "column": src.column,
            "stream_position": src.stream_position,
            "loader_appended_eos": src.appended_eos,
            "substituted_for": snap.names[shard_of[src.planned_shard] if shard_of else src.planned_shard]
            if src.substituted
            else None,
        },
    }


def run(args: argparse.Namespace) -> int:
    version = None
    if is_version(args.snapshot):
        from loader.versions import LoaderVersion

        version = LoaderVersion.open(args.snapshot)
        snap = Snapshot(version.root)
    else:
        snap = Snapshot.open(args.snapshot, args.root)
    if args.doc_id:
        where = snap.locate(args.doc_id)
        if where is None:
            raise UserError(f"document {args.doc_id} is not in snapshot {snap.snapshot_id}")
        name, doc = where
        i = snap.shard_number(name)
        start = int(snap.token_starts(i)[doc])
        out = snap.trace(i, start)
    elif args.step is not None:
        out = describe_source(
            snap,
            loader_source(Path(args.snapshot) if version is not None else snap.dir, args),
            version.shard_of if version is not None else None,
        )
    else:
        if args.shard is None or args.offset is None:
            raise UserError(
                "give --shard S --offset T, or the loader's view (--step N --rank R --position P), or --doc-id"
            )
        out = snap.trace(args.shard, args.offset)
    if version is not None:
        located = "shard" in out and "doc_index" in out
        selected = bool(version.shard_selected(out["shard"])[out["doc_index"]]) if located else None
        head = {"version": version.snapshot_id, "selected_in_version": selected}
        if version.buckets:
            head["version_bucket"] = version.bucket_of(out["shard"], out["doc_index"]) if selected else None
        out = {**head, **out}
    print(json.dumps(out, indent=None if args.json else 1, ensure_ascii=False))
    return 0
