"""The JSON Schema of each kind of configuration file, generated from the dataclasses that read it:
the build config (every stage table, ``[policy]``, ``[alarms]``, ``[dedup_index]``, ``seed``,
``memory_budget_mb``), a selection, a recipe and the deployment (``corpus config schema KIND``).

A key's type comes from its field (:mod:`corpus.model.json_schema`); :data:`BOUNDS` adds the ranges and
choices the build's dataclasses check in ``__post_init__`` (each is tested to be refused there too). The
build DAGs' ``config`` Param is :func:`override_schema` (stored by ``orchestration.config_reference`` as
orchestration/config_override.schema.json), so the trigger form and the REST API refuse a misspelled key
or a wrong type before a run starts. docs/config.md.
"""

from __future__ import annotations

from typing import Any

from corpus.model.config import MEMORY_BUDGET, MIN_MEMORY_BUDGET_MB
from corpus.model.json_schema import table_schema
from corpus.model.stages import PIPELINE
from corpus.select.policy import UNSCORED_QUALITY
from corpus.select.recipe import Recipe
from corpus.select.selection import SelectionKeys
from corpus.signals.pii import KINDS as PII_KINDS
from corpus.signals.words import STOP_WORD_LANGUAGES
from corpus.text.extract import EXTRACTORS
from corpus.text.sources import UNDECLARED_CHOICES
from orchestration.config_reference import keys, tables, top_level_keys
from orchestration.deployment import Deployment
from runtime.build import DEDUP_INDEX, IndexSettings

DRAFT = "https://json-schema.org/draft/2020-12/schema"
KINDS = ("build", "selection", "recipe", "deployment")

_POSITIVE = {"minimum": 1}
_SEED = {"type": "integer", "minimum": 0}
#: per table, per key: what the table's dataclass refuses besides a wrong type
BOUNDS: dict[str, dict[str, dict[str, Any]]] = {
    "ingest": {
        **dict.fromkeys(
            (
                "max_record_bytes",
                "max_decoded_bytes",
                "max_file_bytes",
                "max_doc_tokens",
                "max_archive_bytes",
                "max_archive_members",
                "max_archive_ratio",
                "part_rows",
            ),
            _POSITIVE,
        ),
        "bytes_per_token": {"exclusiveMinimum": 0},
        "max_input_seconds": {"minimum": 0},
        "undeclared_files": {"enum": list(UNDECLARED_CHOICES)},
    },
    "extract": {
        "extractor": {"enum": list(EXTRACTORS)},
        "time_limit_s": {"exclusiveMinimum": 0},
        "memory_limit_mb": {"minimum": 0},
        "holdout_pii_kinds": {"items": {"enum": list(PII_KINDS)}},
    },
    "exact_dedup": {"part_rows": _POSITIVE},
    "annotate": {key: {"items": {"enum": list(PII_KINDS)}} for key in ("pii_kinds", "code_safe_pii_kinds")},
    "line_dedup": {
        "part_rows": _POSITIVE,
        "max_docs_per_line": _POSITIVE,
        "max_docs_fraction": {"minimum": 0, "exclusiveMaximum": 1},
    },
    "minhash_dedup": {
        **dict.fromkeys(("num_perm", "rows", "ngram", "distribute_components_above", "part_rows"), _POSITIVE),
        "bands": {"minimum": 1, "maximum": (1 << 16) - 1},
        "verify_threshold": {"exclusiveMinimum": 0, "maximum": 1},
        "bucket_cap": {"minimum": 2},
    },
    "policy": {
        "unscored_quality": {"enum": list(UNSCORED_QUALITY)},
        "stop_word_languages": {"items": {"enum": list(STOP_WORD_LANGUAGES)}},
    },
    "alarms": {"on_alarm": {"enum": ["fail", "warn"]}, "window": _POSITIVE, "min_history": _POSITIVE},
    DEDUP_INDEX: {
        "partitions": {"minimum": 1, "exclusiveMaximum": 1 << 31},
        "bloom_fp_rate": {"exclusiveMinimum": 0, "exclusiveMaximum": 1},
    },
}


def build_schema() -> dict[str, Any]:
    """The build config file: a table per stage (each may also set ``memory_budget_mb``), ``[policy]``,
    ``[alarms]``, ``[dedup_index]``, ``seed`` and ``memory_budget_mb``; no other key anywhere."""
    notes = {(k.table, k.name): k.note for k in keys()}
    budget = {"type": "integer", "minimum": MIN_MEMORY_BUDGET_MB}
    properties: dict[str, Any] = {}
    for table, cls in [*tables(), (DEDUP_INDEX, IndexSettings)]:
        schema = table_schema(cls, {name: note for (t, name), note in notes.items() if t == table})
        for key, bound in BOUNDS.get(table, {}).items():
            schema["properties"][key] = _merged(schema["properties"][key], bound)
        if table in PIPELINE:
            schema["properties"][MEMORY_BUDGET] = {**budget, "description": "this stage's own budget"}
        properties[table] = schema
    for k in top_level_keys():
        properties[k.name] = {**(budget if k.name == MEMORY_BUDGET else _SEED), "description": k.note}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def override_schema() -> dict[str, Any]:
    """What a DAG run's ``config`` Param may hold: the build schema less ``[dedup_index]`` (the index's
    layout is the config file's alone); every key optional, as in a file."""
    schema = build_schema()
    return {**schema, "properties": {k: v for k, v in schema["properties"].items() if k != DEDUP_INDEX}}


def schema_of(kind: str) -> dict[str, Any]:
    """The JSON Schema of a file of ``kind`` (:data:`KINDS`), with its ``$schema`` and title."""
    described = {"selection": SelectionKeys, "recipe": Recipe, "deployment": Deployment}
    schema = build_schema() if kind == "build" else table_schema(described[kind])
    if kind == "selection":  # a selection's policy is the build's [policy]
        schema["properties"]["policy"] = build_schema()["properties"]["policy"]
    return {"$schema": DRAFT, "title": f"corpus-pipeline {kind}", **schema}


def _merged(schema: dict[str, Any], bound: dict[str, Any]) -> dict[str, Any]:
    """``bound`` over ``schema``, ``items`` merged rather than replaced."""
    out = {**schema, **bound}
    if "items" in bound and "items" in schema:
        out["items"] = {**schema["items"], **bound["items"]}
    return out
