"""tokenize: every document to token ids with the pinned tokenizer, EOS after each, per shard.

Documents go on unchanged (the next stage needs their lineage); the tokens of input shard NAME are
written beside them as a Megatron indexed pair ``tokens/NAME.bin`` / ``tokens/NAME.idx``, one sequence
per document in the shard's document order. The tokenizer's sha256 is part of every shard's
checkpoint key and of the manifest (``tokenizer_hash``), so a different tokenizer is a different build.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corpus.digest import file_sha256
from corpus.docshard import iter_docs
from corpus.megatron import read_index, write_indexed_shard
from corpus.model import Kept, Outcome
from corpus.tokenizer import DEFAULT_EOS, DEFAULT_TOKENIZER, PinnedTokenizer, TokenizerError, resolve_asset
from runtime.runner import InputShard, Stage, StageContext, StageError, main

TOKENS = "tokens"


@dataclass(frozen=True)
class TokenizeConfig:
    tokenizer: str = DEFAULT_TOKENIZER  # a tokenizer.json; relative paths resolve against the repository
    eos_token: str = DEFAULT_EOS
    batch_size: int = 256  # documents per encode_batch call
    #: computed, not set: the artifact's sha256 is part of the config (and its hash), so a tokenizer
    #: file replaced in place re-runs the stage like any other config change
    tokenizer_sha256: str = field(init=False, default="")

    def __post_init__(self) -> None:
        path = resolve_asset(self.tokenizer)
        if not path.is_file():
            raise TokenizerError(f"tokenizer artifact not found: {self.tokenizer} (looked at {path})")
        object.__setattr__(self, "tokenizer_sha256", file_sha256(path))


class Tokenize(Stage):
    name = "tokenize"
    version = "1"
    Config = TokenizeConfig
    artifact_kinds = (TOKENS,)

    def __init__(self, config: TokenizeConfig) -> None:
        super().__init__(config)
        if config.batch_size < 1:
            raise StageError(f"[tokenize] batch_size must be positive, got {config.batch_size}")
        self._tok: PinnedTokenizer | None = None
        self._tokens: dict[str, list[np.ndarray]] = {}

    @property
    def tokenizer(self) -> PinnedTokenizer:
        if self._tok is None:
            try:
                self._tok = PinnedTokenizer(self.config.tokenizer, self.config.eos_token)
                if self._tok.info.sha256 != self.config.tokenizer_sha256:
                    raise TokenizerError(f"tokenizer {self.config.tokenizer} changed while the stage started")
            except TokenizerError as e:
                raise StageError(str(e)) from e
        return self._tok

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        if ctx.rank == 0:  # tokens of inputs no longer in the stage would be listed in its manifest
            expected = {f"{s.name}{suffix}" for s in inputs for suffix in (".bin", ".idx")}
            stale = ctx.out_dir / TOKENS
            for p in sorted(stale.iterdir()) if stale.is_dir() else []:
                if p.name not in expected and not p.name.startswith("."):
                    p.unlink()
        return self.tokenizer.info.digest

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        tok = self.tokenizer
        arrays = self._tokens[shard.name] = []
        batch = []
        for doc in iter_docs(shard.path):
            batch.append(doc)
            if len(batch) >= self.config.batch_size:
                yield from self._encode(tok, batch, arrays)
                batch = []
        yield from self._encode(tok, batch, arrays)

    def _encode(self, tok: PinnedTokenizer, batch: list, arrays: list) -> Iterator[tuple[Outcome, int]]:
        if not batch:
            return
        arrays.extend(tok.encode_batch([d.text for d in batch]))
        for doc in batch:
            yield Kept(doc), len(doc.text.encode("utf-8"))

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
        arrays = self._tokens.pop(shard.name)
        write_indexed_shard(ctx.artifact_path(TOKENS, shard.name), arrays, self.tokenizer.info.token_dtype)

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        info = self.tokenizer.info
        tokens = sum(read_index(ctx.artifact_path(TOKENS, f"{s.name}.idx")).num_tokens for s in inputs)
        return {
            "tokenizer_hash": info.digest,
            "tokenizer": info.to_dict(),
            "token_dtype": info.token_dtype,
            "tokens": tokens,
            "tokenizer_path": self.config.tokenizer,
        }


def token_prefix(stage_dir, shard_name: str):
    """Where the tokens of a shard of a completed tokenize stage are (``prefix.bin`` / ``prefix.idx``)."""
    return stage_dir / TOKENS / shard_name


STAGE = Tokenize

if __name__ == "__main__":
    sys.exit(main(STAGE))
