"""The pinned tokenizer: identity by sha256, EOS after every document, the dtype from the vocabulary,
and the fast path (tiktoken) giving HF tokenizers' ids, proven on real text of 13 languages, code and every
kind of code point; artifacts it cannot reproduce fall back to HF."""

from __future__ import annotations

import gzip
import json
import re
import tarfile
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from corpus.model.digest import file_sha256
from corpus.text.tokenizer import DEFAULT_TOKENIZER, PinnedTokenizer, resolve_asset
from tests.conftest import run_corpus, run_mpi
from tests.snapshot.conftest import CL100K, OLMO, SHARED_DATA


def test_the_bundled_default_is_the_olmo_tokenizer():
    assert file_sha256(resolve_asset(DEFAULT_TOKENIZER)) == file_sha256(OLMO)


@pytest.mark.parametrize(
    "path, dtype, vocab, eos_id",
    [(OLMO, "uint16", 50_280, 50_279), (CL100K, "int32", 100_257, 100_256)],
)
def test_dtype_follows_the_vocabulary_and_eos_ends_every_document(real_docs, path, dtype, vocab, eos_id):
    tok = PinnedTokenizer(path)
    assert (tok.info.token_dtype, tok.info.vocab_size, tok.info.eos_id) == (dtype, vocab, eos_id)
    encoded = tok.encode_batch([d.text for d in real_docs[:8]])
    for arr in encoded:
        assert arr.dtype == np.dtype(dtype) and arr[-1] == eos_id
        assert eos_id not in arr[:-1].tolist()
        assert int(arr.max()) < vocab


def test_batch_encoding_equals_one_document_at_a_time(real_docs):
    tok = PinnedTokenizer(OLMO)
    texts = [d.text for d in real_docs[:12]]
    batch = tok.encode_batch(texts)
    single = [tok.encode_batch([t])[0] for t in texts]
    assert all(np.array_equal(a, b) for a, b in zip(batch, single, strict=True))
    assert tok.tok.decode(batch[0][:-1].tolist()) == texts[0]


def test_a_missing_tokenizer_is_a_clear_error(tmp_path):
    from corpus.text.tokenizer import TokenizerError

    with pytest.raises(TokenizerError, match="tokenizer artifact not found"):
        PinnedTokenizer(tmp_path / "nope.json")


def test_train_tokenizer_on_a_corpus_sample_is_reproducible(tmp_path):
    src = tmp_path / "sample.jsonl"
    with gzip.open(SHARED_DATA / "curated" / "perl-doc.jsonl.gz", "rt") as f:
        src.write_text("".join(json.dumps({"text": json.loads(line)["text"][:4000]}) + "\n" for line in f))
    shas = []
    for run in range(2):
        out = tmp_path / f"tok{run}.json"
        proc = run_corpus(
            "train-tokenizer",
            "--input",
            str(src),
            "--out",
            str(out),
            "--vocab-size",
            "800",
            "--sample-docs",
            "120",
            "--seed",
            "3",
        )
        shas.append(proc.stdout.strip().splitlines()[-1])
        assert shas[-1] == f"sha256 {file_sha256(out)}"
    assert shas[0] == shas[1]
    tok = PinnedTokenizer(tmp_path / "tok0.json")
    assert tok.info.vocab_size == 800 and tok.info.token_dtype == "uint16"
    text = "=head1 NAME\n\nperlfunc - Perl builtin functions"
    assert tok.tok.decode(tok.encode_batch([text], eos=False)[0].tolist()) == text


def test_a_tokenizer_replaced_in_place_changes_the_stage_config(tmp_path):
    import shutil

    from corpus.model.config import config_hash, stage_config
    from hpc_jobs.tokenize.stage import TokenizeConfig

    path = tmp_path / "tokenizer.json"
    shutil.copy(OLMO, path)
    before = stage_config(TokenizeConfig, {"tokenizer": str(path)}, "tokenize")
    shutil.copy(CL100K, path)
    after = stage_config(TokenizeConfig, {"tokenizer": str(path)}, "tokenize")
    assert after.tokenizer_sha256 == file_sha256(CL100K) and config_hash(after) != config_hash(before)


# --- the fast path: the same ids as HF tokenizers, proven on real text and on every code point ---------

