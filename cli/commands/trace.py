"""``corpus trace``: which document a token came from, with its source, URL, crawl date, filter
values, dedup cluster and license hint.

Two forms:

* ``--shard S --offset T``: token ``T`` of shard ``S`` (its name, e.g. ``web-00003``, or its index in
  the manifest);
* ``--mixture M --seed S --step N --rank R --position P``: the loader's view — position ``P`` of the
  batch rank ``R`` of ``--world W`` reads at step ``N`` (``P`` counts row-major over batch rows of
  ``--seq-len`` tokens). The loader's settings must be the ones training used.

Both answer from indices (the shard's document boundaries, the lineage offsets), not by scanning.
``--snapshot`` may be a version directory (``corpus version``): the loader's view then replays the
version's streams (its selected documents), and every answer names the version and whether the
document is selected in it.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from cli.commands._snapshot_ref import add_snapshot_arguments
from corpus.errors import UserError
from corpus.snapshot import Snapshot
from corpus.version import is_version


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="the source document of a token of a snapshot")
    add_snapshot_arguments(p)
    p.add_argument("--shard", metavar="S", help="shard name or index")
    p.add_argument("--offset", type=int, metavar="T", help="token offset in the shard")
    p.add_argument("--doc-id", metavar="ID", help="where a document is in the snapshot, and its lineage")
    loader = p.add_argument_group("the loader's view")
    loader.add_argument(
        "--mixture",
        metavar="M",
        help='bucket weights: "natural", JSON {"web": 0.7, …} or web=0.7,curated=0.3',
    )
    loader.add_argument("--seed", type=int, default=0, metavar="S")
    loader.add_argument("--step", type=int, metavar="N")
    loader.add_argument("--rank", type=int, metavar="R")
    loader.add_argument("--world", type=int, default=1, metavar="W", help="data-parallel ranks (default 1)")
    loader.add_argument("--position", type=int, metavar="P", help="token position in the rank's batch")
    loader.add_argument("--seq-len", type=int, default=2048)
    loader.add_argument("--batch-size", type=int, default=1)
    loader.add_argument("--run-len", type=int, default=8)
    loader.add_argument("--chunk-tokens", type=int, default=1 << 20)
    loader.add_argument(
        "--append-eos",
        choices=("auto", "yes", "no"),
        default="auto",
        help="whether the loader appended EOS after each document (auto, the loader's default: only "
        "when the snapshot's documents do not end with one)",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (the default output is JSON too, indented)"
    )
    p.set_defaults(func=run)


def parse_mixture(text: str) -> dict[str, float] | None:
    if text == "natural":
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


def loader_layout(streams, seed: int, chunk_tokens: int, append_eos: bool, world: int):
    """The loader's static layout of these shard streams for ``world`` ranks (``loader.state.stream_layout``,
    the function the loader itself uses; it does not import torch)."""
    from loader.state import stream_layout

    return stream_layout(streams, seed, chunk_tokens, {}, append_eos, world)


def loader_position(snap: Snapshot, args: argparse.Namespace, version=None) -> tuple[int, int, dict]:
    """(shard index, token offset, loader facts) for a position of a rank's batch at a step: the
    loader's cursor is advanced by arithmetic (``seek``), nothing is read."""
    from loader.state import Plan, RankCursor

    if args.rank is None or args.position is None:
        raise UserError("the loader's view needs --step, --rank and --position")
    if not 0 <= args.rank < args.world:
        raise UserError(f"--rank {args.rank} outside a world of {args.world}")
    if not 0 <= args.position < args.seq_len * args.batch_size:
        raise UserError(f"--position must be in [0, {args.seq_len * args.batch_size}) (batch size × seq len)")
    if args.append_eos == "auto":
        append_eos = not snap.manifest.tokenizer.get("documents_end_with_eos", False)
    else:
        append_eos = args.append_eos == "yes"
    streams = version.stream_shards if version is not None else snap.manifest.shards
    mixture = parse_mixture(args.mixture)
    if mixture is None:
        mixture = {}
        for s in streams:
            mixture[s.bucket] = mixture.get(s.bucket, 0.0) + s.tokens
    unknown = sorted(set(mixture) - {s.bucket for s in snap.manifest.shards})
    if unknown:
        raise UserError(f"--mixture names buckets the snapshot does not have: {unknown}")
    layout = loader_layout(streams, args.seed, args.chunk_tokens, append_eos, args.world)
    cursor = RankCursor(layout, Plan.fresh(args.world), args.rank)
    cursor.seek(args.step, mixture, args.seed, args.run_len, args.seq_len, args.batch_size)
    if cursor.step != args.step:
        raise UserError(f"the stream of rank {args.rank} ends before step {args.step}")
    plans = cursor.next_batch(mixture, args.seed, args.run_len, args.seq_len, args.batch_size)
    row, col = divmod(args.position, args.seq_len)
    if plans is None or row >= len(plans):
        raise UserError(f"rank {args.rank} reads nothing at step {args.step} row {row}")
    plan = plans[row]
    at = col
    for shard, a, b in plan.segments:
        if at < b - a:
            stream_pos = a + at
            if version is not None:
                offset, appended_eos = selected_stream_to_token(snap, version, shard, stream_pos, append_eos)
            else:
                offset, appended_eos = stream_to_token(snap, shard, stream_pos, append_eos)
            facts = {
                "bucket": plan.bucket,
                "row": row,
                "column": col,
                "stream_position": stream_pos,
                "loader_appended_eos": appended_eos,
            }
            return shard, offset, facts
        at -= b - a
    raise UserError(f"position {args.position} is padding (bucket {plan.bucket} ran out at step {args.step})")


