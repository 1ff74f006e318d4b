"""The recrawl index kind (issue 13): a fetch's (URL, raw digest) key with the kept fetch's date, and the
view of a build's fork that holds only its base's generations (what ingest probes)."""

from __future__ import annotations

import pytest

from corpus.dedup.recrawl import RecordKey, base_fetches, recrawl_key
from corpus.formats import dedup_index as pi
from corpus.formats import dedup_keys

URL, DIGEST = "https://debian-faq-fr.docs.example.org/debian/FAQ/fr/index.fr.html", "9d" * 32


def test_a_date_round_trips_and_one_longer_than_a_value_is_refused():
    values = dedup_keys.date_values(["2026-03-01", "", "2026-06-01"])
    assert dedup_keys.dates(values) == ["2026-03-01", "", "2026-06-01"]
    with pytest.raises(ValueError, match="at most 16 bytes"):
        dedup_keys.date_values(["2026-03-01T00:00:00Z"])


def test_a_recrawl_key_is_the_url_and_the_bytes():
    key = recrawl_key(URL, DIGEST)
    assert len(key) == 16 and key == recrawl_key(URL, DIGEST)
    assert key != recrawl_key(URL + "?again", DIGEST) and key != recrawl_key(URL, "9e" * 32)


def test_within_a_generation_the_earliest_date_of_a_key_is_kept(tmp_path):
    index = pi.PersistentIndex.create(tmp_path / "r", "recrawl", dedup_keys.recrawl_key_params(), 2)
    key = recrawl_key(URL, DIGEST)
    rows = dedup_keys.records("recrawl", [key, key], dedup_keys.date_values(["2026-06-01", "2026-03-01"]))
    index = index.add_generation("b1", [rows])
    answer = index.probe([key])
    assert answer.found.all() and dedup_keys.dates(answer.values) == ["2026-03-01"]


def test_every_fetch_of_a_pair_the_base_kept_repeats_it_once():
    fetch = RecordKey(URL, DIGEST, "2026-06-01", "sha", 3)
    later = RecordKey(URL, DIGEST, "2026-07-01", "sha", 9)
    got = list(base_fetches([later, fetch, fetch], "2026-03-01"))  # one fetch listed by two identical files
    assert got == [(fetch, "2026-03-01"), (later, "2026-03-01")]


def test_a_fork_probes_only_its_base_generations_and_a_compacted_mix_is_refused(tmp_path):
    key = recrawl_key(URL, DIGEST)
    own = recrawl_key(URL + "?june", DIGEST)
    base = pi.PersistentIndex.create(tmp_path / "base", "recrawl", dedup_keys.recrawl_key_params(), 2)
    base = base.add_generation(
        "march", [dedup_keys.records("recrawl", [key], dedup_keys.date_values(["2026-03-01"]))]
    )
    fork = base.fork(tmp_path / "fork")
    fork = fork.add_generation(
        "june", [dedup_keys.records("recrawl", [own], dedup_keys.date_values(["2026-06-01"]))]
    )
    view = fork.held_by(["march"])
    assert [g.labels for g in view.generations] == [["march"]]
    assert view.probe([key, own]).found.tolist() == [True, False], "its own generation never answers"
    assert view.pointer["generations"] == base.pointer["generations"]
    with pytest.raises(pi.IndexMixed, match="was compacted"):
        fork.compact().held_by(["march"])