LANGUAGES = ("en", "de", "fr", "it", "ja", "ko", "nl", "pt", "ru", "zh-cn", "ca", "es", "vi")
CODE_FILES = {  # archive: suffixes of the files taken from it (C, JavaScript incl. minified, Python)
    "gnureadline-8.2.10.tar.gz": (".c", ".h"),
    "jquery-3.7.1.tgz": (".js",),
    "six-1.16.0.tar.gz": (".py",),
}


def multilingual_pages(per_language: int = 2) -> dict[str, list[str]]:
    """The first pages of each language in the shared crawl, extracted as the extract stage does."""
    from corpus.text.extract import extract_text, normalize_text
    from corpus.text.warc import RawRecord, decode_html, iter_warc

    lang_of = re.compile(r"\.(" + "|".join(LANGUAGES) + r")\.html$")
    pages: dict[str, list[str]] = {lang: [] for lang in LANGUAGES}
    for warc in sorted((SHARED_DATA / "warc").glob("*.warc.gz")):
        for rec in iter_warc(warc):
            m = lang_of.search(rec.url) if isinstance(rec, RawRecord) else None
            if m and len(pages[m.group(1)]) < per_language:
                text = normalize_text(extract_text(decode_html(rec.payload, rec.content_type)[0]))
                if text:
                    pages[m.group(1)].append(text)
        if all(len(p) == per_language for p in pages.values()):
            break
    return pages


def code_texts(per_archive: int = 4) -> list[str]:
    texts = []
    for archive, suffixes in CODE_FILES.items():
        with tarfile.open(SHARED_DATA / "code" / archive) as tar:
            members = sorted(
                (m for m in tar.getmembers() if m.isfile() and m.name.endswith(suffixes)),
                key=lambda m: m.name,
            )
            texts += [tar.extractfile(m).read().decode("utf-8") for m in members[:per_archive]]
    return texts


#: what real text rarely holds but a tokenizer must get right: normalization forms, emoji, controls,
#: whitespace runs around OLMo's 23 added space tokens, the added and special tokens' own strings
EDGE_CASES = [
    "",
    " ",
    "\n",
    "café Café",  # NFC
    unicodedata.normalize("NFD", "café Ångström ỗ 한국어 ﬁ ℌ Å"),  # NFD: HF composes before the split
    unicodedata.normalize("NFD", "é  é<|endoftext|>é   |||IP_ADDRESS|||é\u212b") + "\u0301<|padding|>\u0301",
    "\u0301 starts with a lone combining mark, e\u0301\u0301\u0323 stacks several",
    "\u1100\u1161\u11a8 conjoining jamo, \U00011935\U00011930 Dives Akuru (Unicode 13)",
    "👍🏽 👨‍👩‍👧‍👦 🇩🇪🇯🇵 ❤️ 🫠 emoji, ZWJ sequences, flags, variation selectors",
    "\x00\x01\x07\x1b[31mred\x1b[0m\x7f\x85\u200b\u200d\u2028\u2029\ufeff controls and invisibles",
    "tabs\t\t\tand\r\nCRLF\r\rand\x0b\x0cform feeds",
    "".join(" " * n + str(n) for n in range(1, 60)),  # every run length up to 59 spaces
    "x" + " " * 100 + "\n" + " " * 49 + "y" + "\u00a0" * 5 + "\u3000\u3000z" + " " * 30,
    "<|endoftext|> at the start, in the<|endoftext|>middle and at the end<|endoftext|>",
    "<|padding|>|||IP_ADDRESS|||, |||EMAIL_ADDRESS||| and |||PHONE_NUMBER||| but <|endoftext| and |IP_ADDRESS|",
    "  <|endoftext|>  |||IP_ADDRESS|||  ",
    "I'm, you're, he'll, it's, we'd, they've; I'M, YOU'RE, IT'S, 'ſ (long s folds to s)",
    "0123456789 1234567890123 ١٢٣٤٥ ０１２３ ² ½ Ⅻ",
    "日本語のテキスト、中文文本。한국어 텍스트. Русский текст. Tiếng Việt có dấu.",
    "\\p{L}+ ?[^\\s] (?!\\S) regex-looking text",
]


def head(text: str, max_chars: int = 6000) -> str:
    """The text up to the last line break before ``max_chars`` (keeps the test fast, the text real)."""
    return text if len(text) <= max_chars else text[: text.rfind("\n", 0, max_chars) + 1 or max_chars]


