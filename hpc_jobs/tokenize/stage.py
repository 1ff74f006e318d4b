"""tokenize: every document to token ids with the pinned tokenizer, EOS after each, per shard.

Documents go on unchanged (the next stage needs their lineage); the tokens of input shard NAME are
written beside them as a Megatron indexed pair ``tokens/NAME.bin`` / ``.idx``, one sequence per document
in the shard's document order. The tokenizer is identified by its sha256 (checkpoint keys, manifest),
never by its path; the stage keeps the artifact as ``tokenizer/<name>``. Ids come from
``PinnedTokenizer.encode_batch`` (the tiktoken fast path where proven equal to HF, HF otherwise: the
bytes are the same). Memory per shard is one batch of tokens and 4 bytes per document.
docs/snapshot.md, "tokenize".
"""

from __future__ import annotations

import array
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from corpus.formats.docshard import atomic_write_bytes, iter_docs
from corpus.formats.megatron import index_bytes, read_index
from corpus.model import Kept, Outcome
from corpus.model.digest import file_sha256, sha256_hex
from corpus.text.tokenizer import (
    DEFAULT_EOS,
    DEFAULT_TOKENIZER,
    TOKENIZER_DIR,
    PinnedTokenizer,
    TokenizerError,
    resolve_asset,
)
from runtime.input_shard import InputShard
from runtime.runner import Stage, StageContext, StageError

TOKENS = "tokens"
log = logging.getLogger(__name__)


