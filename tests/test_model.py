"""The shared data model: identities follow content, and yield counts always reconcile."""

import subprocess
import sys
from dataclasses import replace

import pytest

from corpus.model import Annotation, Document, Filtered, Kept, Quarantined, QuarantineRecord, YieldCounts
from tests.conftest import ROOT


def doc(text="Hello world", source="web-a", **kw):
    base = dict(source_tier="web", url="https://a.example/x", crawl_date="2026-03-01", raw_digest="r" * 64)
    base.update(kw)
    return Document.create(text=text, source=source, **base)


def test_doc_id_is_a_function_of_text_and_source_only():
    a = doc(url="https://a.example/1", crawl_date="2026-03-01")
    b = doc(url="https://b.example/2", crawl_date="2026-06-01")
    assert a.doc_id == b.doc_id
    assert doc(source="web-b").doc_id != a.doc_id
    assert doc(text="Hello world!").doc_id != a.doc_id
    assert len(a.doc_id) == 32


def test_changing_text_derives_a_new_document_and_keeps_lineage():
    a = doc()
    b = a.with_text("Hello")
    assert b.doc_id != a.doc_id and b.derived_from == a.doc_id
    assert b.text_digest != a.text_digest
    assert a.with_text(a.text) is a


def test_json_round_trip_is_exact():
    a = doc().annotate(Annotation("annotate", "word_count", 2, "pass"), lang="en", lang_confidence=0.97)
    a = replace(a, scores={"quality": 0.5})
    again = Document.from_dict(__import__("json").loads(a.to_json_bytes()))
    assert again == a
    assert again.to_json_bytes() == a.to_json_bytes()


def test_unknown_fields_are_refused():
    d = doc().to_dict()
    d["surprise"] = 1
    with pytest.raises(ValueError, match="surprise"):
        Document.from_dict(d)


def test_latest_annotation_wins():
    a = doc().annotate(Annotation("s", "x", 1), Annotation("s", "x", 2))
    assert a.annotation("s", "x").value == 2
    assert a.annotation("s", "missing") is None


def test_yield_counts_reconcile_by_source_and_language():
    y = YieldCounts()
    en = doc(lang="en")
    y.count(Kept(en), 100)
    y.count(Filtered(doc(text="other", lang="de"), "quality"), 50)
    y.count(Quarantined(QuarantineRecord(stage="x", reason="bad_utf8", raw_digest="d", source="web-a")), 10)
    total = y.total()
    assert (total.docs_in, total.docs_out, total.bytes_in) == (3, 1, 160)
    assert total.reconciles()
    assert set(y.by(1)) == {"en", "de", "und"}
    assert YieldCounts.from_dict(y.to_dict()).to_dict() == y.to_dict()


def test_a_document_passed_on_unparsed_is_counted_as_the_same_document_kept():
    """A stage that passes a document on as the line it read (``Passed``) accounts it exactly as if it
    had parsed it and kept it."""
    from corpus.model import Passed

    d = doc(text="héllo wörld", lang="en")
    kept, passed = YieldCounts(), YieldCounts()
    kept.count(Kept(d), 13)
    passed.count(Passed(d.to_json_bytes(), d.group, len(d.text.encode("utf-8"))), 13)
    assert passed.to_dict() == kept.to_dict() and passed.total().reconciles()


def test_a_documents_dict_is_every_field_with_annotations_as_dicts():
    from dataclasses import asdict

    from corpus.model import Annotation, Document
    from tests.documents import make_doc

    doc = make_doc("hello", crawl_date="2026-01-01", scores={"quality": 0.5}).annotate(
        Annotation("policy", "min_quality", 0.5, "pass"), dup_of="ab" * 16
    )
    expected = asdict(doc) | {"annotations": [asdict(a) for a in doc.annotations]}
    assert doc.to_dict() == expected and list(doc.to_dict()) == list(expected)
    assert Document.from_dict(doc.to_dict()) == doc


def _imported_after(prelude: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after ``prelude`` and importing the data model."""
    code = (
        f"import sys\n{prelude}\nimport corpus.model\nprint(' '.join(m.split('.')[0] for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_the_data_model_imports_no_numpy():
    """Every process imports it, an extract worker too, which runs under a data cap: numpy's mapped data
    would count against the pages' own (tests/stages/test_extract.py, the memory limit)."""
    assert "numpy" not in _imported_after("")
    assert "numpy" in _imported_after("import numpy"), "the probe sees numpy where it is imported"