@pytest.fixture(scope="module")
def proof_texts() -> dict[str, list[str]]:
    pages = multilingual_pages()
    with gzip.open(SHARED_DATA / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        perl = [json.loads(line)["text"] for line in f][:10]
    return {
        **{f"web-{lang}": [head(t) for t in p] for lang, p in pages.items()},
        "code": [head(t) for t in code_texts()],
        "perl-doc": [head(t) for t in perl],
        "edge": EDGE_CASES,
    }


@pytest.fixture(scope="module")
def trained_artifact(tmp_path_factory, proof_texts) -> Path:
    """A small BPE trained here on Perl's docs: a third artifact, and one cheap to alter."""
    from corpus.text.tokenizer import train_bpe

    path = tmp_path_factory.mktemp("trained") / "trained.json"
    train_bpe(proof_texts["perl-doc"], 1000, path)
    return path


@pytest.fixture(scope="module", params=[OLMO, CL100K], ids=["olmo", "cl100k"])
def both_paths(request) -> PinnedTokenizer:
    return PinnedTokenizer(request.param)


def assert_same_ids(tok: PinnedTokenizer, texts: list[str], label: str) -> int:
    fast, hf = tok.encode_batch(texts), tok.encode_batch_hf(texts)
    for text, a, b in zip(texts, fast, hf, strict=True):
        if not np.array_equal(a, b):
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            pytest.fail(
                f"{label}: ids differ at token {i}: fast {a[i : i + 8].tolist()} hf {b[i : i + 8].tolist()}"
                f" in {text[:200]!r}"
            )
        assert a.dtype == b.dtype == tok.dtype
    return sum(a.shape[0] for a in fast)


def test_both_shipped_artifacts_take_the_fast_path(both_paths):
    assert both_paths.encoder == "tiktoken" and both_paths.fast_path_refused is None


def test_the_crawl_has_all_thirteen_languages(proof_texts):
    assert {k for k, v in proof_texts.items() if k.startswith("web-") and len(v) == 2} == {
        f"web-{lang}" for lang in LANGUAGES
    }


def test_fast_path_ids_equal_hf_on_real_multilingual_text_code_and_edge_cases(both_paths, proof_texts):
    compared = {label: assert_same_ids(both_paths, texts, label) for label, texts in proof_texts.items()}
    assert all(n > 0 for n in compared.values()) and sum(compared.values()) > 50_000


#: big blocks of one kind of letter (CJK, Hangul syllables, private use): only their first and last
#: 256 code points, where a newer Unicode version adds characters, go into the test
UNIFORM_BLOCKS = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xF8FF))


def test_fast_path_ids_equal_hf_for_every_kind_of_code_point_of_the_bmp(both_paths):
    """Each character next to a letter, itself, a digit, an apostrophe and whitespace: the split
    classes (``\\s``, ``\\p{L}``, ``\\p{N}``, case folding) of tiktoken's regex engine and HF's must agree.
    (The benchmark runs all 1,112,064 code points.)"""
    chars = [
        chr(c)
        for c in range(0x10000)
        if not 0xD800 <= c < 0xE000 and not any(lo + 256 <= c <= hi - 256 for lo, hi in UNIFORM_BLOCKS)
    ]
    texts = ["".join(f"x{c}{c}1 '{c}\n" for c in chars[i : i + 512]) for i in range(0, len(chars), 512)]
    assert len(chars) > 20_000 and assert_same_ids(both_paths, texts, "bmp") > 100_000


def test_a_lone_surrogate_is_refused_by_both_paths(both_paths):
    for encode in (both_paths.encode_batch, both_paths.encode_batch_hf):
        with pytest.raises(TypeError):
            encode(["text with a lone \ud800 surrogate"])


def tiny_bpe_artifact(path, merges: list[tuple[str, str]]) -> None:
    """A byte-level BPE over the 256 byte characters (ids 0-255) plus the tokens of ``merges``, in order."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.save(str(path))


def test_a_vocabulary_whose_tokens_hf_cannot_reach_is_refused_and_encoded_by_hf(tmp_path):
    """Rules ``b c``, ``a b``, ``ab c``: HF turns "abc" into ``a``, ``bc`` and stops (``a bc`` is no rule),
    while tiktoken, merging whatever concatenates to a token, would give ``abc``. The load-time check
    (HF must encode every token's own bytes to that token) is what catches it."""
    import tiktoken

    path = tmp_path / "tiny.json"
    tiny_bpe_artifact(path, [("b", "c"), ("a", "b"), ("ab", "c")])
    tok = PinnedTokenizer(path)
    assert tok.encoder == "hf" and "does not encode token 'abc' to itself" in tok.fast_path_refused
    assert (
        tok.encode_batch(["abc"], eos=False)[0].tolist()
        == [t.id for t in tok.tok.model.tokenize("abc")]
        == [tok.tok.token_to_id("a"), tok.tok.token_to_id("bc")]
    )
    ranks = {bytes([i]): i for i in range(256)} | {b"bc": 256, b"ab": 257, b"abc": 258}  # unchecked
    naive = tiktoken.Encoding("naive", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})
    assert naive.encode_ordinary("abc") == [258]  # what an unchecked fast path would have written


