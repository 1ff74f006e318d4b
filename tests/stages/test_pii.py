"""The PII scrub replaces values, not shapes: real text of the shared data keeps its version strings,
package names and digit groups, and each replacement is recorded as a span of the text before it."""

from __future__ import annotations

import gzip
import json

import pytest

from bench.bench_pii import PERL_DOC_ADDRESSES
from corpus.signals.pii import (
    CODE_SAFE_KINDS,
    KINDS,
    PLACEHOLDERS,
    find_pii,
    iban_ok,
    is_card_number,
    scrub_pii,
    ssn_ok,
)
from corpus.text.extract import extract_text
from hpc_jobs.annotate.stage import AnnotateConfig, AnnotateStage, annotate_document
from tests.documents import make_doc
from tests.stages.warc_fixtures import real_pages

#: one IP address and one e-mail address
SERVER_AND_MAIL = "Server at 81.2.69.160, mail a@mailhost.org."


@pytest.fixture(scope="module")
def perl_doc(shared_data) -> list[str]:
    with gzip.open(shared_data / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def test_the_perl_manuals_lose_no_code_or_version_string(perl_doc):
    """The curated default (code-safe kinds) replaces e-mail addresses only; with every kind, the only
    other replacements are the manuals' quoted real addresses, none of their 5.0.2.9-style versions,
    ``Firefox/2.0.0.1`` user agents, ``$A::B`` / ``B::C`` names, ISBNs or ``1..1000000000000``."""
    safe = [s.kind for text in perl_doc for s in find_pii(text, CODE_SAFE_KINDS)]
    assert set(safe) == {"email"} and len(safe) > 500
    every = [
        (s.kind, text[s.start : s.end])
        for text in perl_doc
        for s in find_pii(text, KINDS)
        if s.kind != "email"
    ]
    assert {kind for kind, _ in every} == {"ip"}
    assert {value for _, value in every} == PERL_DOC_ADDRESSES


def test_real_web_pages_have_no_pii_but_their_addresses(shared_data):
    """Thirty pages of the crawl in 13 languages (installation guides full of versions, sizes and
    addresses): nothing but public IPv4 addresses in an address context is found."""
    texts = [
        extract_text(p.decode("utf-8")) for part in (0, 1) for _, p in real_pages(shared_data, 15, part=part)
    ]
    found = [(s.kind, t[s.start : s.end]) for t in texts for s in find_pii(t)]
    assert {kind for kind, _ in found} <= {"ip", "email"}


@pytest.mark.parametrize(
    "text",
    [
        "Mozilla/5.0 (X11; U; Linux i686; en-US; rv:1.8.1.1) Gecko/20061204 Firefox/2.0.0.1",
        "Chrome/120.0.6099.109 Safari/537.36",
        "the AIX C compiler vac version 5.0.0.0 may produce buggy code",
        "xlC.C     3.1.4.10 or 3.6.6.0 or 4.0.2.2",
        "a compound name (like C<$A::B>) or B::C, DB::DB and a::b",
        "Literals of the form C<v1.2.3.4> are now parsed as v-strings",
        "the LAN server 192.168.1.10 and loopback 127.0.0.1",
    ],
)
def test_versions_user_agents_and_package_names_are_not_ip_addresses(text):
    assert scrub_pii(text).counts()["ip"] == 0


@pytest.mark.parametrize(
    "text",
    [
        "Connection from 81.2.69.160 refused",
        "IP address: 81.2.69.160",
        "see http://81.2.69.160/index.html",
        "proxy 81.2.69.160:8080",
        '81.2.69.160 - - [08/Feb/2007:12:00:00 +0000] "GET / HTTP/1.1" 200 512',
        "the mirror 2a00:1450:4001:82a::200e",
        "2001:4860:4860:0:0:0:0:8888",
    ],
)
def test_ip_addresses_in_an_address_context_are_found(text):
    assert scrub_pii(text).counts()["ip"] == 1


def test_card_numbers_need_an_issuer_a_luhn_check_and_more_than_a_repeated_digit():
    assert is_card_number("4539148803436467") and is_card_number("371449635398431")
    assert not is_card_number("4539148803436468"), "fails Luhn"
    assert not is_card_number("0000000000000"), "thirteen zeros"
    assert not is_card_number("4111111111111111"), "a repeated test number identifies nobody"
    assert not is_card_number("9780596004927"), "an ISBN passes Luhn but has no issuer"
    assert scrub_pii("Paid with 4539-1488-0343-6467, 3714 496353 98431.").counts()["credit_card"] == 2
    assert scrub_pii("ranges like 1..1000000000000 and 4539 14880343 6467").counts()["credit_card"] == 0


def test_ibans_need_their_countrys_length_and_the_mod_97_check():
    assert iban_ok("GB82WEST12345698765432") and iban_ok("DE89370400440532013000")
    assert not iban_ok("GB83WEST12345698765432") and not iban_ok("DE8937040044053201300")
    assert scrub_pii("IBAN DE89 3704 0044 0532 0130 00 or GB82WEST12345698765432").counts()["iban"] == 2


def test_ssns_in_never_issued_ranges_are_not_replaced():
    assert ssn_ok("536", "22", "8726")
    for area, group, serial in (
        ("000", "12", "3456"),
        ("666", "12", "3456"),
        ("912", "12", "3456"),
        ("536", "00", "8726"),
        ("536", "22", "0000"),
        ("078", "05", "1120"),
    ):
        assert not ssn_ok(area, group, serial)
    assert scrub_pii("SSN 536-22-8726, SSN: 536 22 8726, not 666-12-3456").counts()["us_ssn"] == 2


@pytest.mark.parametrize(
    "text",
    [
        "+44 20 7946 0958",
        "+33 1 23 45 67 89",
        "+49 (0)30 12345678",
        "+1 (415) 555-0132",
        "(415) 555-0132",
        "415-555-0132",
        "Tel. 020 7946 0958",
        "Téléphone : 01 23 45 67 89",
    ],
)
def test_international_north_american_and_spaced_phone_numbers_are_found(text):
    assert scrub_pii(text).counts()["phone"] == 1


def test_digit_rows_that_are_not_phone_numbers_stay():
    for text in (
        "free:    8  16  32  64  128  256 512 1024 2048 4096 8192",
        "released 2026-03-01",
        "x = 1+234567890;",
        "+0 1234 5678 (no country code starts with 0)",
    ):
        assert scrub_pii(text).counts()["phone"] == 0


def test_the_spans_are_offsets_of_the_text_before_the_scrub_so_it_can_be_reversed(shared_data):
    (_, payload), *_ = real_pages(shared_data, 1, host_prefix="debian-faq-de", part=1)
    original = extract_text(payload.decode("utf-8"))
    planted = ["anna@uni-bonn.de", "+49 30 12345678", "DE89 3704 0044 0532 0130 00"]
    text = original + "\n" + "\n".join(f"Kontakt: {v}." for v in planted)
    scrubbed = scrub_pii(text)
    assert [text[s.start : s.end] for s in scrubbed.spans] == planted
    assert _unscrub(scrubbed.text, text, scrubbed.spans) == text


def _unscrub(scrubbed: str, original: str, spans) -> str:
    """The scrubbed text with each placeholder replaced by the value at its span of the original."""
    out, at = [], 0
    for s in spans:
        i = scrubbed.index(PLACEHOLDERS[s.kind], at)
        out += [scrubbed[at:i], original[s.start : s.end]]
        at = i + len(PLACEHOLDERS[s.kind])
    return "".join(out) + scrubbed[at:]


def test_curated_and_code_tiers_are_scanned_with_the_code_safe_kinds_by_default():
    stage = AnnotateStage(AnnotateConfig())
    assert stage.pii_kinds("curated") == stage.pii_kinds("code") == CODE_SAFE_KINDS
    assert stage.pii_kinds("web") == KINDS
    everything = AnnotateStage(AnnotateConfig(code_safe_tiers=[]))
    assert everything.pii_kinds("curated") == KINDS
    assert AnnotateStage(AnnotateConfig(scrub_pii=False)).pii_kinds("web") == ()
    with pytest.raises(ValueError, match="unknown PII kinds"):
        AnnotateConfig(pii_kinds=["ssn"])


def test_the_document_records_each_replacement_and_its_counts():
    doc = make_doc(SERVER_AND_MAIL, raw_digest="0")
    out = annotate_document(doc, lambda t: 0.5)
    assert out.text == "Server at <IP_ADDRESS>, mail <EMAIL>." and out.derived_from == doc.doc_id
    assert json.loads(out.annotation("annotate", "pii_spans").value) == [[10, 21, "ip"], [28, 42, "email"]]
    assert out.scores["pii_ip"] == out.scores["pii_email"] == 1.0 and out.scores["pii_iban"] == 0.0


def test_kinds_not_scanned_get_no_count_rather_than_a_zero():
    doc = make_doc(SERVER_AND_MAIL, tier="curated", raw_digest="0")
    out = annotate_document(doc, lambda t: 0.5, CODE_SAFE_KINDS)
    assert out.text == "Server at 81.2.69.160, mail <EMAIL>."
    assert out.scores["pii_email"] == 1.0 and "pii_ip" not in out.scores and "pii_phone" not in out.scores


def test_the_gates_skip_only_texts_no_pattern_matches(shared_data, perl_doc, monkeypatch):
    """Each pattern is run only on a text holding its gate (pii._GATES): on real pages, the Perl
    manuals and those texts with every kind and its look-alikes planted, every match holds its gate,
    and the spans found are those of every pattern run on every text."""
    import random

    from bench.bench_pii import plant
    from corpus.signals import pii

    pages = [
        extract_text(p.decode("utf-8"))
        for part in (0, 1, 2)
        for _, p in real_pages(shared_data, 20, part=part)
    ]
    planted = [t for t, _ in plant(pages, random.Random(0), 40)] + [
        t for t, _ in plant(pages, random.Random(1), 40, neutral=True)
    ]
    spaced = ["SSN 123 45 6789", "Social Security No. 512 34 1234.", "ss# 219 09 9998 and tel. 030 1234 5678"]
    texts = pages + perl_doc[:40] + planted + spaced
    matched = set()
    for text in texts:
        for pattern, gates in pii._GATES.items():
            for m in pattern.finditer(text):
                matched.add(pattern.pattern)
                assert all(g.search(m.group(0)) for g in gates), (pattern.pattern, m.group(0))
    assert len(matched) == len(pii._GATES), "every pattern matched somewhere"
    gated = [find_pii(t) for t in texts]
    monkeypatch.setattr(pii, "_scan", lambda pattern, text: pattern.finditer(text))
    assert [find_pii(t) for t in texts] == gated