def stream_to_token(snap: Snapshot, shard: int, stream_pos: int, append_eos: bool) -> tuple[int, bool]:
    """A loader stream position as a token offset in the shard (an appended EOS maps to its document's
    last token) and whether the loader appended that token."""
    starts = snap.token_starts(shard)
    if not append_eos:
        return stream_pos, False
    stream_starts = starts[:-1] + np.arange(starts.shape[0] - 1)
    doc = int(np.searchsorted(stream_starts, stream_pos, side="right")) - 1
    within = stream_pos - int(stream_starts[doc])
    length = int(starts[doc + 1] - starts[doc])
    if within == length:
        return int(starts[doc]) + length - 1, True
    return int(starts[doc]) + within, False


def selected_stream_to_token(snap: Snapshot, version, shard: int, stream_pos: int, append_eos: bool
                             ) -> tuple[int, bool]:
    """``stream_to_token`` for a version's stream, which holds only the shard's selected documents."""
    from loader.versions import SelectedStream

    starts = snap.token_starts(shard)
    stream = SelectedStream.of(np.diff(starts), version.selected(shard), append_eos)
    k = int(np.searchsorted(stream.starts, stream_pos, side="right")) - 1
    doc, within = int(stream.docs[k]), stream_pos - int(stream.starts[k])
    length = int(starts[doc + 1] - starts[doc])
    if within == length:
        return int(starts[doc]) + length - 1, True
    return int(starts[doc]) + within, False


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
    elif args.step is not None or args.mixture is not None:
        if args.step is None or args.mixture is None:
            raise UserError("the loader's view needs --mixture, --seed, --step, --rank and --position")
        shard, offset, facts = loader_position(snap, args, version)
        out = snap.trace(shard, offset) | {"loader": facts}
    else:
        if args.shard is None or args.offset is None:
            raise UserError(
                "give --shard S --offset T, or the loader's view (--mixture … --position P), or --doc-id"
            )
        out = snap.trace(args.shard, args.offset)
    if version is not None:
        i = snap.shard_number(out["shard"]) if "shard" in out else None
        selected = bool(version.selected(i)[out["doc_index"]]) if i is not None and "doc_index" in out else None
        out = {"version": version.snapshot_id, "selected_in_version": selected, **out}
    print(json.dumps(out, indent=None if args.json else 1, ensure_ascii=False))
    return 0
