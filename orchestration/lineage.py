"""OpenLineage datasets of a build, for the operators to report through Airflow's OpenLineage provider.

A stage job reads its inputs (the raw sources for the first stage, the previous stage's directory
after it) and writes its stage directory; the snapshot step reads the last stage's directory and
writes the candidates and the default version. Each directory is one dataset, named by its absolute
path on the cluster's filesystem in the namespace ``file`` (OpenLineage's naming for file systems;
Airflow's own ``file://`` assets translate to the same), so the output of one task and the input of
the next are the same dataset and a lineage backend can join the chain from the sources to the
snapshot. A directory whose manifest was read carries what identifies its contents: a stage's
manifest digest, a snapshot's ``snapshot_id`` -- both as OpenLineage's ``version`` facet, which
lineage backends understand, and as a facet of this project's own with the named fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attr
from airflow.providers.openlineage import conf as openlineage_conf
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import DatasetFacet, dataset_version_dataset
from openlineage.client.naming.dataset import LocalFileSystem

from corpus.model import StageManifest
from corpus.model.layout import MANIFEST

#: the facet keys, as they appear in an event's ``facets`` of a dataset
VERSION_FACET = "version"
STAGE_FACET = "corpusStage"
SNAPSHOT_FACET = "corpusSnapshot"


@attr.define
class CorpusStageDatasetFacet(DatasetFacet):
    """A stage directory: the stage that wrote it and its manifest's digest (what ``verify`` reports
    and the snapshot manifest records)."""

    stage: str
    manifest_digest: str


@attr.define
class CorpusSnapshotDatasetFacet(DatasetFacet):
    """A snapshot directory (the candidates, ``corpus-snapshot/2``, or a version of them,
    ``corpus-version/2``; or their earlier, listed forms): its id, and for a version the id of the
    candidates it selects from."""

    snapshot_id: str
    format: str
    base_snapshot_id: str | None = None


def lineage_enabled() -> bool:
    """Whether the provider sends events (a transport is configured, lineage is not turned off): only
    then are the manifests worth reading, over SSH for the ssh backend."""
    return not openlineage_conf.is_disabled()


def manifest_facets(manifest: Mapping[str, Any]) -> dict[str, DatasetFacet]:
    """The facets a directory's ``manifest.json`` gives its dataset: a snapshot's id, or a stage's digest."""
    if "snapshot_id" in manifest:
        version = manifest["snapshot_id"]
        corpus: DatasetFacet = CorpusSnapshotDatasetFacet(
            snapshot_id=version, format=manifest["format"], base_snapshot_id=manifest.get("base_snapshot_id")
        )
        key = SNAPSHOT_FACET
    else:
        stage = StageManifest.from_dict(dict(manifest))
        version = stage.digest
        corpus, key = CorpusStageDatasetFacet(stage=stage.stage, manifest_digest=version), STAGE_FACET
    return {
        VERSION_FACET: dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=version),
        key: corpus,
    }


def dataset(path: str, manifest: Mapping[str, Any] | None = None) -> Dataset:
    """The dataset of a file or directory on the cluster's filesystem; with its manifest's facets if read."""
    naming = LocalFileSystem(path=path)
    return Dataset(
        namespace=naming.get_namespace(),
        name=naming.get_name(),
        facets=manifest_facets(manifest) if manifest is not None else {},
    )


def job_lineage(
    inputs: Iterable[str], outputs: Iterable[str], manifests: Mapping[str, Mapping[str, Any]]
) -> OperatorLineage:
    """What a job read and wrote; ``manifests`` maps the directories whose manifest was read to it."""
    return OperatorLineage(
        inputs=[dataset(p, manifests.get(p)) for p in inputs],
        outputs=[dataset(p, manifests.get(p)) for p in outputs],
    )


def manifest_file(directory: str) -> str:
    """Where a stage or snapshot directory on the cluster keeps its manifest."""
    return f"{directory}/{MANIFEST}"
