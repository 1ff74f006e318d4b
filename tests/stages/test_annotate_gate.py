"""Cost-ordered annotate: the ``[annotate] gate`` spends the costly signals (Gopher/C4, script_fraction,
quality) only on documents that pass the cheap ones (language, counts); a document it does not pass
keeps its language and PII scrub, records what was skipped and why, and the policy never keeps it."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.model.annotations import SIGNALS_SKIPPED
from corpus.model.config import config_hash
from corpus.model.errors import UserError
from corpus.select.gate import parse_gate
from corpus.select.policy import PolicyConfig, decide, decide_rows
from hpc_jobs.annotate.stage import AnnotateConfig, AnnotateStage, annotate_document
from tests.conftest import ROOT
from tests.documents import make_doc
from tests.stages.chain import docs, manifest, reconciles, run_chain

ENGLISH = " ".join(["The harbour committee met on Tuesday to discuss the new ferry timetable."] * 12)
GERMAN = " ".join(["Der Hafenausschuss traf sich am Dienstag, um den neuen Fahrplan zu besprechen."] * 12)
MAIL = " Write to jane.doe@example.org for the minutes."
GATE = "lang = 'en' AND words >= 60"
COSTLY = ("alpha_word_fraction", "word_count", "top_2gram_char_fraction", "script_fraction", "quality")


def test_a_document_the_gate_passes_gets_exactly_what_it_gets_without_a_gate():
    doc = make_doc(ENGLISH + MAIL, raw_digest="0")
    assert annotate_document(doc, lambda t: 0.5, gate=parse_gate(GATE)) == annotate_document(
        doc, lambda t: 0.5
    )


def test_one_it_does_not_pass_keeps_language_and_scrub_and_records_the_clause_it_failed():
    doc = make_doc(GERMAN + MAIL, raw_digest="0")
    out = annotate_document(doc, lambda t: 0.5, gate=parse_gate(GATE))
    assert out.lang == "de" and "<EMAIL>" in out.text  # the scrub is never skipped
    assert out.scores[SIGNALS_SKIPPED.name] == 1.0
    assert not any(k in out.scores for k in COSTLY)  # missing, never a made-up value
    assert SIGNALS_SKIPPED.of(out).value == "lang = 'en'"
    full = annotate_document(doc, lambda t: 0.5)
    assert all(k in full.scores for k in COSTLY) and SIGNALS_SKIPPED.name not in full.scores


@pytest.mark.parametrize("tier", ["web", "curated"])
def test_the_policy_never_keeps_a_document_whose_signals_were_skipped(tier):
    out = annotate_document(make_doc(GERMAN, tier=tier, raw_digest="0"), lambda t: 0.9, gate=parse_gate(GATE))
    reason, _ = decide(out, PolicyConfig(exempt_tiers=["curated"]))
    assert reason == "signals_skipped"
    # the version step's column form: the same first failure
    names, first = decide_rows(
        np.array(["de", "en"], dtype=object),
        np.array([0.99, 0.99]),
        np.array([tier, tier], dtype=object),
        {SIGNALS_SKIPPED.name: np.array([1.0, 0.0])},
        PolicyConfig(exempt_tiers=["curated"]),
    )
    assert names[first[0]] == "signals_skipped" and (first[1] == -1 or names[first[1]] != "signals_skipped")


def test_a_wrong_gate_is_one_line_naming_the_annotate_gate():
    with pytest.raises(UserError, match=r"^\[annotate\] gate names unknown signal quality"):
        AnnotateConfig(gate="quality > 0.5")


def test_the_gate_is_recorded_as_judged_and_changes_the_config_hash():
    plain, gated = AnnotateStage(AnnotateConfig()), AnnotateStage(AnnotateConfig(gate="lang  =  'en'"))
    assert gated.config.gate == "lang = 'en'" and plain.config.gate == ""
    assert config_hash(gated.config) != config_hash(plain.config)
    assert config_hash(AnnotateStage(AnnotateConfig(gate="lang = 'en'")).config) == config_hash(gated.config)


def test_on_real_pages_only_the_gated_documents_skip_and_the_counts_reconcile(tmp_path):
    config = tmp_path / "gate.toml"
    config.write_text(f'[annotate]\ngate = "{GATE}"\n')
    run_chain(2, [ROOT / "sample" / "web"], tmp_path / "b", config)
    annotated = tmp_path / "b" / "annotate"
    assert reconciles(manifest(annotated)["totals"])
    out = list(docs(annotated))
    skipped = [d for d in out if SIGNALS_SKIPPED.name in d.scores]
    judged = [d for d in out if SIGNALS_SKIPPED.name not in d.scores]
    assert skipped and judged
    for d in skipped:
        assert d.lang != "en" or len(d.text.split()) < 60
        assert "alpha_word_fraction" not in d.scores and "quality" not in d.scores
    for d in judged:
        assert d.lang == "en" and len(d.text.split()) >= 60 and "alpha_word_fraction" in d.scores
