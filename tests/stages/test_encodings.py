"""ingest decodes pages as a browser would, and corrects a declared charset that the bytes contradict.

The pages are real UTF-8 pages of the shared crawls, re-encoded (characters the target encoding lacks
become numeric character references, which decode to the same text); the text extracted from each
version must equal the UTF-8 original's.
"""

from __future__ import annotations

import re
import tarfile

import pytest

from corpus.text.extract import extract_text, normalize_text, strip_invisible
from corpus.text.warc import RawRecord, decode_page, encoding_for_label, iter_warc
from tests.conftest import SAMPLE
from tests.stages.chain import docs, run_stage
from tests.stages.warc_fixtures import real_pages, warc_bytes

_META = re.compile(rb"<meta[^>]*charset[^>]*>", re.I)

# encoding -> (Python codec, sites of the first crawl written in a language it can represent,
#              a wrong label a misconfigured server would send with it)
ENCODINGS = {
    "windows-1252": ("cp1252", ("debian-faq-de", "debian-faq-fr", "maint-guide-es"), "utf-8"),
    "shift_jis": ("cp932", ("debian-faq-ja", "developers-reference-ja"), "iso-8859-1"),
    "euc-kr": ("cp949", ("debian-faq-ko",), "iso-8859-1"),
    "koi8-r": ("koi8_r", ("debian-faq-ru", "maint-guide-ru"), "windows-1251"),
    "gb18030": ("gb18030", ("debian-faq-zh-cn", "maint-guide-zh-cn"), "iso-8859-1"),
}


def _pages(shared_data, sites: tuple[str, ...], n: int = 2) -> list[tuple[str, bytes]]:
    return [page for site in sites for page in real_pages(shared_data, n, host_prefix=site, part=1)]


def _reencoded(payload: bytes, codec: str, meta: bytes) -> bytes:
    """The page in another encoding, its ``<meta charset>`` replaced by ``meta`` (b"": removed)."""
    html = payload.decode("utf-8").encode(codec, errors="xmlcharrefreplace")
    assert not html.isascii(), "the page must have text outside ASCII to test anything"
    return _META.sub(meta, html, count=1)


@pytest.fixture(scope="module")
def originals(shared_data) -> dict[str, list[tuple[bytes, str]]]:
    """Per encoding: the real UTF-8 pages and the text extracted from each."""
    return {
        enc: [(p, extract_text(p.decode("utf-8"))) for _, p in _pages(shared_data, sites)]
        for enc, (_, sites, _) in ENCODINGS.items()
    }


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("declaration", ["http", "meta", "none", "wrong_http", "wrong_meta"])
def test_a_reencoded_real_page_extracts_to_the_utf8_original(originals, encoding, declaration):
    codec, _, wrong = ENCODINGS[encoding]
    label = {"http": encoding, "wrong_http": wrong}.get(declaration, "")
    meta = {"meta": encoding, "wrong_meta": wrong}.get(declaration, "")
    for payload, text in originals[encoding]:
        body = _reencoded(payload, codec, f'<meta charset="{meta}">'.encode() if meta else b"")
        page = decode_page(body, f"text/html; charset={label}" if label else "text/html")
        assert extract_text(page.text) == text
        assert page.undecodable == 0
        assert page.declared == (
            encoding_for_label(wrong) if declaration.startswith("wrong") else label or meta
        )
        assert page.corrected == declaration.startswith("wrong")


def test_rightly_declared_utf8_pages_are_never_corrected():
    """Every page of the bundled crawl sample (490 pages, 13 languages) reads as plain UTF-8."""
    pages = [r for f in sorted((SAMPLE / "web").iterdir()) for r in iter_warc(f) if isinstance(r, RawRecord)]
    assert len(pages) > 400
    for r in pages:
        page = decode_page(r.payload, r.content_type)
        assert (page.text, page.encoding, page.corrected) == (r.payload.decode("utf-8"), "utf-8", False)


#: chardet's test suite (in the shared code archives): real pages saved in their legacy encoding, a
#: folder per encoding; the folders whose language the detector tells apart, file for file
CHARDET_FOLDERS = {  # folder -> (its Python codec, the WHATWG name ingest must find)
    "EUC-KR": ("cp949", "euc-kr"),
    "GB2312": ("gb18030", "gb18030"),  # GBK's superset, which decodes it the same
    "IBM866": ("cp866", "ibm866"),
    "KOI8-R": ("koi8_r", "koi8-r"),
    "TIS-620": ("cp874", "windows-874"),
    "iso-8859-5-russian": ("iso8859_5", "iso-8859-5"),
    "windows-1251-bulgarian": ("cp1251", "windows-1251"),
    "windows-1251-russian": ("cp1251", "windows-1251"),
    "windows-1252": ("cp1252", "windows-1252"),
    "windows-1255-hebrew": ("cp1255", "windows-1255"),
    "utf-8": ("utf-8", "utf-8"),
}


