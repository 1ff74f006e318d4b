"""Build configuration: one TOML (or JSON) file, a table per stage, each validated against the stage's defaults.

A stage's effective config (defaults overridden by its table) is what gets hashed into its manifest,
so two builds with the same effective config share the stage's outputs even if their files differ
in comments or key order.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

from corpus.digest import json_digest


class ConfigError(ValueError):
    pass


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
    """Build the stage's config dataclass from its TOML table, refusing unknown keys."""
    table = dict(table or {})
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise ConfigError(f"[{stage}] unknown config keys: {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    try:
        return config_cls(**table)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"[{stage}] invalid config: {e}") from e


def config_to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def config_hash(cfg: Any) -> str:
    return json_digest(config_to_dict(cfg))
