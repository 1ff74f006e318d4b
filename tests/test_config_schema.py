"""One typed description per kind of configuration file (build, selection, recipe, deployment): from it
the check that refuses a misspelled key or a wrong type in one line, and the JSON Schema that
``corpus config schema`` prints and the build DAGs' ``config`` Param enforces."""

from __future__ import annotations

import copy
import json
import tomllib

import pytest

from cli.main import main as corpus
from corpus.model.config import ConfigError, load_config_file, stage_config
from corpus.model.errors import UserError
from corpus.select.recipe import parse_recipe
from corpus.select.selection import parse_inline
from orchestration.config_reference import defaults, keys, tables, top_level_keys
from orchestration.config_schema import BOUNDS, KINDS, build_schema, schema_of
from orchestration.deployment import Deployment
from runtime.build import DEDUP_INDEX, IndexSettings
from tests.conftest import ROOT

jsonschema = pytest.importorskip("jsonschema")

RECIPE = """recipe_id = "r1"
snapshot_id = "sha256:00"
tokenizer_sha256 = "ab"
seed = 3
[[phases]]
name = "main"
tokens = 1000
seq_len = 16
weights = { web = 0.7, code = 0.3 }
max_epochs = { code = 2 }
run_len = 2
"""
SELECTION = """min_scores = { quality = 0.2 }
min_lang_confidence = 0.6
langs = ["en", "fr"]
crawl_date_max = "2024-01-31"
exclude_sources = ["books"]
near_duplicates = "representative"
prefer = { web = "newest" }
[policy]
min_words = 20
[[top_fraction]]
score = "quality"
keep = 0.5
[[buckets]]
name = "hq"
where = "quality >= q90"
[[buckets]]
name = "rest"
"""
DEPLOYMENT = {"cluster_root": "/srv/corpus", "partitions": ["gpu"], "job_env_keys": ["OMP_NUM_THREADS"]}

#: (kind, file name, text, the one line `corpus config validate` prints after "error: ")
MISSPELLED = [
    (
        "build",
        "b.toml",
        "[minhash_dedup]\nnum_prem = 64\n",
        "[minhash_dedup] unknown config keys: num_prem (did you mean num_perm?)",
    ),
    ("selection", "s.toml", "min_score = { quality = 0.2 }\n", "unknown key(s) min_score; known: "),
    ("recipe", "r.toml", RECIPE.replace("seq_len", "seqlen"), "phase 'main': unknown keys ['seqlen']"),
    ("deployment", "d.json", json.dumps({"partitons": ["gpu"]}), "unknown keys ['partitons']"),
]
SUGGESTED = {"build": "num_perm", "selection": "min_scores", "recipe": "seq_len", "deployment": "partitions"}
WRONG_TYPE = [
    ("build", "b.toml", '[minhash_dedup]\nnum_perm = "lots"\n', "[minhash_dedup] num_perm = 'lots': expected an integer"),
    ("selection", "s.toml", 'langs = "en"\n', "langs must be an array of strings, not 'en'"),
    ("selection", "s.toml", "[[top_fraction]]\nscore = 'q'\nkeep = 'half'\n", "top_fraction[0].keep must be a share"),
    ("recipe", "r.toml", RECIPE.replace("seq_len = 16", 'seq_len = "16"'), "seq_len must be a positive integer, got '16'"),
    ("recipe", "r.toml", RECIPE.replace("seed = 3", "seed = 3.5"), "seed must be an integer, got 3.5"),
    ("deployment", "d.json", json.dumps({"ssh_conn_id": 7}), "ssh_conn_id must be a string, got 7"),
    ("deployment", "d.json", json.dumps({"partitions": ["gpu", 3]}), "partitions[1] must be a string, got 3"),
]  # fmt: skip


def validate(tmp_path, capsys, kind: str, name: str, text: str) -> tuple[int, list[str]]:
    path = tmp_path / name
    path.write_text(text)
    rc = corpus(["config", "validate", str(path), "--kind", kind])
    captured = capsys.readouterr()
    return rc, (captured.err or captured.out).strip().splitlines()


@pytest.mark.parametrize(("kind", "name", "text", "message"), MISSPELLED)
def test_a_misspelled_key_is_one_line_naming_where_it_is_and_the_nearest_key(
    tmp_path, capsys, kind, name, text, message
):
    rc, lines = validate(tmp_path, capsys, kind, name, text)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("corpus config: error: ") and message in lines[0]
    assert f"did you mean {SUGGESTED[kind]}?" in lines[0]


