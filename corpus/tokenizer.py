"""The pinned tokenizer: an HF ``tokenizers`` artifact identified by its sha256, batch encoding with EOS.

A build names a ``tokenizer.json``; its sha256, vocabulary size, EOS id and the token dtype that
follows from the vocabulary (``corpus.megatron.token_dtype_for_vocab``) go into the snapshot, so two
snapshots tokenized differently never share an id. Relative paths resolve against the repository
(where ``assets/tokenizers/`` ships the default), so the same config means the same file anywhere.

When the artifact has no EOS token (the cl100k conversion has none), the configured EOS token is
added as a special token after the vocabulary — deterministically, and recorded as ``eos_id``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.digest import file_sha256
from corpus.megatron import token_dtype_for_vocab

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TOKENIZER = "assets/tokenizers/gpt-neox-olmo-dolma-v1_5.tokenizer.json"
DEFAULT_EOS = "<|endoftext|>"


class TokenizerError(ValueError):
    pass


def resolve_asset(path: str | Path) -> Path:
    """An absolute path as is; a relative one against the working directory, else the repository."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    return REPO_ROOT / p


@dataclass(frozen=True)
class TokenizerInfo:
    """What a snapshot records about its tokenizer."""

    name: str
    sha256: str
    vocab_size: int
    eos_token: str
    eos_id: int
    token_dtype: str

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "vocab_size": self.vocab_size,
            "eos_token": self.eos_token,
            "eos_id": self.eos_id,
            "token_dtype": self.token_dtype,
        }

    @property
    def digest(self) -> str:
        return f"sha256:{self.sha256}"


class PinnedTokenizer:
    def __init__(self, path: str | Path, eos_token: str = DEFAULT_EOS) -> None:
        from tokenizers import Tokenizer

        self.path = resolve_asset(path)
        if not self.path.is_file():
            raise TokenizerError(f"tokenizer artifact not found: {path} (looked at {self.path})")
        try:
            self.tok = Tokenizer.from_file(str(self.path))
        except Exception as e:  # the Rust side raises a bare Exception on a malformed file
            raise TokenizerError(f"{self.path}: not a tokenizers JSON artifact ({e})") from e
        eos_id = self.tok.token_to_id(eos_token)
        if eos_id is None:
            self.tok.add_special_tokens([eos_token])
            eos_id = self.tok.token_to_id(eos_token)
        vocab = self.tok.get_vocab_size(with_added_tokens=True)
        self.info = TokenizerInfo(
            self.path.name,
            file_sha256(self.path),
            vocab,
            eos_token,
            int(eos_id),
            token_dtype_for_vocab(vocab),
        )
        self.dtype = np.dtype(self.info.token_dtype)

    @property
    def eos_id(self) -> int:
        return self.info.eos_id

    def encode_batch(self, texts: Sequence[str], eos: bool = True) -> list[np.ndarray]:
        """Token ids of each text, EOS appended, in the snapshot's dtype (one Rust call per batch)."""
        encodings = self.tok.encode_batch_fast(list(texts), add_special_tokens=False)
        out = []
        for enc in encodings:
            ids = enc.ids
            if eos:
                ids.append(self.info.eos_id)
            out.append(np.asarray(ids, dtype=self.dtype))
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [int(a.shape[0]) for a in self.encode_batch(texts)]


def train_bpe(
    texts: Iterable[str],
    vocab_size: int,
    out_path: Path,
    eos_token: str = DEFAULT_EOS,
    min_frequency: int = 2,
) -> TokenizerInfo:
    """Train a byte-level BPE (GPT-2 style pre-tokenization, EOS as a special token) and save it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 300:
        raise TokenizerError(f"vocab_size must be at least 300 (256 bytes + merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[eos_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.tmp.{os.getpid()}")
    tok.save(str(tmp))
    os.replace(tmp, out_path)
    return PinnedTokenizer(out_path, eos_token).info
