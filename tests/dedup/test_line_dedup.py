"""line_dedup: lines in more documents than the corpus's limit are removed from every web document, with
what each document lost recorded; code and curated documents keep every line."""

from __future__ import annotations

import tarfile
from collections import Counter

import numpy as np
import pytest

from corpus.report.removed_lines import most_removed_lines
from corpus.text.normalize import key_form, line_key
from tests.dedup.dedup_corpus import make_doc, perl_sections, write_stage_dir
from tests.dedup.stage_io import filtered_records, kept_docs, manifest, output_digests, run_stage

HEADER = "Debian Documentation Project -- Home | Next | Previous"
FOOTER = "Copyright (c) 2026 The Example Docs Team. All rights reserved."
AT_LIMIT = "This line appears in exactly ten documents."
OVER_LIMIT = "This line appears in eleven documents."


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    sections = perl_sections(shared_data)[:120]
    docs = []
    for i, body in enumerate(sections):
        lines = []
        if i % 4 == 0:  # 30 documents, some with the header in other case and spacing
            lines.append(HEADER if i % 8 else "  " + HEADER.upper().replace(" | ", " \t|  "))
        lines.append(body)
        if i < 10:
            lines.append(AT_LIMIT)
        if 10 <= i < 21:
            lines.append(OVER_LIMIT)
        if i % 3 == 0:
            lines.append(FOOTER)
            lines.append(FOOTER)  # twice in one document still counts as one document
        docs.append(make_doc("\n".join(lines) + "\n", i))
    docs.append(make_doc(f"{HEADER}\n\n{FOOTER}\n", 999))  # nothing but boilerplate
    in_dir = write_stage_dir(tmp_path_factory.mktemp("lines") / "in", docs, shards=4)
    return in_dir, docs


def norm(line: str) -> str | None:
    """A line's key form; None for a line without a letter or digit (never counted)."""
    return key_form(line) if line_key(line) is not None else None


def frequent_lines(docs, limit: int) -> set[str]:
    """The rule, plainly: key forms of lines with a letter or digit found in more than ``limit`` documents."""
    counts = Counter(n for d in docs for n in {norm(x) for x in d.text.splitlines()} if n)
    return {line for line, c in counts.items() if c > limit}


def test_frequent_lines_are_removed_and_rare_ones_kept(corpus, tmp_path):
    in_dir, docs = corpus
    out = tmp_path / "out"
    run_stage("line_dedup", 2, in_dir, out)
    kept = kept_docs(out)
    frequent = frequent_lines(docs, 10)
    assert {norm(x) for x in (HEADER, FOOTER, OVER_LIMIT)} <= frequent
    assert norm(AT_LIMIT) not in frequent
    for d in kept:
        assert not frequent & {norm(line) for line in d.text.splitlines()}, d.url
    assert sum(AT_LIMIT in d.text for d in kept) == 10
    by_url = {d.url: d for d in docs}
    doc0 = next(d for d in kept if d.url.endswith("/0"))  # had header, at-limit line and two footers
    original = by_url[doc0.url]
    expected_removed = sum(norm(x) in frequent for x in original.text.splitlines())
    assert expected_removed >= 3
    assert doc0.annotation("line_dedup", "lines_removed").value == expected_removed
    assert doc0.annotation("line_dedup", "bytes_removed").value == len(original.text.encode()) - len(
        doc0.text.encode()
    )
    assert doc0.derived_from == original.doc_id and doc0.doc_id != original.doc_id
    untouched = [d for d in docs if not frequent & {norm(x) for x in d.text.splitlines()}]
    assert untouched and all(d in kept for d in untouched), "documents without frequent lines pass unchanged"
    [only_boilerplate] = filtered_records(out)
    assert only_boilerplate["reason"] == "all_lines_frequent"
    m = manifest(out)
    assert m["totals"]["in"] == len(docs) == m["totals"]["out"] + 1
    assert m["extra"]["frequent_lines"] == len(frequent)
    # the card names the removed lines with the number of documents that lost each
    shown = most_removed_lines(out, top=len(frequent) + 1)
    losers = Counter(n for d in docs for n in {norm(x) for x in d.text.splitlines()} if n in frequent)
    assert {norm(t["line"]): t["docs"] for t in shown["top"]} == losers
    assert [t["docs"] for t in shown["top"]] == sorted(losers.values(), reverse=True)
    assert shown["removals"] == sum(losers.values()) and shown["top"][0]["docs"] == 41  # the footer


