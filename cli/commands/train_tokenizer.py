"""``corpus train-tokenizer``: a byte-level BPE trained on a sample of the corpus, for builds with no
pinned artifact. The sample is the ``--sample-docs`` documents with the smallest keyed hash of their
text digest, so the same inputs and seed give the same sample; the artifact's sha256 is printed last
and is what ``[tokenize] tokenizer`` then pins."""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from corpus.formats.docshard import SUFFIX, iter_records
from corpus.model.digest import stable_hash64, text_digest
from corpus.model.errors import UserError
from corpus.text.tokenizer import DEFAULT_EOS, TokenizerError, train_bpe


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-tokenizer", help="train a BPE tokenizer on a corpus sample")
    p.add_argument(
        "--input",
        nargs="+",
        required=True,
        type=Path,
        metavar="PATH",
        help='completed stage directories, document shards (*.jsonl.zst) or JSONL files with "text"',
    )
    p.add_argument("--out", required=True, type=Path, metavar="FILE", help="where to write tokenizer.json")
    p.add_argument("--vocab-size", type=int, default=32000, metavar="N", help="tokens in the vocabulary")
    p.add_argument("--sample-docs", type=int, default=100_000, metavar="N", help="documents to train on")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="which sample")
    p.add_argument("--eos-token", default=DEFAULT_EOS, metavar="TOKEN", help="the end-of-document token")
    p.set_defaults(func=run)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        shards = sorted((path / "shards").glob(f"*{SUFFIX}")) if (path / "manifest.json").exists() else []
        if not shards:
            raise UserError(f"{path} is not a completed stage directory (no manifest.json and shards/)")
        return shards
    if not path.is_file():
        raise UserError(f"input not found: {path}")
    return [path]


def texts(path: Path) -> Iterator[str]:
    if path.name.endswith(SUFFIX):
        for rec in iter_records(path):
            yield rec["text"]
        return
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)["text"]
                except (ValueError, KeyError, TypeError) as e:
                    raise UserError(f'{path}:{lineno}: expected a JSON object with "text" ({e})') from e


def sample(paths: list[Path], k: int, seed: int) -> list[str]:
    """The ``k`` texts with the smallest keyed hash, in key order (bottom-k: memory for k texts)."""
    heap: list[tuple[int, str, str]] = []
    files = [f for p in paths for f in _files(p)]
    bar = tqdm(total=len(files), unit="file", desc="sampling", disable=not sys.stderr.isatty())
    for f in files:
        for text in texts(f):
            d = text_digest(text)
            item = (-stable_hash64("tokenizer-sample", seed, d), d, text)
            if len(heap) < k:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
        bar.update()
    bar.close()
    return [t for _, _, t in sorted(heap, reverse=True)]


def run(args: argparse.Namespace) -> int:
    if args.sample_docs < 1:
        raise UserError(f"--sample-docs must be positive, got {args.sample_docs}")
    docs = sample(args.input, args.sample_docs, args.seed)
    if not docs:
        raise UserError("the inputs hold no documents to train on")
    print(
        f"training a {args.vocab_size}-token BPE on {len(docs)} documents "
        f"({sum(len(t) for t in docs) / 1e6:.1f} MB)",
        file=sys.stderr,
    )
    try:
        info = train_bpe(docs, args.vocab_size, args.out, args.eos_token)
    except TokenizerError as e:
        raise UserError(str(e)) from e
    print(
        f"tokenizer {args.out}: vocab {info.vocab_size}, eos {info.eos_token}={info.eos_id}, "
        f"dtype {info.token_dtype}"
    )
    print(f"sha256 {info.sha256}")
    return 0
