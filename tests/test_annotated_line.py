"""``annotated_line``: a document's line with head fields set and an annotation appended, without
parsing its text, is byte for byte what parsing, annotating and encoding the document writes."""

from __future__ import annotations

import json

import pytest

from corpus.model import Annotation, Document, annotated_line
from tests.dedup.dedup_corpus import make_doc, perl_pods

MEMBER = Annotation("minhash_dedup", "dup_cluster_size", 3, "fail")
FIELDS = {"dup_cluster_id": "0" * 32, "dup_cluster_size": 3, "dup_of": "f" * 32}


def parsed_path(line: bytes, annotation: Annotation, **fields) -> bytes:
    return Document.from_dict(json.loads(line)).annotate(annotation, **fields).to_json_bytes()


def test_real_documents_get_the_bytes_parsing_would_write(shared_data):
    for i, pod in enumerate(perl_pods(shared_data)[:40]):
        line = make_doc(pod["text"], i, quality=0.25 * (i % 4)).to_json_bytes()
        assert annotated_line(line, MEMBER, **FIELDS) == parsed_path(line, MEMBER, **FIELDS)


@pytest.mark.parametrize(
    "text",
    [
        'a text that quotes its own keys: ,"lang":"en","dup_of":"x"} and "annotations":[]',
        'ünïcödé, 日本語のテキスト, emoji 🙂 and a backslash \\ before a quote \\"',
        "",
    ],
)
def test_keys_and_escapes_inside_the_text_or_annotations_change_nothing(text):
    doc = make_doc(text, 7).annotate(
        Annotation("annotate", 'a "name" with ,"lang": in it', 'value ,"lang":"xx"', "info"),
        Annotation("annotate", "none", None, "pass"),
        Annotation("annotate", "ratio", 0.1 + 0.2, "fail"),
        dup_cluster_id="1" * 32,
        dup_cluster_size=2,
        dup_of="2" * 32,
        scores={"lang": 0.5, "quality": 1e-7},
    )
    line = doc.to_json_bytes()
    assert annotated_line(line, MEMBER, **FIELDS) == parsed_path(line, MEMBER, **FIELDS)
    representative = Annotation("minhash_dedup", "dup_cluster_size", 3, "pass")
    assert annotated_line(line, representative, dup_of="") == parsed_path(line, representative, dup_of="")


def test_a_line_whose_head_is_not_whole_is_left_to_the_parser():
    doc = json.loads(make_doc("some text", 1).to_json_bytes())
    doc["annotations"] = [{"stage": "s", "name": "n", "value": {"a": 1, "lang": "en"}, "verdict": "info"}]
    nested = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert annotated_line(nested, MEMBER, **FIELDS) is None
    without_lang = json.dumps({k: v for k, v in doc.items() if k != "lang"}, separators=(",", ":")).encode()
    assert annotated_line(without_lang, MEMBER, **FIELDS) is None


def test_only_fields_before_lang_can_be_set():
    line = make_doc("some text", 1).to_json_bytes()
    with pytest.raises(ValueError, match="url"):
        annotated_line(line, MEMBER, url="https://elsewhere.example.org/")
