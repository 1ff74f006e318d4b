"""A training recipe: the one document that says what a run trains on, phase by phase.

A recipe (TOML) is pinned to a snapshot (or version) id and a tokenizer's sha256, carries the seed, and
lists phases, each with a token budget, a sequence length, bucket weights and epoch caps. With (recipe,
seed) a run's data is reproducible, so the loader records the recipe's content hash in its checkpoint.
Bucket names are the pinned snapshot's or version's, checked by :meth:`Recipe.check_buckets`. Epoch
caps are counted across phases and never go down. This module is pure: it parses and validates, and
never opens a snapshot. See docs/loader.md ("Recipes").
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from corpus.model.digest import json_digest
from corpus.model.errors import UserError
from corpus.model.json_schema import Problem, Schema, first_problem, path_text

RECIPE_FORMAT = "corpus-recipe/1"

Positive = Annotated[int, Schema(minimum=1), "a positive integer"]
NonNegative = Annotated[int, Schema(minimum=0), "an integer >= 0"]
Text = Annotated[str, Schema(minLength=1), "a non-empty string"]


class RecipeError(UserError):
    """A recipe that cannot be run as written (one line: what is wrong, and where)."""


@dataclass(frozen=True)
class Phase:
    """One stage of a recipe, and a ``[[phases]]`` table as written (the types :func:`recipe_from_dict`
    checks first). ``max_epochs`` holds every cap in force during the phase (those stated in earlier
    phases included); a bucket without one is not capped."""

    name: Text
    tokens: Positive  # global tokens of the phase, all ranks together
    seq_len: Positive
    weights: Mapping[str, Annotated[float, Schema(minimum=0)]]
    max_epochs: Mapping[str, Positive] = field(default_factory=dict)
    run_len: Positive | None = None  # None: the loader's default

    def shares(self) -> dict[str, float]:
        """The weights normalized to sum 1 (the target token share of each bucket in this phase)."""
        total = sum(self.weights.values())
        return {b: w / total for b, w in sorted(self.weights.items())}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tokens": self.tokens,
            "seq_len": self.seq_len,
            "weights": dict(sorted(self.weights.items())),
            "max_epochs": dict(sorted(self.max_epochs.items())),
            "run_len": self.run_len,
        }


@dataclass(frozen=True)
class Recipe:
    """A recipe, and the file as written (``corpus config schema recipe``)."""

    recipe_id: Text
    snapshot_id: Text
    tokenizer_sha256: Text
    seed: int
    phases: Annotated[tuple[Phase, ...], Schema(minItems=1), "an array of tables [[phases]]"]
    shuffle_buffer: NonNegative = 0  # documents a shuffle window, the whole run (0: off)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "format": RECIPE_FORMAT,
            "recipe_id": self.recipe_id,
            "snapshot_id": self.snapshot_id,
            "tokenizer_sha256": self.tokenizer_sha256,
            "seed": self.seed,
            "phases": [p.to_dict() for p in self.phases],
        }
        if self.shuffle_buffer:  # stated only when on: a recipe without it keeps its content hash
            out["shuffle_buffer"] = self.shuffle_buffer
        return out

    @property
    def recipe_hash(self) -> str:
        """sha256 of the recipe's canonical content: formatting, comments and key order do not change it;
        an inherited cap written out again does not either (both mean the same run)."""
        return json_digest(self.to_dict())

    def boundaries(self) -> list[int]:
        """The global token count at the end of each phase (cumulative)."""
        out, total = [], 0
        for p in self.phases:
            total += p.tokens
            out.append(total)
        return out

    def buckets(self) -> list[str]:
        """Every bucket the recipe names (weights or caps), sorted."""
        return sorted({b for p in self.phases for b in (*p.weights, *p.max_epochs)})

    def check_pinned(self, snapshot_id: str, tokenizer_sha256: str | None) -> None:
        """Refuse a snapshot or tokenizer other than the recipe's, naming both."""
        if snapshot_id != self.snapshot_id:
            raise RecipeError(
                f"recipe {self.recipe_id} is pinned to snapshot {self.snapshot_id}, but this is "
                f"snapshot {snapshot_id}"
            )
        if tokenizer_sha256 != self.tokenizer_sha256:
            raise RecipeError(
                f"recipe {self.recipe_id} is pinned to tokenizer sha256 {self.tokenizer_sha256}, "
                f"but snapshot {snapshot_id} was tokenized with {tokenizer_sha256 or 'no recorded tokenizer'}"
            )

    def check_buckets(self, defined: Collection[str]) -> None:
        """Refuse a recipe that names a bucket the snapshot or version does not define."""
        for p in self.phases:
            for what, names in (("weights", p.weights), ("max_epochs", p.max_epochs)):
                unknown = sorted(set(names) - set(defined))
                if unknown:
                    raise RecipeError(
                        f"recipe {self.recipe_id} phase {p.name!r}: {what} name buckets the snapshot "
                        f"does not define: {unknown} (it defines {sorted(defined)})"
                    )

    def check_supply(self, positions_per_epoch: Mapping[str, int]) -> None:
        """Refuse caps that cannot supply a phase: by the end of each phase, a capped bucket must hold at
        least its target share of every phase so far (``positions_per_epoch``: its stream length, the
        stream positions one epoch delivers). Necessary, not sufficient: ranks' shares of a bucket differ
        by up to a chunk, so one rank may still run out a little before the end of the phase;
        ``corpus recipe-audit`` replays the run and says where."""
        need: dict[str, float] = {}
        for p in self.phases:
            for b, share in p.shares().items():
                need[b] = need.get(b, 0.0) + share * p.tokens
            for b, cap in sorted(p.max_epochs.items()):
                supply = cap * positions_per_epoch[b]
                if need.get(b, 0.0) > supply:
                    raise RecipeError(
                        f"recipe {self.recipe_id} phase {p.name!r}: bucket {b!r} needs {math.ceil(need[b]):,} tokens "
                        f"by the end of the phase, its max_epochs {cap} supply {supply:,} "
                        "(corpus recipe-audit says at which step it runs out)"
                    )


