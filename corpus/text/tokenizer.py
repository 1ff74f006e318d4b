"""The pinned tokenizer: an HF ``tokenizers`` artifact identified by its sha256, batch encoding with EOS.

A build names a ``tokenizer.json``; its sha256, vocabulary size, EOS id and token dtype go into the
snapshot, so two snapshots tokenized differently never share an id; the path itself enters no digest.
An artifact without an EOS token gets the configured one added deterministically, recorded as
``eos_id``. Encoding takes a fast path (:class:`TiktokenBPE`) when the artifact is one it reproduces
exactly, HF ``tokenizers`` otherwise (``PinnedTokenizer.encoder`` and ``.fast_path_refused`` say
which and why); the ids are the same either way. See docs/snapshot.md ("tokenize").
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.formats.megatron import token_dtype_for_vocab
from corpus.model.digest import file_sha256

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOKENIZER = "assets/tokenizers/gpt-neox-olmo-dolma-v1_5.tokenizer.json"
DEFAULT_EOS = "<|endoftext|>"
#: where the tokenize stage and a snapshot keep the pinned artifact, as ``tokenizer/<file name>``
TOKENIZER_DIR = "tokenizer"


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

    @classmethod
    def from_dict(cls, d: dict) -> TokenizerInfo:
        return cls(
            d["name"], d["sha256"], int(d["vocab_size"]), d["eos_token"], int(d["eos_id"]), d["token_dtype"]
        )

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
    """The artifact loaded by HF ``tokenizers``, encoding through ``TiktokenBPE`` where that is exact.

    ``fast=False`` keeps HF for everything: the reference the tests and the benchmark compare against.
    """

    def __init__(self, path: str | Path, eos_token: str = DEFAULT_EOS, fast: bool = True) -> None:
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
        self._want_fast = fast
        self._fast: TiktokenBPE | None = None
        self._refused: str | None = None if fast else "not requested"

    @property
    def fast(self) -> TiktokenBPE | None:
        """The fast path, built on first use (0.5-1.5 s; a caller that only reads ``info`` never pays)."""
        if self._want_fast:
            self._want_fast = False
            try:
                self._fast = TiktokenBPE(self.tok)
            except FastPathRefused as e:
                self._refused = str(e)
        return self._fast

    @property
    def fast_path_refused(self) -> str | None:
        """Why HF encodes (``None`` when the fast path does)."""
        return None if self.fast is not None else self._refused

    @property
    def encoder(self) -> str:
        """Which code computes the ids: ``"tiktoken"`` (the proven fast path) or ``"hf"``."""
        return "tiktoken" if self.fast is not None else "hf"

    @property
    def eos_id(self) -> int:
        return self.info.eos_id

    def encode_batch(self, texts: Sequence[str], eos: bool = True) -> list[np.ndarray]:
        """Token ids of each text, EOS appended, in the snapshot's dtype."""
        fast = self.fast
        if fast is not None:
            out = []
            for text in texts:
                ids = fast.encode(text)
                if eos:
                    ids.append(self.info.eos_id)
                out.append(np.asarray(ids, dtype=self.dtype))
            return out
        return self.encode_batch_hf(texts, eos)

    def encode_batch_hf(self, texts: Sequence[str], eos: bool = True) -> list[np.ndarray]:
        """``encode_batch`` by HF ``tokenizers`` alone (one Rust call per batch): the reference."""
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


# --- the fast path ------------------------------------------------------------------------------------

#: The split HF's ``ByteLevel(use_regex=True)`` pre-tokenizer applies (GPT-2's; hard-coded in
#: ``tokenizers``, not stored in the artifact).
GPT2_SPLIT_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
#: cl100k's split as its HF conversion stores it (``Split``, ``Isolated``).
CL100K_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: Split patterns tiktoken may run instead of HF. tiktoken keeps only the matches of its pattern, HF's
#: ``Isolated`` split also keeps the text between them: the two agree only for a pattern whose matches
#: cover every character (each of these ends in ``\s+`` after a class for everything else), and only where
#: fancy-regex and Oniguruma agree on ``\s``, ``\p{L}``, ``\p{N}`` and case folding, which the tests check
#: code point by code point. Any other pattern falls back to HF.
KNOWN_SPLIT_PATTERNS = (GPT2_SPLIT_PATTERN, CL100K_SPLIT_PATTERN)
#: bytes that never occur in UTF-8, so a byte-level vocabulary may lack them (OLMo's does)
NON_UTF8_BYTES = frozenset([0xC0, 0xC1, *range(0xF5, 0x100)])


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character standing for each byte, and the byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


class FastPathRefused(ValueError):
    """The artifact uses something the tiktoken path does not reproduce exactly: HF encodes instead."""


