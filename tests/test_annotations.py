"""corpus.model.annotations: one definition of every annotation name a stage writes, under the stage that
writes it, and the writers and readers agree with it."""

from __future__ import annotations

import ast

import pytest

from corpus.model import Annotation, Document
from corpus.model import annotations as names
from corpus.model.annotations import (
    PII,
    PII_SPANS,
    POLICY,
    WRITTEN_BY,
    AnnotationName,
    AnnotationPrefix,
)
from corpus.model.stages import PIPELINE
from corpus.signals.pii import KINDS
from tests.conftest import ROOT

DEFINED = [v for v in vars(names).values() if isinstance(v, AnnotationName | AnnotationPrefix)]
LISTED = [n for group in WRITTEN_BY.values() for n in group]


def covered(stage: str | None, name: str) -> bool:
    """Whether some constant names ``name`` (of ``stage``; None: of any stage)."""
    return any(
        (stage is None or n.stage == stage)
        and (n.name == name if isinstance(n, AnnotationName) else name.startswith(n.prefix))
        for n in LISTED
    )


def test_every_name_is_listed_once_under_the_stage_that_writes_it():
    assert sorted(map(repr, DEFINED)) == sorted(map(repr, LISTED))
    assert len(set(LISTED)) == len(LISTED)
    assert set(WRITTEN_BY) <= set(PIPELINE) | {POLICY}
    assert all(n.stage == stage for stage, group in WRITTEN_BY.items() for n in group)


def test_no_family_of_a_stage_takes_a_name_of_it_but_pii_spans():
    fixed = [n for n in LISTED if isinstance(n, AnnotationName)]
    families = [p for p in LISTED if isinstance(p, AnnotationPrefix)]
    clashes = [(p, n) for p in families for n in fixed if p.stage == n.stage and n.name.startswith(p.prefix)]
    assert clashes == [(PII, PII_SPANS)]
    assert "spans" not in KINDS  # so pii_spans is never a kind's count


def _literal_name(node: ast.expr) -> tuple[str, bool] | None:
    """(the name, or the constant head of a name built from a prefix; whether it is a head)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, False
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value), True
    return None


def test_every_name_a_stage_spells_out_is_one_of_the_constants():
    """A writer not converted yet still writes a name (or a family) defined here."""
    missing = []
    for package in ("corpus", "hpc_jobs"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Annotation"):
                    continue
                if len(node.args) < 2 or (found := _literal_name(node.args[1])) is None:
                    continue
                stage = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
                name, head = found
                ok = (
                    covered(stage, name)
                    if not head
                    else any(isinstance(p, AnnotationPrefix) and p.prefix == name for p in LISTED)
                )
                if not ok:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {stage}/{name}")
    assert not missing, "\n".join(missing)


def test_a_name_writes_and_finds_its_annotation():
    name = AnnotationName("annotate", "lang")
    note = name.note("en")
    assert note == Annotation("annotate", "lang", "en", "info")
    assert name.note(3, "fail").verdict == "fail"
    doc = Document.create(text="x", source="s", source_tier="web", url="", crawl_date="", raw_digest="")
    doc = doc.annotate(note, Annotation("ingest", "lang", "de"), name.note("fr"))
    assert name.of(doc) == Annotation("annotate", "lang", "fr", "info")  # the latest
    assert AnnotationName("annotate", "quality").of(doc) is None
    assert name.matches(note.to_dict()) and not name.matches(Annotation("ingest", "lang", "en").to_dict())


@pytest.mark.parametrize("a", [Annotation("decontaminate", "contaminated:mmlu", 12, "fail")])
def test_a_family_names_its_members_by_key(a):
    run = names.CONTAMINATED_RUN
    assert run.named("mmlu") == AnnotationName("decontaminate", "contaminated:mmlu")
    assert run.note("mmlu", 12, "fail") == a
    assert run.key_of(a) == run.key_of(a.to_dict()) == "mmlu"
    assert names.CONTAMINATED_ITEM.key_of(a) is None  # "contaminated:" is not "contaminated_item:"
    assert run.key_of(Annotation("annotate", "contaminated:mmlu", 12)) is None
    doc = Document.create(text="x", source="s", source_tier="web", url="", crawl_date="", raw_digest="")
    assert run.of(doc.annotate(a), "mmlu") == a and run.of(doc, "mmlu") is None


def test_the_minhash_writers_write_their_stage_names():
    from hpc_jobs.minhash_dedup.graph import cluster_member
    from hpc_jobs.minhash_dedup.phase import ClusterVerdict
    from hpc_jobs.minhash_dedup.repo_graph import annotate_repository

    note, _ = cluster_member(ClusterVerdict("c", 3, "abc"))
    assert note == Annotation("minhash_dedup", "dup_cluster_size", 3, "fail")
    doc = Document.create(text="x", source="s", source_tier="code", url="", crawl_date="", raw_digest="")
    verdict = ClusterVerdict("r0", 2, "r0", rank=1, similarity=0.9, file_share=0.5)
    out = annotate_repository(doc, verdict)
    assert [a.to_dict() for a in out.annotations] == [
        {"stage": "minhash_dedup", "name": "repo_cluster", "value": "r0", "verdict": "info"},
        {"stage": "minhash_dedup", "name": "repo_cluster_size", "value": 2, "verdict": "fail"},
        {"stage": "minhash_dedup", "name": "repo_rank", "value": 1, "verdict": "info"},
        {"stage": "minhash_dedup", "name": "repo_dup_of", "value": "r0", "verdict": "info"},
    ]
