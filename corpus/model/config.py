"""Build configuration: one TOML (or JSON) file, a table per stage, each validated against the stage's defaults.

A stage's effective config (defaults overridden by its table) is what gets hashed into its manifest, so
two builds with the same effective config share the stage's outputs even if their files differ in
comments or key order. Top-level keys (anything else at the top is an error naming these and the stage
tables): ``seed``, handed to every stage whose config has one; ``memory_budget_mb``, what one rank of
any stage may hold (default 256, a stage table may override it; a runtime setting like the rank count,
so in no config hash: docs/scale.md); ``alarms``, the yield alarms (:mod:`corpus.report.alarms`).
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

from corpus.model.config_types import type_problem, unknown_key_hint
from corpus.model.digest import json_digest


class ConfigError(ValueError):
    pass


DEFAULT_MEMORY_BUDGET_MB = 256
#: the smallest budget a stage accepts: below it the fixed costs (interpreter, libraries) dominate
MIN_MEMORY_BUDGET_MB = 8
MEMORY_BUDGET = "memory_budget_mb"
#: besides the stage tables: ``[policy]`` is the default version's quality policy (runtime.build.default_selection)
TOP_LEVEL_KEYS = ("alarms", MEMORY_BUDGET, "policy", "seed")


def check_build_config(cfg: dict[str, Any], stages: tuple[str, ...] | list[str]) -> None:
    """Refuse a top-level key that is neither a known setting nor a stage table, naming the known ones."""
    known = set(TOP_LEVEL_KEYS) | set(stages)
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ConfigError(
            f"unknown top-level config keys: {', '.join(unknown)} (known: {', '.join(TOP_LEVEL_KEYS)}; "
            f"stage tables: {', '.join(stages)})"
        )
    for where, table in [("", cfg)] + [(f"[{s}] ", cfg[s]) for s in stages if isinstance(cfg.get(s), dict)]:
        if MEMORY_BUDGET in table:
            _budget_value(table[MEMORY_BUDGET], where)


def _budget_value(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_MEMORY_BUDGET_MB:
        raise ConfigError(
            f"{where}{MEMORY_BUDGET} must be an integer of at least {MIN_MEMORY_BUDGET_MB}, got {value!r}"
        )
    return value


def stage_memory_budget_mb(cfg: dict[str, Any], stage: str) -> int:
    """The stage table's ``memory_budget_mb``, else the build's, else the default."""
    table = cfg.get(stage) or {}
    if MEMORY_BUDGET in table:
        return _budget_value(table[MEMORY_BUDGET], f"[{stage}] ")
    if MEMORY_BUDGET in cfg:
        return _budget_value(cfg[MEMORY_BUDGET], "")
    return DEFAULT_MEMORY_BUDGET_MB


def load_config_file(path: str | Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    if p.suffix == ".json":
        try:
            return json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"config file {p} is not valid JSON: {e}") from e
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {p} is not valid TOML: {e}") from e


def stage_config(config_cls: type, table: dict[str, Any] | None, stage: str) -> Any:
    """Build the stage's config dataclass from its TOML table, refusing unknown keys (naming the nearest
    known one) and values of the wrong type (:mod:`corpus.model.config_types`)."""
    table = {k: v for k, v in (table or {}).items() if k != MEMORY_BUDGET}  # a runtime setting, not hashed
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise ConfigError(
            f"[{stage}] unknown config keys: {', '.join(unknown)}{unknown_key_hint(unknown[0], names)} "
            f"(known: {', '.join(sorted(names))})"
        )
    if (problem := type_problem(stage, config_cls, table)) is not None:
        raise ConfigError(problem)
    try:
        return config_cls(**table)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"[{stage}] invalid config: {e}") from e


def config_to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def config_hash(cfg: Any) -> str:
    return json_digest(config_to_dict(cfg))