def test_same_outputs_on_1_2_and_4_ranks(corpus, tmp_path):
    digests = []
    for ranks in (1, 2, 4):
        run_stage("line_dedup", ranks, corpus[0], tmp_path / f"r{ranks}")
        digests.append(output_digests(tmp_path / f"r{ranks}"))
    assert digests[0] == digests[1] == digests[2]


def test_a_line_key_keeps_punctuation_operators_and_digits():
    assert line_key("x = a + b;") != line_key("x = a - b;")
    assert line_key("} else {") != line_key("else:")
    assert line_key("pi is 3.14") != line_key("pi is 314")
    assert line_key("Home  | Next") == line_key("home | next")  # case and spacing are not content
    assert line_key("}") is None and line_key("  ----  ") is None and line_key("") is None


def test_code_and_curated_documents_keep_their_lines_and_do_not_count(shared_data, tmp_path):
    """niquests' 40 real Python files as the code tier: nothing is removed (`from __future__ import
    annotations`, `return None` are what code is made of); the same files as web documents lose their
    most common lines."""
    with tarfile.open(shared_data / "code" / "niquests-3.11.0.tar.gz") as tar:
        members = sorted((m for m in tar.getmembers() if m.name.endswith(".py")), key=lambda m: m.name)
        texts = [tar.extractfile(m).read().decode("utf-8") for m in members]
    assert len(texts) == 40
    for tier, expect_removed in (("code", False), ("web", True)):
        docs = [make_doc(t, i, source=f"{tier}-src", tier=tier) for i, t in enumerate(texts)]
        in_dir = write_stage_dir(tmp_path / tier / "in", docs, shards=2)
        run_stage("line_dedup", 1, in_dir, tmp_path / tier / "out", None)
        kept = kept_docs(tmp_path / tier / "out")
        lost = sum(
            d.annotation("line_dedup", "lines_removed").value
            for d in kept
            if d.annotation("line_dedup", "lines_removed")
        )
        if expect_removed:
            assert lost > 0 and manifest(tmp_path / tier / "out")["extra"]["frequent_lines"] > 0
        else:
            assert lost == 0 and sorted(d.text for d in kept) == sorted(texts)
            assert manifest(tmp_path / tier / "out")["extra"]["distinct_lines"] == 0


def test_the_limit_scales_with_the_corpus_above_its_floor():
    from hpc_jobs.line_dedup.stage import LineDedupConfig

    cfg = LineDedupConfig()
    assert cfg.limit(1_000) == 10 and cfg.limit(10**8) == 10  # the floor
    assert cfg.limit(10**9) == 100 and cfg.limit(10**10) == 1_000  # one document in 10^7
    assert LineDedupConfig(max_docs_fraction=0.01, max_docs_per_line=2).limit(1_000) == 10


def test_threshold_is_configurable(corpus, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[line_dedup]\nmax_docs_per_line = 9\n")
    run_stage("line_dedup", 2, corpus[0], tmp_path / "out", cfg)
    assert sum(AT_LIMIT in d.text for d in kept_docs(tmp_path / "out")) == 0
    assert manifest(tmp_path / "out")["extra"]["frequent_lines"] == len(frequent_lines(corpus[1], 9))


def test_counts_of_a_key_split_across_batches_are_summed_before_the_limit_is_applied():
    import io

    from hpc_jobs.line_dedup.stage import KeyTotals

    out = io.BytesIO()
    totals = KeyTotals(out, limit=3)
    u = np.uint64
    totals.add(np.array([1, 1, 5], dtype=u), np.array([1, 1, 2], dtype=u))  # key 5 goes on in the next batch
    totals.add(np.array([5, 7], dtype=u), np.array([2, 9], dtype=u))
    totals.add(np.array([8], dtype=u), np.array([3], dtype=u))
    totals.finish()
    assert np.frombuffer(out.getvalue(), dtype=">u8").tolist() == [5, 7]  # 1: 2, 5: 4, 7: 9, 8: 3 (not > 3)
    assert (totals.distinct, totals.frequent) == (4, 2)


def test_against_a_base_totals_add_the_bases_counts_and_are_probed_a_batch_of_keys_at_a_time(
    tmp_path, monkeypatch
):
    """KeyTotals with a base: each key's total is this build's count plus the base index's (summed over its
    generations), judged against the limit in key order as without a base; the totals wait until
    PROBE_BATCH keys are held, so the index is probed once per batch of keys, not per exchange batch."""
    import io

    from corpus.formats import dedup_index, dedup_keys
    from hpc_jobs.line_dedup import stage as line_stage

    def rows(keys, counts):
        as_bytes = np.ascontiguousarray(np.asarray(keys, np.uint64).astype(">u8")).view("V8")
        return dedup_keys.records("lines", as_bytes, dedup_keys.count_values(np.asarray(counts)))

    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(0, 2**64 - 1, 400, dtype=np.uint64))
    mine = rng.integers(1, 4, len(keys)).astype(np.uint64)
    in_base = keys[::3]
    index = dedup_index.PersistentIndex.create(tmp_path / "lines", "lines", dedup_keys.line_key_params(), 4)
    index = index.add_generation("march", [rows(in_base, np.full(len(in_base), 2))])
    index = index.add_generation("may", [rows(in_base[::2], np.full(len(in_base[::2]), 1))])
    base = dedup_index.BaseGenerations(index, "digest")
    probes = []
    probe = dedup_index.PersistentIndex.probe
    monkeypatch.setattr(
        dedup_index.PersistentIndex,
        "probe",
        lambda self, k, **kw: probes.append(len(k)) or probe(self, k, **kw),
    )
    monkeypatch.setattr(line_stage, "PROBE_BATCH", 100)
    out = io.BytesIO()
    totals = line_stage.KeyTotals(out, limit=3, base=base)
    for at in range(0, len(keys), 7):  # exchange batches of 7 keys, each key's count sent in two rows
        k, c = keys[at : at + 7], mine[at : at + 7]
        totals.add(np.repeat(k, 2), np.repeat(c, 2))
    totals.finish()
    before = np.zeros(len(keys), np.uint64)
    before[::3] += 2
    before[::6] += 1
    expected = keys[2 * mine + before > 3]
    assert np.frombuffer(out.getvalue(), dtype=">u8").tolist() == expected.tolist()
    assert (totals.distinct, totals.frequent, totals.in_base) == (len(keys), len(expected), len(in_base))
    assert len(probes) <= len(keys) // 100 + 2 and sum(probes) == len(keys)


