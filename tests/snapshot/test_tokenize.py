"""The pinned tokenizer: identity by sha256, EOS after every document, the dtype from the vocabulary."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from corpus.digest import file_sha256
from corpus.tokenizer import DEFAULT_TOKENIZER, PinnedTokenizer, resolve_asset
from tests.conftest import run_corpus
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
    from corpus.tokenizer import TokenizerError

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

    from corpus.config import config_hash, stage_config
    from hpc_jobs.tokenize import TokenizeConfig

    path = tmp_path / "tokenizer.json"
    shutil.copy(OLMO, path)
    before = stage_config(TokenizeConfig, {"tokenizer": str(path)}, "tokenize")
    shutil.copy(CL100K, path)
    after = stage_config(TokenizeConfig, {"tokenizer": str(path)}, "tokenize")
    assert after.tokenizer_sha256 == file_sha256(CL100K) and config_hash(after) != config_hash(before)