def test_real_pages_saved_in_legacy_encodings_are_detected_without_a_declaration(shared_data):
    """An HTML ``<meta>`` names none of them (their declarations are XML's, which HTML decoding does
    not read), so each is detected; the text must be the one its encoding gives."""
    checked = 0
    with tarfile.open(shared_data / "code" / "chardet-5.2.0.tar.gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if member.isfile() and len(parts) == 4 and parts[2] in CHARDET_FOLDERS:
                raw = tar.extractfile(member).read()
                codec, name = CHARDET_FOLDERS[parts[2]]
                page = decode_page(raw, "text/html")
                assert (page.text, page.encoding) == (raw.decode(codec), name), member.name
                checked += 1
    assert checked > 180


def test_iso_8859_1_ascii_and_latin1_are_windows_1252():
    for label in ("ISO-8859-1", "latin1", "us-ascii", " ascii "):
        assert encoding_for_label(label) == "windows-1252"
    page = decode_page(b"<p>\x93quoted\x94 \x80 5</p>", "text/html; charset=iso-8859-1")
    assert page.text == "<p>\u201cquoted\u201d \u20ac 5</p>" and not page.corrected


def test_a_byte_order_mark_wins_over_the_declarations():
    body = "<meta charset=koi8-r><p>café</p>".encode("utf-16-le")
    page = decode_page(b"\xff\xfe" + body, "text/html; charset=windows-1252")
    assert page.text == "<meta charset=koi8-r><p>café</p>" and page.encoding == "utf-16le"


def test_the_http_charset_wins_over_the_meta_prescan():
    body = "<meta charset=utf-8><p>Привет, как дела? Всё хорошо, спасибо.</p>".encode("koi8_r")
    page = decode_page(body, 'text/html; charset="KOI8-R"')
    assert page.encoding == page.declared == "koi8-r" and "Привет" in page.text


def test_the_meta_prescan_reads_http_equiv_skips_comments_and_stops_at_1024_bytes():
    text = "<p>Привет, как дела? Всё хорошо, спасибо, мой друг.</p>"
    equiv = b'<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">'
    assert decode_page(equiv + text.encode("cp1251"), "text/html").declared == "windows-1251"
    commented = b"<!-- <meta charset=koi8-r> -->" + equiv
    assert decode_page(commented + text.encode("cp1251"), "text/html").declared == "windows-1251"
    late = b"<!-- " + b"x" * 1024 + b" -->" + equiv
    assert decode_page(late + text.encode("cp1251"), "text/html").declared == ""


def test_a_utf16_meta_on_ascii_compatible_bytes_is_utf8():
    page = decode_page('<meta charset="utf-16"><p>café</p>'.encode(), "text/html")
    assert page.declared == page.encoding == "utf-8" and "café" in page.text


def test_a_utf8_page_labelled_iso_8859_1_is_not_mojibake(shared_data):
    (_, payload), *_ = real_pages(shared_data, 1, host_prefix="debian-faq-fr", part=1)
    page = decode_page(_META.sub(b'<meta charset="ISO-8859-1">', payload), "text/html; charset=ISO-8859-1")
    assert page.text == payload.decode("utf-8").replace(
        _META.search(payload).group(0).decode(), '<meta charset="ISO-8859-1">'
    )
    assert (page.declared, page.encoding) == ("windows-1252", "utf-8")
    assert "Ã©" not in page.text and "é" in page.text
    assert decode_page("<p>café</p>".encode(), "text/html; charset=latin1").text == "<p>café</p>"


def test_utf8_with_a_few_stray_bytes_stays_utf8_for_extract_to_repair(shared_data):
    (_, payload), *_ = real_pages(shared_data, 1, host_prefix="debian-faq-fr", part=1)
    damaged = payload.replace(b"</p>", b"\xff</p>", 3)
    page = decode_page(damaged, "text/html; charset=utf-8")
    assert page.encoding == "utf-8" and page.undecodable == 3 and not page.corrected


def test_a_cp1251_page_without_a_charset_is_ingested_and_extracted_not_quarantined(tmp_path, shared_data):
    """The whole path: ingest records the guess or the correction, extract keeps the page's text."""
    ru = real_pages(shared_data, 1, host_prefix="debian-faq-ru", part=1)[0]
    fr = real_pages(shared_data, 1, host_prefix="debian-faq-fr", part=1)[0]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.warc.gz").write_bytes(
        warc_bytes([(ru[0], _reencoded(ru[1], "cp1251", b""))], content_type="text/html")
    )
    (tmp_path / "in" / "b.warc.gz").write_bytes(
        warc_bytes([(fr[0], _META.sub(b"", fr[1]))], content_type="text/html; charset=iso-8859-1")
    )
    run_stage("ingest", 1, [tmp_path / "in"], tmp_path / "ingest")
    run_stage("extract", 1, [tmp_path / "ingest"], tmp_path / "extract")
    by_url = {d.url: d for d in docs(tmp_path / "extract")}
    assert not list(docs(tmp_path / "extract", "quarantine"))
    assert by_url[ru[0]].annotation("ingest", "charset_detected").value == "windows-1251"
    assert by_url[fr[0]].annotation("ingest", "charset_corrected").value == "windows-1252->utf-8"
    for url, payload in (ru, fr):
        assert by_url[url].text == _normalized(extract_text(payload.decode("utf-8")))


def _normalized(text: str) -> str:
    """What extract makes of trafilatura's text."""
    return normalize_text(strip_invisible(text)[0])
