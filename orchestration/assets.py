"""The Airflow Assets the corpus DAGs share, and the extra of the events they emit.

* :data:`CRAWLS_LANDED` (``corpus://crawls/landed``): updated by whatever lands a crawl on the cluster's
  filesystem (an asset event whose extra names the new files, ``{"paths": [ABSOLUTE, ...]}``); the
  ``ingest_crawl`` DAG is scheduled on it.
* :data:`VERSIONS` (``corpus://versions``): every DAG that produces a version (``build_snapshot``,
  ``ingest_crawl``, ``build_version``) emits an event on it (:func:`emit_version`), so a downstream
  DAG (a contamination check, a training launch) is scheduled on new versions and reads which one from
  the triggering event.

One asset for all versions, not one per build: a consumer is scheduled on "a new version", whichever
build it came from; the event's extra says which.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from airflow.sdk import Asset

from orchestration.deployment import path_schema

CRAWLS_LANDED = Asset(name="corpus_crawls_landed", uri="corpus://crawls/landed", group="corpus")
VERSIONS = Asset(name="corpus_versions", uri="corpus://versions", group="corpus")


def emit_version(context: Any, snapshot_id: str, build: str, version: str) -> None:
    """Fill the VERSIONS event the running task emits when it succeeds (the task lists VERSIONS in its
    outlets: an event is written only for a task that completes). The extra: the version's
    ``snapshot_id``, the build it selects from and its own directory (``BUILD/snapshot`` for a build's
    default version)."""
    context["outlet_events"][VERSIONS].extra = {
        "snapshot_id": snapshot_id,
        "build": build,
        "version": version,
    }


#: what a VERSIONS event's extra must be before any of it reaches a command (emit_version writes it)
VERSION_EXTRA = {
    "type": "object",
    "properties": {
        "snapshot_id": {"type": "string", "pattern": r"^sha256:[0-9a-f]{64}$(?!\n)"},
        "build": path_schema(),
        "version": path_schema(),
    },
    "required": ["snapshot_id", "version"],
}


def announced_versions(events: Any) -> list[dict[str, str]]:
    """The versions the triggering VERSIONS events announce (``context["triggering_asset_events"]``), in
    event order, each once. An event's extra is data from another DAG run: it is checked against
    :data:`VERSION_EXTRA` (a ``sha256:`` id, absolute paths) and refused with a ``ValueError`` naming the
    field otherwise."""
    out: list[dict[str, str]] = []
    for event in events.get(VERSIONS, []):
        extra = dict(event.extra or {})
        try:
            jsonschema.validate(extra, VERSION_EXTRA)
        except jsonschema.ValidationError as e:
            where = "/".join(map(str, e.absolute_path)) or "extra"
            raise ValueError(f"a {VERSIONS.uri} event's {where} is not valid: {e.message}") from None
        version = {
            "snapshot_id": extra["snapshot_id"],
            "build": extra.get("build", ""),
            "version": extra["version"],
        }
        if version not in out:
            out.append(version)
    return out