def test_the_pre_summing_table_counts_every_key_and_stays_within_its_capacity():

    from hpc_jobs.line_dedup.stage import KeyCounts

    rng = np.random.default_rng(7)
    table = KeyCounts(capacity=40, cap=5)
    truth: Counter = Counter()
    sent: Counter = Counter()

    def take(flushed):
        for keys, counts in flushed:
            assert len(keys) <= 40 + 10 and (keys[1:] > keys[:-1]).all()  # bounded, sorted, unique
            sent.update(dict(zip(keys.tolist(), counts.tolist(), strict=True)))

    for _ in range(300):  # documents: a few common keys (boilerplate) and many rare ones
        common = rng.integers(0, 8, 3, dtype=np.uint64)
        rare = rng.integers(2**63, 2**64 - 1, 6, dtype=np.uint64)
        doc = np.unique(np.concatenate([common, rare]))
        truth.update(doc.tolist())
        take(table.add(doc))
    take(table.drain())
    assert set(sent) == set(truth)
    # a flushed count is capped at cap (the limit + 1): the sums decide exactly what the limit decides
    assert all(min(sent[k], 5) == min(truth[k], 5) for k in truth)
    assert max(sent[k] for k in range(8)) < 300, "common keys leave once per flush, not once per document"


def test_frequent_lines_are_searched_in_the_map_without_copying_it(tmp_path):
    import tracemalloc

    from hpc_jobs.line_dedup.stage import FREQUENT, FrequentLines, key_part, part_name

    rng = np.random.default_rng(3)
    keys = np.append(rng.integers(0, 2**64 - 1, 1 << 20, dtype=np.uint64), np.uint64(7 << 56))
    keys = np.unique(np.append(keys, np.uint64((7 << 56) | 1))).astype(">u8")
    (tmp_path / f"{part_name(0)}{FREQUENT}").write_bytes(keys.tobytes())
    frequent = FrequentLines(tmp_path, parts=1)
    assert key_part((7 << 56).to_bytes(8, "big"), 1) == 0
    tracemalloc.start()
    try:
        for k in keys[::4096].tolist() + [7 << 56, (7 << 56) | 1]:  # the last two end in NUL bytes
            assert k.to_bytes(8, "big") in frequent
        assert (7 << 56 | 2).to_bytes(8, "big") not in frequent and None not in frequent
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < keys.nbytes // 16, f"a lookup copied {peak} bytes of an {keys.nbytes}-byte part"


def test_the_limit_must_fit_the_exchanged_count():
    from hpc_jobs.line_dedup.stage import LineDedupConfig

    with pytest.raises(ValueError, match="max_docs_per_line"):
        LineDedupConfig(max_docs_per_line=2**32 - 1)
