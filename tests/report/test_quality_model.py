"""The card's quality-model section: the model's held-out evaluation from its card, and the score
distribution per language from the metadata table, documents without a score counted apart."""

from __future__ import annotations

import json

import duckdb

from corpus.formats.metadata import metadata_table
from corpus.report.quality_model import model_card, quality_html, scores_by_language
from corpus.signals.quality import DEFAULT_MODEL, card_path


def record(i: int, lang: str, quality: float | None) -> dict:
    scores = {"word_count": 100.0} | ({} if quality is None else {"quality": quality})
    return {"doc_id": f"{i:032x}", "source": "web", "source_tier": "web", "lang": lang, "scores": scores}


def test_scores_by_language_counts_the_documents_without_a_score_apart():
    records = [record(i, "en", q) for i, q in enumerate([0.0, 0.05, 0.55, 0.95, 1.0])]
    records += [record(10 + i, "sv", None) for i in range(3)]
    con = duckdb.connect()
    con.register("stored", metadata_table(records, "web-00000", [10] * len(records)))
    con.execute("CREATE VIEW docs AS SELECT *, lang = 'sv' OR quality >= 0.5 AS selected FROM stored")
    by_lang = scores_by_language(con)
    assert list(by_lang) == ["en", "sv"]
    en, sv = by_lang["en"], by_lang["sv"]
    assert (en["docs"], en["scored"], en["unscored"], en["selected"]) == (5, 5, 0, 3)
    assert en["histogram"] == [2, 0, 0, 0, 0, 1, 0, 0, 0, 2] and en["median"] == 0.55
    assert (sv["docs"], sv["scored"], sv["unscored"], sv["selected_unscored"]) == (3, 0, 3, 3)
    assert sv["median"] is None and sum(sv["histogram"]) == 0

    shipped = json.loads(card_path(DEFAULT_MODEL).read_text())
    card = {
        "absent": {},
        "quality_model": {
            "model": "default",
            "model_hash": shipped["sha256"],
            "card_found": "the shipped default model",
            "card_absent": None,
            **{k: shipped[k] for k in ("languages", "labels", "split", "evaluation")},
            "examples": shipped["examples"],
            "by_lang": by_lang,
        },
    }
    html = quality_html(card)
    assert "<h2>Quality model</h2>" in html and "data:image/svg+xml;base64," in html
    assert f"{shipped['evaluation']['by_lang']['ko']['auc']:.3f}" in html and "no score" in html
    card["quality_model"]["by_lang"] = None
    assert "not shown" in quality_html(card)


def test_the_card_of_the_model_annotate_ran_is_found_by_its_hash():
    shipped = json.loads(card_path(DEFAULT_MODEL).read_text())
    card, where = model_card(shipped["sha256"], "", None)
    assert card == shipped and where == "the shipped default model"
    card, why = model_card("sha256:" + "0" * 64, "", None)
    assert card is None and "no card" in why