def parse_recipe(text: str, source: str = "recipe") -> Recipe:
    """A recipe from TOML text; every problem is a one-line :class:`RecipeError` naming ``source``."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{source}: not TOML: {e}") from e
    return recipe_from_dict(doc, source)


def load_recipe(path: str | Path) -> Recipe:
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"no recipe file at {path}")
    return parse_recipe(path.read_text(), str(path))


def recipe_from_dict(doc: Mapping[str, Any], source: str = "recipe") -> Recipe:
    """Validate and normalize a parsed recipe (inherited caps filled in)."""
    if (problem := first_problem(Recipe, doc)) is not None:
        raise RecipeError(_problem_text(problem, doc, source))
    for key in ("recipe_id", "snapshot_id", "tokenizer_sha256"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise RecipeError(f"{source}: {key} must be a non-empty string")
    seed = doc.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise RecipeError(f"{source}: seed must be an integer")
    raw = doc.get("phases")
    if not isinstance(raw, list) or not raw:
        raise RecipeError(f"{source}: no [[phases]]")
    phases: list[Phase] = []
    caps: dict[str, int] = {}
    names: set[str] = set()
    for i, ph in enumerate(raw):
        where = f"{source} phase {ph.get('name', i)!r}" if isinstance(ph, dict) else f"{source} phase {i}"
        if not isinstance(ph, dict):
            raise RecipeError(f"{where}: not a table")
        name = ph.get("name")
        if not isinstance(name, str) or not name or name in names:
            raise RecipeError(f"{where}: needs a name of its own")
        names.add(name)
        tokens = ph.get("tokens")
        if not _positive_int(tokens):
            raise RecipeError(f"{where}: no tokens (tokens must be a positive integer, got {tokens!r})")
        seq_len = ph.get("seq_len")
        if not _positive_int(seq_len):
            raise RecipeError(f"{where}: seq_len must be a positive integer, got {seq_len!r}")
        run_len = ph.get("run_len")
        if run_len is not None and not _positive_int(run_len):
            raise RecipeError(f"{where}: run_len must be a positive integer, got {run_len!r}")
        weights = ph.get("weights")
        if not isinstance(weights, dict) or not weights:
            raise RecipeError(f"{where}: no weights")
        for b, w in weights.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
                raise RecipeError(f"{where}: weight of {b!r} must be a number >= 0, got {w!r}")
        if not any(w > 0 for w in weights.values()):
            raise RecipeError(f"{where}: every weight is 0")
        stated = ph.get("max_epochs", {})
        if not isinstance(stated, dict):
            raise RecipeError(f"{where}: max_epochs must be a table (bucket = epochs)")
        for b, e in sorted(stated.items()):
            if not _positive_int(e):
                raise RecipeError(f"{where}: max_epochs of {b!r} must be a positive integer, got {e!r}")
            if b in caps and e < caps[b]:
                raise RecipeError(
                    f"{where}: max_epochs of {b!r} goes down from {caps[b]} to {e} (epochs are "
                    "counted across phases: a cap can stay or rise, never fall)"
                )
            caps[b] = e
        phases.append(
            Phase(
                name,
                tokens,
                seq_len,
                {b: float(w) for b, w in sorted(weights.items())},
                dict(sorted(caps.items())),
                run_len,
            )
        )
    shuffle_buffer = doc.get("shuffle_buffer", 0)
    if not _positive_int(shuffle_buffer) and shuffle_buffer != 0:
        raise RecipeError(f"{source}: shuffle_buffer must be an integer >= 0, got {shuffle_buffer!r}")
    return Recipe(
        doc["recipe_id"], doc["snapshot_id"], doc["tokenizer_sha256"], seed, tuple(phases), shuffle_buffer
    )


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _problem_text(p: Problem, doc: Mapping[str, Any], source: str) -> str:
    """An unknown key or a value of the wrong type as one line naming the phase (by name) and the key."""
    where, path = source, p.path
    if path[:1] == ("phases",) and len(path) >= 2:
        phase = doc["phases"][path[1]]
        name = phase.get("name", path[1]) if isinstance(phase, dict) else path[1]
        where, path = f"{source} phase {name!r}", path[2:]
    if p.unknown:
        return f"{where}: unknown keys {list(p.unknown)}{p.hint} (known: {sorted(p.known)})"
    return f"{where}: {path_text(path) or 'the phase'} must be {p.expected}, got {p.value!r}"
