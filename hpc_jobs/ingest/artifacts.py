"""The per-input artifacts of ingest (``holdout``, ``skipped``, ``rejected_files``, ``robots``) and their
summary.

docs/ingest-and-filters.md, "ingest".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import Any

from corpus.formats.docshard import SUFFIX
from corpus.text.sources import SourceSpec
from hpc_jobs.ingest.items import ROBOTS_DIR

#: the artifacts written per input file (the runner lists them, with INDEX_RECORDS, as side outputs)
PER_INPUT_ARTIFACTS = ("holdout", "skipped", "rejected_files", ROBOTS_DIR)


class CodeFiles:
    """The repositories' files over the whole stage, for the manifest (and the data card)."""

    def __init__(self) -> None:
        self.repositories = 0
        self.quarantined = 0
        self.documents = 0
        self.kept = {"files": 0, "bytes": 0}
        self.rejected: dict[str, dict[str, int]] = {}
        self.licences: list[dict[str, Any]] = []  # one per repository read (two of one name: both)

    def add(self, summary: dict[str, Any]) -> None:
        self.repositories += 1
        self.quarantined += 1 if summary.get("quarantined") else 0
        self.documents += summary["documents"]
        for k in ("files", "bytes"):
            self.kept[k] += summary["kept"][k]
        for reason, c in summary["rejected"].items():
            r = self.rejected.setdefault(reason, {"files": 0, "bytes": 0})
            r["files"] += c["files"]
            r["bytes"] += c["bytes"]
        if summary.get("licence"):
            lic = summary["licence"]
            self.licences.append(
                {
                    "repository": summary["repository"],
                    "expression": lic["expression"],
                    "class": lic["class"],
                    "decided_by": lic["decided_by"],
                    "conflicts": len(lic["conflicts"]),
                }
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "repositories": self.repositories,
            "quarantined_repositories": self.quarantined,
            "documents": self.documents,
            "kept": self.kept,
            "rejected": dict(sorted(self.rejected.items())),
            "licence_classes": dict(sorted(Counter(v["class"] for v in self.licences).items())),
            "licences": sorted(self.licences, key=lambda v: sorted(v.items())),
        }


def spec_dict(spec: SourceSpec) -> dict[str, Any]:
    """What a file is declared as, as the manifest records it (field by field: ``asdict``'s deep copies
    cost more than the rest of the manifest at 10^4 files, and its fields are strings)."""
    resolved = {"source": spec.name} | {
        f.name: getattr(spec, f.name) for f in fields(spec) if f.name not in ("name", "fields")
    }
    return resolved | ({"fields": dict(spec.fields)} if spec.fields else {})


def remove_stale_artifacts(out: Path, names: set[str], kinds: tuple[str, ...]) -> None:
    """Artifacts of inputs that are no longer part of the stage would be listed in its manifest: drop them."""
    for kind in kinds:
        d = out / kind
        for p in sorted(d.iterdir()) if d.is_dir() else []:
            base = p.name
            for suffix in (SUFFIX + ".json", SUFFIX, ".json"):
                if base.endswith(suffix):
                    base = base[: -len(suffix)]
                    break
            if p.is_file() and not p.name.startswith(".") and base not in names:
                p.unlink()