class TiktokenBPE:
    """The pinned HF artifact's encoding, computed by tiktoken: same ids, 3-5x the speed on one core.

    HF encodes text as: split out added tokens that match the raw text (``normalized: false``);
    normalize each remaining piece; split out added tokens that match normalized text; split each piece
    with the pre-tokenizer's regex; BPE each word by the merges' order. This class does the same steps;
    the added tokens and the normalizer are HF's own (split here in Python, normalized by the artifact's
    normalizer object), the regex split and the BPE are tiktoken's. Everything is built from the
    tokenizer that HF loaded from the artifact (``Tokenizer.to_str()``), never from a second file.

    Why tiktoken's BPE gives HF's ids. tiktoken merges, at each step, the adjacent pair whose
    concatenation has the lowest rank, leftmost first; HF merges the pair with the lowest merge rule,
    leftmost first. With rank = the id of the token a rule makes, the two coincide when (a) every rule
    makes a different token and ids rise with the rule's order (checked), and (b) no pair that is not a
    rule, yet concatenates to a token, is ever adjacent during HF's merging. For (b): if such a pair
    ``u, v`` (``u + v = t``) were adjacent in some word, the merges inside ``u`` and ``v`` ran in rank
    order, none crossing their edges, so HF run on ``t``'s bytes alone performs the same merges, reaches
    ``[u, v]`` and stops there. Hence (b) holds when HF encodes every token's own bytes to that token —
    checked for every merge of the artifact at load (0.2 s for OLMo, 0.4 s for cl100k). tiktoken's
    shortcut of emitting a whole word found in the vocabulary is covered by the same check.

    Construction raises ``FastPathRefused`` with the reason for anything else (another normalizer,
    pre-tokenizer, model option, truncation, an added token with ``lstrip``/``rstrip``/``single_word``,
    added tokens of the two kinds that could overlap).
    """

    def __init__(self, tok) -> None:  # tok: tokenizers.Tokenizer, as PinnedTokenizer loaded it
        try:
            import tiktoken
        except ImportError:
            raise FastPathRefused("tiktoken is not installed") from None

        spec = json.loads(tok.to_str())
        for key in ("truncation", "padding"):
            if spec.get(key) is not None:
                raise FastPathRefused(f"{key} is set")
        self.normalizer = self._normalizer(tok, spec.get("normalizer"))
        self._python_nfc_is_sound = self.normalizer is not None and nfc_shortcut_is_sound(self.normalizer)
        pattern = self._split_pattern(spec.get("pre_tokenizer"))
        post = spec.get("post_processor")
        if post is not None and post.get("type") != "ByteLevel":
            raise FastPathRefused(f"post-processor {post.get('type')}")
        ranks = self._mergeable_ranks(tok, spec["model"])
        self._raw_added, self._normalized_added = self._added_tokens(tok)
        self.bpe = tiktoken.Encoding("pinned", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})

    # -- refusal rules, one per part of the artifact --

    @staticmethod
    def _normalizer(tok, spec: dict | None):
        if spec is None:
            return None
        if spec != {"type": "NFC"}:
            raise FastPathRefused(f"normalizer {spec}")
        return tok.normalizer.normalize_str  # HF's own NFC (its Unicode tables, not Python's)

    @staticmethod
    def _split_pattern(spec: dict | None) -> str:
        def byte_level(s: dict, use_regex: bool) -> bool:
            return (
                s.get("type") == "ByteLevel"
                and not s.get("add_prefix_space")
                and s.get("use_regex") == use_regex
            )

        if spec and byte_level(spec, use_regex=True):
            return GPT2_SPLIT_PATTERN
        if spec and spec.get("type") == "Sequence" and len(spec.get("pretokenizers", [])) == 2:
            split, bl = spec["pretokenizers"]
            pattern = split.get("pattern", {}).get("Regex")
            if (
                split.get("type") == "Split"
                and split.get("behavior") == "Isolated"
                and not split.get("invert")
                and pattern in KNOWN_SPLIT_PATTERNS
                and byte_level(bl, use_regex=False)
            ):
                return pattern
        raise FastPathRefused(f"pre-tokenizer {json.dumps(spec)[:200]}")

    @staticmethod
    def _mergeable_ranks(tok, model: dict) -> dict[bytes, int]:
        if model.get("type") != "BPE":
            raise FastPathRefused(f"model {model.get('type')}")
        for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(key):
                raise FastPathRefused(f"BPE {key} = {model[key]!r}")
        for key in ("byte_fallback", "ignore_merges"):
            if model.get(key):
                raise FastPathRefused(f"BPE {key} is set")
        vocab: dict[str, int] = model["vocab"]
        alphabet = byte_level_alphabet()
        missing = {b for c, b in alphabet.items() if c not in vocab}
        if not missing <= NON_UTF8_BYTES:
            raise FastPathRefused(f"byte-level vocabulary lacks bytes {sorted(missing - NON_UTF8_BYTES)}")
        ranks = {bytes([b]): vocab[c] for c, b in alphabet.items() if c in vocab}
        to_latin1 = str.maketrans({c: chr(b) for c, b in alphabet.items()})  # then .encode("latin-1")
        merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
        if not set("".join(map("".join, merges))) <= alphabet.keys():
            raise FastPathRefused("a merge holds a character outside the byte-level alphabet")
        model_tokenize, last = tok.model.tokenize, -1
        for left, right in merges:
            token = left + right
            tid = vocab.get(token)
            if tid is None or left not in vocab or right not in vocab:
                raise FastPathRefused(f"merge {left!r} {right!r} outside the vocabulary")
            if tid <= last:  # also catches two rules making one token
                raise FastPathRefused(f"ids do not rise with the merge order at {token!r}")
            last = tid
            ranks[token.translate(to_latin1).encode("latin-1")] = tid
            encoded = model_tokenize(token)
            if len(encoded) != 1 or encoded[0].id != tid:
                raise FastPathRefused(f"HF does not encode token {token!r} to itself")
        return ranks

    def _added_tokens(self, tok) -> tuple[AddedTokenSplitter, AddedTokenSplitter]:
        """Added tokens matched in the raw text, and those matched in normalized text (HF's two passes)."""
        raw, normalized = {}, {}
        for tid, added in sorted(tok.get_added_tokens_decoder().items()):
            if added.lstrip or added.rstrip or added.single_word or not added.content:
                raise FastPathRefused(f"added token {added.content!r} has lstrip/rstrip/single_word")
            if added.normalized and self.normalizer and self.normalizer(added.content) != added.content:
                raise FastPathRefused(f"added token {added.content!r} changes under the normalizer")
            (normalized if added.normalized else raw)[added.content] = tid
        for a in raw:  # the two passes may run as one here only if no raw token can overlap a normalized one
            for b in normalized:
                if (
                    a in b
                    or b in a
                    or any(x.endswith(y[:k]) for x, y in ((a, b), (b, a)) for k in range(1, len(y)))
                ):
                    raise FastPathRefused(f"added tokens {a!r} and {b!r} can overlap")
        return AddedTokenSplitter(raw), AddedTokenSplitter(normalized)

    # -- encoding --

    def encode(self, text: str) -> list[int]:
        """The ids HF gives ``text`` with ``add_special_tokens=False``."""
        ascii_only = text.isascii()
        if not ascii_only:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # HF refuses a lone surrogate; tiktoken would replace it
                raise TypeError("text is not valid Unicode (lone surrogate)") from None
        ids: list[int] = []
        added = self._raw_added.tokens
        for i, piece in enumerate(self._raw_added.split(text)):
            if i % 2:
                ids.append(added[piece])
            elif piece:
                if not ascii_only and self.normalizer is not None:
                    piece = self._normalize(piece)
                self._encode_normalized(piece, ids)
        return ids

    def _normalize(self, text: str) -> str:
        if self._python_nfc_is_sound and unicodedata.is_normalized("NFC", text):
            return (
                text  # 20x faster than asking HF, and HF would leave it as it is (see nfc_shortcut_is_sound)
            )
        return self.normalizer(text)

    def _encode_normalized(self, text: str, ids: list[int]) -> None:
        encode = self.bpe.encode_ordinary
        added = self._normalized_added.tokens
        for i, piece in enumerate(self._normalized_added.split(text)):
            if i % 2:
                ids.append(added[piece])
            elif piece:
                ids.extend(encode(piece))