@pytest.mark.parametrize(("kind", "name", "text", "message"), WRONG_TYPE)
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key_the_value_and_the_type(
    tmp_path, capsys, kind, name, text, message
):
    rc, lines = validate(tmp_path, capsys, kind, name, text)
    assert rc == 2 and len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize(
    ("kind", "name", "text"),
    [
        ("build", "b.toml", (ROOT / "examples" / "build.toml").read_text()),
        ("selection", "s.toml", SELECTION),
        ("recipe", "r.toml", RECIPE),
        ("deployment", "d.json", json.dumps(DEPLOYMENT)),
    ],
)
def test_a_good_file_of_each_kind_is_ok_and_fits_its_schema(tmp_path, capsys, kind, name, text):
    rc, lines = validate(tmp_path, capsys, kind, name, text)
    assert rc == 0 and lines == [f"{tmp_path / name}: ok"]
    data = json.loads(text) if name.endswith(".json") else tomllib.loads(text)
    jsonschema.validate(data, schema_of(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_corpus_config_schema_prints_a_json_schema_for_each_kind(capsys, kind):
    assert corpus(["config", "schema", kind]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False and schema["properties"]


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("selection", 'min_score = { quality = 0.2 }\nlangs = ["en"]'),
        ("selection", 'langs = "en"'),
        ("selection", 'near_duplicates = "none"'),
        ("selection", "[[top_fraction]]\nscore = 'quality'\nkeep = 2"),
        ("selection", "[policy]\nmin_words = 'fifty'"),
        ("selection", "[policy]\nunscored_quality = 'ignore'"),
        ("selection", "[[buckets]]\nname = 'hq'\nfilter = 'x'"),
        ("recipe", RECIPE.replace("tokens = 1000", "tokens = 0")),
        ("recipe", RECIPE.replace("run_len", "runlen")),
        ("recipe", RECIPE.replace("{ web = 0.7,", "{ web = -1,")),
    ],
)
def test_what_the_check_refuses_the_schema_refuses_too(kind, text):
    with pytest.raises(UserError) as e:
        (parse_recipe if kind == "recipe" else parse_inline)(text)
    assert "\n" not in str(e.value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(tomllib.loads(text), schema_of(kind))


@pytest.mark.parametrize(
    "raw", [{"partitions": "gpu"}, {"job_env_keys": ["LD_PRELOAD"]}, {"python": "venv/bin/python"}]
)
def test_a_deployment_the_code_refuses_the_schema_refuses(raw):
    with pytest.raises(ValueError):
        Deployment.from_mapping(raw)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(raw, schema_of("deployment"))


# --- the build config's schema ----------------------------------------------------------------------


def test_every_key_of_the_reference_is_in_the_build_schema_and_nothing_else():
    properties = build_schema()["properties"]
    for k in keys():
        assert k.name in properties[k.table]["properties"], (k.table, k.name)
    for k in top_level_keys():
        assert k.name in properties
    assert set(properties) == {t for t, _ in tables()} | {k.name for k in top_level_keys()} | {DEDUP_INDEX}
    assert set(properties[DEDUP_INDEX]["properties"]) == {"partitions", "bloom_fp_rate"}


def test_the_example_config_and_the_defaults_fit_the_build_schema():
    schema = schema_of("build")
    jsonschema.validate(load_config_file(ROOT / "examples" / "build.toml"), schema)
    jsonschema.validate(json.loads(json.dumps(defaults())), schema)


def outside(schema: dict, bound: dict):
    """A value just outside ``bound`` (of a property whose schema is ``schema``)."""
    step = 1 if schema.get("type") == "integer" else 0.5
    for word, value in bound.items():
        if word == "minimum":
            return value - step
        if word == "maximum":
            return value + step
        if word in ("exclusiveMinimum", "exclusiveMaximum"):
            return value
        if word == "enum":
            return "no-such-choice"
        if word == "items":
            return ["no-such-choice"]
    raise AssertionError(bound)


@pytest.mark.parametrize(
    ("table", "key", "word"),
    [(t, k, w) for t, by_key in BOUNDS.items() for k, bound in by_key.items() for w in bound],
)
def test_every_range_or_choice_the_schema_states_the_code_refuses_too(table, key, word):
    prop = build_schema()["properties"][table]["properties"][key]
    value = outside(prop, {word: prop[word] if word != "items" else prop["items"]})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({table: {key: value}}, schema_of("build"))
    if table == DEDUP_INDEX:
        with pytest.raises(ConfigError):
            IndexSettings.of({key: value})
        return
    cls = dict(tables())[table]
    with pytest.raises(ConfigError):
        stage_config(cls, {key: value}, table)


# --- the DAGs' config Param -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def config_param():
    from orchestration.snapshotdag import build_params

    return build_params(Deployment(), {})["config"]


@pytest.mark.parametrize(
    "value",
    [
        {"minhash_dedup": {"treshold": 0.8}},
        {"minhash_dedup": {"num_perm": "lots"}},
        {"minhash_dedup": {"bands": 0}},
        {"policy": {"min_words": "fifty"}},
        {"policy": {"unscored_quality": "ignore"}},
        {"alarms": {"on_alarm": "shout"}},
        {"write_shards": {"memory_budget_mb": 1}},
        {DEDUP_INDEX: {"partitions": 8}},
    ],
)
def test_the_dag_config_param_refuses_a_misspelled_key_or_a_wrong_value(config_param, value):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        copy.copy(config_param).resolve(value)


def test_the_dag_config_param_takes_any_subset_of_the_build_s_keys(config_param):
    for value in (
        {"minhash_dedup": {"num_perm": 64}},
        {"policy": {"min_quality": 0.2}, "seed": 3, "memory_budget_mb": 512},
        {name: {} for name, _ in tables()},
        {},
    ):
        assert copy.copy(config_param).resolve(value) == value
