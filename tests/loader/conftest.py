"""Fixtures for the loader tests: small real snapshots written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from snapshot_factory import RECIPE_TOKENIZER, write_id_snapshot


@pytest.fixture(scope="session")
def id_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three buckets of shards whose tokens are distinct ids (int32), manifest.json at the root."""
    root = tmp_path_factory.mktemp("id-snapshot")
    write_id_snapshot(root, {"code": 3, "web": 7, "wiki": 5})
    return root


@pytest.fixture(scope="session")
def recipe_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The id snapshot's three buckets, with a tokenizer sha256 in its manifest for recipes to pin."""
    root = tmp_path_factory.mktemp("recipe-snapshot")
    write_id_snapshot(root, {"code": 3, "web": 7, "wiki": 5}, tokenizer={"sha256": RECIPE_TOKENIZER})
    return root