class AddedTokenSplitter:
    """Text split around added tokens as HF's matcher does: leftmost match first, the longest there.

    ``split`` returns ``[text, token, text, token, …, text]`` (texts may be empty). The regex is a trie
    of the tokens with each node's continuations tried before the node itself ends a token, which is
    leftmost-longest for a backtracking engine and, unlike an alternation of 23 runs of spaces (OLMo's
    added tokens), costs one comparison at a single space.
    """

    def __init__(self, tokens: dict[str, int]) -> None:
        self.tokens = tokens
        self._pattern = re.compile(f"({_trie_regex(sorted(tokens))})") if tokens else None
        #: text holding none of these holds no token (every token contains one): ``in`` scans fast
        self._probes = tuple(t for t in sorted(tokens) if not any(o != t and o in t for o in tokens))

    def split(self, text: str) -> list[str]:
        if self._pattern is None or not any(p in text for p in self._probes):
            return [text]
        return self._pattern.split(text)


def _trie_regex(words: list[str]) -> str:
    """A regex matching the longest of ``words`` that starts at a position."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}  # end of a word

    def node_regex(node: dict) -> str:
        branches = [re.escape(ch) + node_regex(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" in node:  # a word ends here: try the longer ones first, then stop
            return f"(?:{body})?"
        return body

    return node_regex(trie)


def nfc_shortcut_is_sound(hf_nfc) -> bool:
    """Whether ``unicodedata.is_normalized("NFC", s)`` proves that HF's NFC leaves ``s`` unchanged.

    It does when HF's Unicode tables are not newer than Python's: per code point the two agree
    (tested on every code point), canonical ordering and composition only ever do less with fewer known
    characters, and Unicode's stability policy keeps both for characters both know. HF's NFC
    (``unicode-normalization-alignments``) does not compose U+11935 U+11930 (Dives Akuru, Unicode 13),
    so its tables predate 13; Python 3.11 has 14. If a later ``tokenizers`` composes it, every non-ASCII
    piece goes to HF's normalizer again: slower, still exact.
    """
    probe = "\U00011935\U00011930"
    python_version = tuple(int(x) for x in unicodedata.unidata_version.split("."))
    return python_version >= (13, 0, 0) and hf_nfc(probe) == probe


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
