"""A build's config is checked whole, against the types its dataclasses declare, before any stage runs:
one line naming the table, the key, the value and the type it must have."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from corpus.model.config import ConfigError, check_build_config, config_hash, load_config_file, stage_config
from corpus.model.config_types import type_problem
from corpus.model.stages import PIPELINE
from corpus.select.policy import PolicyConfig
from corpus.select.selection import parse_policy
from orchestration.buildsteps import stage_config_class
from orchestration.config_reference import keys as config_keys
from tests.conftest import ROOT, SAMPLE, run_corpus


def stage_cls(name: str) -> type:
    return stage_config_class(name)


@pytest.mark.parametrize("name", PIPELINE)
def test_every_stage_s_defaults_have_the_types_it_declares(name):
    cls = stage_cls(name)
    assert type_problem(name, cls, dataclasses.asdict(cls())) is None


@pytest.mark.parametrize(
    "cls, table, message",
    [
        (
            stage_cls("minhash_dedup"),
            {"num_perm": "lots"},
            "[minhash_dedup] num_perm = 'lots': expected an integer",
        ),
        (stage_cls("minhash_dedup"), {"num_perm": True}, "num_perm = True: expected an integer"),
        (PolicyConfig, {"min_words": "fifty"}, "[policy] min_words = 'fifty': expected an integer"),
        (PolicyConfig, {"languages": ["en", 3]}, "languages = ['en', 3]: expected a list of strings"),
        (PolicyConfig, {"lang_confidence": {"en": "high"}}, "expected a table of numbers"),
        (stage_cls("extract"), {"gate": 20}, "gate = 20: expected a string or nothing (null)"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_naming_key_value_and_type(cls, table, message):
    name = "policy" if cls is PolicyConfig else next(n for n in PIPELINE if stage_cls(n) is cls)
    with pytest.raises(ConfigError) as e:
        stage_config(cls, table, name)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_an_integer_is_a_number_and_a_misspelled_key_names_the_nearest_one():
    assert stage_config(PolicyConfig, {"min_quality": 0}, "policy").min_quality == 0
    with pytest.raises(ConfigError, match=r"unknown config keys: num_prem \(did you mean num_perm\?\)"):
        stage_config(stage_cls("minhash_dedup"), {"num_prem": 64}, "minhash_dedup")


def test_corpus_build_refuses_a_bad_last_stage_table_before_any_stage_runs(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[write_shards]\nshard_target_tokens = "big"\n')
    out = tmp_path / "b"
    proc = run_corpus(
        "build", "--input", str(SAMPLE / "web"), "--out", str(out), "--config", str(cfg), check=False
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "corpus build: error: [write_shards] shard_target_tokens = 'big': expected an integer"
    ]
    assert not out.exists()


def test_the_config_reference_is_what_the_dataclasses_say():
    proc = subprocess.run([sys.executable, "-m", "orchestration.config_reference", "--check"], cwd=ROOT)
    assert proc.returncode == 0, (
        "docs/config.md or examples/build.toml is out of date: run python -m orchestration.config_reference"
    )


def test_the_annotated_example_sets_every_key_and_builds_what_no_config_builds():
    """examples/build.toml names every key the reference does and, as it stands, hashes every stage's
    config as an empty file does (the same snapshot id), its default version the same."""
    example = load_config_file(ROOT / "examples" / "build.toml")
    check_build_config(example, PIPELINE)
    commented = (ROOT / "examples" / "build.toml").read_text()
    for key in config_keys():
        assert key.name in example.get(key.table, {}) or f"# {key.name} = " in commented, key
    for name in PIPELINE:
        cls = stage_cls(name)
        assert config_hash(stage_config(cls, example.get(name), name)) == config_hash(cls()), name
    assert parse_policy(example["policy"]) == parse_policy({})


def test_corpus_config_validates_a_file_explains_a_key_and_prints_defaults_that_validate(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[policy]\nmin_words = "fifty"\n')
    proc = run_corpus("config", "validate", str(bad), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "corpus config: error: [policy] min_words = 'fifty': expected an integer"
    explained = run_corpus("config", "explain", "extract.gate").stdout
    assert explained.startswith("[extract] gate: str | None, default null") and "first-pass" in explained
    defaults = tmp_path / "defaults.json"
    defaults.write_text(run_corpus("config", "defaults").stdout)
    assert json.loads(defaults.read_text())["minhash_dedup"]["num_perm"] == 112
    assert run_corpus("config", "validate", str(defaults)).stdout.strip() == f"{defaults}: ok"