class StreamingShardWriter:
    """A Megatron ``.bin``/``.idx`` pair written document by document, byte-identical to
    ``corpus.formats.megatron.write_indexed_shard`` given the same documents, holding only their lengths.

    Tokens go to ``partial`` (one fixed name per shard, so a rerun after a crash overwrites what the
    killed rank left); ``finish`` fsyncs it, renames it to ``prefix.bin``, then writes ``prefix.idx``
    through a temporary name: the index appears last, as with ``write_indexed_shard``.
    """

    def __init__(self, prefix: Path, partial: Path, dtype: str) -> None:
        self.prefix, self.partial, self.dtype = Path(prefix), Path(partial), dtype
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.partial, "wb")  # noqa: SIM115 -- closed by finish/close
        self._lengths = array.array("i")  # int32: 4 bytes a document

    def add(self, tokens: np.ndarray) -> None:
        self._f.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        self._lengths.append(int(tokens.shape[0]))

    def finish(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        bin_path, idx_path = self.prefix.with_suffix(".bin"), self.prefix.with_suffix(".idx")
        os.replace(self.partial, bin_path)
        tmp = idx_path.with_name(f".{idx_path.name}.tmp.{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(index_bytes(np.frombuffer(self._lengths, dtype=np.int32), self.dtype))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, idx_path)

    def close(self) -> None:
        self._f.close()


@dataclass(frozen=True, kw_only=True)
class TokenizeConfig:
    #: where the tokenizer.json is: an absolute path, or relative to the working directory, else to the
    #: repository. Read once, then recorded by its file name only (its content by ``tokenizer_sha256``),
    #: so the same file from any directory, relative spelling or link gives the same config, manifest
    #: and snapshot id; where it was found is :attr:`artifact`, which no digest covers
    tokenizer: str = DEFAULT_TOKENIZER
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
        object.__setattr__(self, "tokenizer", path.name)
        object.__setattr__(self, "_artifact", path)  # not a field: never in the config's dict or hash

    @property
    def artifact(self) -> Path:
        """The tokenizer file as it was found (its location, which enters no digest)."""
        return self._artifact


class Tokenize(Stage):
    name = "tokenize"
    version = "2"  # what each version changed: docs/snapshot.md, "Stage versions"
    Config = TokenizeConfig
    artifact_kinds = (TOKENS, TOKENIZER_DIR)

    def __init__(self, config: TokenizeConfig) -> None:
        super().__init__(config)
        if config.batch_size < 1:
            raise StageError(f"[tokenize] batch_size must be positive, got {config.batch_size}")
        self._tok: PinnedTokenizer | None = None
        self._writers: dict[str, StreamingShardWriter] = {}

    @property
    def tokenizer(self) -> PinnedTokenizer:
        if self._tok is None:
            try:
                self._tok = PinnedTokenizer(self.config.artifact, self.config.eos_token)
                if self._tok.info.sha256 != self.config.tokenizer_sha256:
                    raise TokenizerError(f"tokenizer {self.config.artifact} changed while the stage started")
            except TokenizerError as e:
                raise StageError(str(e)) from e
            if self._tok.fast is None:
                log.warning(
                    "[tokenize] %s: encoding with HF tokenizers (fast path refused: %s)",
                    self._tok.info.name,
                    self._tok.fast_path_refused,
                )
        return self._tok

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        if ctx.rank == 0:  # tokens of inputs no longer in the stage would be listed in its manifest
            expected = {f"{s.name}{suffix}" for s in inputs for suffix in (".bin", ".idx")}
            stale = ctx.out_dir / TOKENS
            for p in sorted(stale.iterdir()) if stale.is_dir() else []:
                if p.name not in expected and not p.name.startswith("."):
                    p.unlink()
            self._pin(ctx.out_dir / TOKENIZER_DIR)
        return self.tokenizer.info.digest

    def _pin(self, directory: Path) -> None:
        """Keep the tokenizer in the stage (``tokenizer/<name>``, listed and digested with the stage's
        side outputs): the snapshot links it from here, never reads where the config found it."""
        info = self.tokenizer.info
        pinned = directory / info.name
        for p in sorted(directory.iterdir()) if directory.is_dir() else []:
            if p.is_file() and p.name != info.name and not p.name.startswith("."):
                p.unlink()  # an earlier run's tokenizer
        if pinned.is_file() and file_sha256(pinned) == info.sha256:
            return
        data = self.config.artifact.read_bytes()
        if sha256_hex(data) != info.sha256:
            raise StageError(f"tokenizer {self.config.artifact} changed while the stage started")
        atomic_write_bytes(pinned, data)

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        tok = self.tokenizer
        stale = self._writers.pop(shard.name, None)  # a failed earlier attempt in this process
        if stale is not None:
            stale.close()
        writer = self._writers[shard.name] = StreamingShardWriter(
            ctx.artifact_path(TOKENS, shard.name),
            ctx.work_dir / TOKENS / f"{shard.name}.bin.partial",
            tok.info.token_dtype,
        )
        batch = []
        for doc in iter_docs(shard.path):
            batch.append(doc)
            if len(batch) >= self.config.batch_size:
                yield from self._encode(tok, batch, writer)
                batch = []
        yield from self._encode(tok, batch, writer)

    def _encode(
        self, tok: PinnedTokenizer, batch: list, writer: StreamingShardWriter
    ) -> Iterator[tuple[Outcome, int]]:
        if not batch:
            return
        for tokens in tok.encode_batch([d.text for d in batch]):
            writer.add(tokens)
        for doc in batch:
            yield Kept(doc), len(doc.text.encode("utf-8"))

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
        self._writers.pop(shard.name).finish()

    def run_info(self, ctx: StageContext) -> dict[str, Any]:
        tok = self.tokenizer
        return {"encoder": tok.encoder, "fast_path_refused": tok.fast_path_refused}

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        info = self.tokenizer.info
        tokens = sum(read_index(ctx.artifact_path(TOKENS, f"{s.name}.idx")).num_tokens for s in inputs)
        return {
            "tokenizer_hash": info.digest,
            "tokenizer": info.to_dict(),
            "token_dtype": info.token_dtype,
            "tokens": tokens,
        }


def token_prefix(stage_dir, shard_name: str):
    """Where the tokens of a shard of a completed tokenize stage are (``prefix.bin`` / ``prefix.idx``)."""
    return stage_dir / TOKENS / shard_name


STAGE = Tokenize