def test_a_tokenizer_trained_here_takes_the_fast_path_with_the_same_ids(trained_artifact, proof_texts):
    tok = PinnedTokenizer(trained_artifact)
    assert tok.encoder == "tiktoken"
    texts = proof_texts["perl-doc"] + proof_texts["web-ru"] + proof_texts["edge"]
    assert assert_same_ids(tok, texts, "trained") > 10_000


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda s: s.update(normalizer={"type": "NFKC"}), "normalizer"),
        (lambda s: s["pre_tokenizer"].update(add_prefix_space=True), "pre-tokenizer"),
        (
            lambda s: s.update(
                pre_tokenizer={
                    "type": "Split",
                    "pattern": {"Regex": r"\w+|\W+"},
                    "behavior": "Isolated",
                    "invert": False,
                }
            ),
            "pre-tokenizer",
        ),
        (lambda s: s["added_tokens"][0].update(lstrip=True), "lstrip"),
        (
            lambda s: s.update(
                truncation={"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}
            ),
            "truncation",
        ),
        (lambda s: s["model"]["merges"].insert(0, s["model"]["merges"].pop(100)), "ids do not rise"),
    ],
    ids=["nfkc", "prefix-space", "other-regex", "lstrip", "truncation", "merge-order"],
)
def test_an_artifact_the_fast_path_does_not_reproduce_falls_back_to_hf(
    tmp_path, trained_artifact, change, reason, proof_texts
):
    spec = json.loads(trained_artifact.read_text())
    change(spec)
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(spec))
    tok = PinnedTokenizer(path)
    assert tok.encoder == "hf" and reason in tok.fast_path_refused
    texts = proof_texts["edge"] + proof_texts["web-ja"]
    assert all(
        np.array_equal(a, b) for a, b in zip(tok.encode_batch(texts), tok.encode_batch_hf(texts), strict=True)
    )


def test_the_stage_writes_the_bytes_hf_ids_would_give(tmp_path, proof_texts):
    """Shards of real documents through the tokenize stage on 2 ranks, 7 documents a batch (so the
    .bin is streamed in many appends): every .bin/.idx equals write_indexed_shard of HF's ids."""
    from corpus.formats.megatron import write_indexed_shard
    from tests.documents import make_doc
    from tests.snapshot.conftest import make_stage_dir, split, write_config

    texts = [t for label, ts in sorted(proof_texts.items()) for t in ts[:1] if label.startswith("web-")]
    texts += proof_texts["edge"] + proof_texts["code"][::3] + proof_texts["perl-doc"][:3]
    docs = [
        make_doc(t, source="mixed", url=f"https://x.example/{i}", raw_digest=f"{i:064x}")
        for i, t in enumerate(texts)
        if t
    ]
    shards = split(docs, 3)
    make_stage_dir(tmp_path / "in", shards)
    config = write_config(tmp_path / "c.toml", tokenize={"tokenizer": str(OLMO), "batch_size": 7})
    run_mpi(
        2,
        "-m",
        "hpc_jobs.tokenize",
        "--in",
        str(tmp_path / "in"),
        "--out",
        str(tmp_path / "out"),
        "--config",
        str(config),
    )
    hf = PinnedTokenizer(OLMO, fast=False)
    for name, shard_docs in shards.items():
        ref = write_indexed_shard(
            tmp_path / "ref" / name, hf.encode_batch([d.text for d in shard_docs]), "uint16"
        )
        for ref_file in ref:
            assert (tmp_path / "out" / "tokens" / ref_file.name).read_bytes() == ref_file.read_bytes()
    run_info = json.loads((tmp_path / "out" / "manifest.json").read_text())["run_info"]
    assert (run_info["encoder"], run_info["fast_path_refused"]) == ("tiktoken", None), (
        "the manifest says which path ran"
    )
