"""minhash_dedup: near duplicates by MinHash-LSH over every document, clustered by distributed connected
components and verified by estimated Jaccard; code documents are clustered as repositories.

The stage is a global phase of the steps :func:`phase_steps` lists (each a module of this package,
its parts checkpointed under ``work/phase/<step>/``), then a per-shard pass that writes each verdict
into its document's line. docs/dedup.md "minhash_dedup's global phase", docs/incremental.md (against
a base).

    python -m hpc_jobs.minhash_dedup --in build/stages/line_dedup --out build/stages/minhash_dedup
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

from corpus.decont.holdout import NEAR_SCORE, HoldoutFile
from corpus.dedup.candidates import part_names
from corpus.dedup.records import shard_tags
from corpus.formats.dedup_keys import band_key_params
from corpus.formats.docshard import iter_lines
from corpus.formats.signature_store import SIGNATURE_STORE, STORE_SUFFIX
from corpus.model import Document, Kept, Outcome, Passed, annotated_line
from corpus.model.annotations import HOLDOUT_NEAR
from corpus.model.layout import INDEX_RECORDS
from corpus.text.normalize import NORMALIZATION_VERSION
from hpc_jobs.minhash_dedup.band_records import band_records
from hpc_jobs.minhash_dedup.base_links import BASE_NODE_NAME, BASE_NODE_TAG
from hpc_jobs.minhash_dedup.components import giant_clusters, giant_components
from hpc_jobs.minhash_dedup.facts import merge_facts, size_histogram
from hpc_jobs.minhash_dedup.graph import buckets, cluster_member, clusters, decisions, labels
from hpc_jobs.minhash_dedup.holdout import near_holdout, route_holdout
from hpc_jobs.minhash_dedup.phase import (
    BAND_RECORDS,
    BASE_LINKS,
    BUCKETS,
    CLUSTERS,
    COMPONENTS,
    DECISIONS,
    GIANT_CLUSTERS,
    HELD_SIGNATURES,
    HOLDOUT,
    LABELS,
    PASS_FILES,
    REPO_BUCKETS,
    REPO_CLUSTERS,
    REPO_DECISIONS,
    REPO_DOCS,
    REPO_FILES,
    REPO_LABELS,
    REPOS,
    SIGNATURE_STORE_STEP,
    SIGNATURES,
    ClusterVerdict,
    Graph,
    Run,
    SignatureParts,
    group_units,
)
from hpc_jobs.minhash_dedup.repo_graph import annotate_repository, repo_docs, repositories, repository_files
from hpc_jobs.minhash_dedup.signature_store import signature_store
from hpc_jobs.minhash_dedup.signatures import holdout_signatures, signatures
from mpi_kernels.barrier import sleeping_bcast
from mpi_kernels.minhash import BandParams, MinHasher, MinHashParams
from runtime.against_base import AgainstBase
from runtime.global_phase import PART_ROWS, GlobalPhase, decisions_of, global_phase_key, part_count
from runtime.input_shard import InputShard
from runtime.runner import Stage, StageContext, eval_holdout, remove_stale_artifacts


@dataclass(frozen=True, kw_only=True)
class MinhashDedupConfig(BandParams):
    """The kernel's ``num_perm``, ``bands``, ``rows``, ``ngram`` and ``seed`` (which seeds the
    permutations: changing it changes every signature), and the stage's own settings."""

    #: buckets with more members are split by a secondary hash into sub-buckets of about this size
    bucket_cap: int = 10_000
    #: components with more members are clustered again from pairs verified by estimated Jaccard;
    #: the default 1 verifies every cluster (docs/dedup.md: better precision than LSH alone, same recall)
    verify_components_above: int = 1
    #: a verified pair needs estimated Jaccard >= this; it sits about one standard error of the K=112
    #: estimate (~0.045) below the 0.7 the default bands aim at, so estimation noise costs little recall
    verify_threshold: float = 0.65
    #: a join to a base cluster (a build against a base) needs estimated Jaccard >= this with one of the
    #: cluster's members; None: ``verify_threshold``. Higher is a stricter cross-crawl rule (seed 002
    #: §3.5: recurring pages over-deduplicated across snapshots)
    cross_build_threshold: float | None = None
    #: a text component with more members is verified across every rank, O(members / ranks) each
    #: (``hpc_jobs.minhash_dedup.giant``); a smaller one at one part, in one array pass with its neighbours.
    #: The verdicts are the same either way
    distribute_components_above: int = 10_000
    alarm_cluster_size: int = 10_000
    alarm_clustered_fraction: float = 0.5
    batch_docs: int = 1024
    #: band rows a bucket part is sized for (and documents a repository part): the parts are a
    #: function of the corpus's size, never of how many input shards it came in
    part_rows: int = PART_ROWS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.part_rows < 1:
            raise ValueError("part_rows must be at least 1")
        if not 0.0 < self.verify_threshold <= 1.0:
            raise ValueError("verify_threshold must be in (0, 1]")
        if self.cross_build_threshold is not None and not 0.0 < self.cross_build_threshold <= 1.0:
            raise ValueError("cross_build_threshold must be in (0, 1]")
        if self.bucket_cap < 2:
            raise ValueError("bucket_cap must be at least 2")
        if self.distribute_components_above < 1:
            raise ValueError("distribute_components_above must be at least 1")

    @property
    def join_threshold(self) -> float:
        """The estimated Jaccard a join to a base cluster needs."""
        return self.verify_threshold if self.cross_build_threshold is None else self.cross_build_threshold


@dataclass(frozen=True)
class Step:
    """A step of the phase: its name, its parts, and what runs it (None: the step before it writes its
    parts too); ``facts``: whether its parts' facts go into the manifest (a decision table's do not);
    ``wanted``: whether this run has the step, asked (collectively) when the phase reaches it."""

    name: str
    parts: list[str]
    run: Callable[[Run], dict[str, Any] | None] | None = None
    facts: bool = True
    wanted: Callable[[Run], bool] | None = None


def has_code(run: Run) -> bool:
    """Whether the repository graph's steps run: the signatures found a code document."""
    return run.has_code


def phase_steps(run: Run) -> list[Step]:
    """Every step of this run, in running order: run in this order, their parts' facts merged, and
    every part digested when the phase finishes. A step this run does not have is not listed; the
    repository graph's are ``wanted`` only when the signatures found a code document."""
    text, repo, held = run.text, run.repo, run.held_names
    shards, groups = text.names, text.groups
    optional = {
        HELD_SIGNATURES: bool(held),
        HOLDOUT: bool(held),
        BASE_LINKS: run.probed,
        BAND_RECORDS: run.index.keeps_index,
        SIGNATURE_STORE_STEP: run.index.keeps_index,
    }
    steps = [
        Step(SIGNATURES, shards, signatures),
        Step(HELD_SIGNATURES, held, holdout_signatures),
        # the text graph
        Step(BUCKETS, groups, partial(buckets, graph=text)),
        Step(HOLDOUT, shards, route_holdout),
        Step(LABELS, shards, partial(labels, graph=text)),
        Step(BASE_LINKS, groups),  # sent by labels, from the components it found
        Step(COMPONENTS, groups, partial(giant_components, graph=text, units=run.inputs)),
        Step(CLUSTERS, groups, partial(clusters, graph=text, units=run.inputs)),
        Step(GIANT_CLUSTERS, shards, partial(giant_clusters, graph=text)),
        Step(DECISIONS, shards, partial(decisions, graph=text), facts=False),
        Step(BAND_RECORDS, groups, band_records),
        Step(SIGNATURE_STORE_STEP, groups, signature_store),
        # the repository graph
        Step(REPOS, repo.names, repositories, wanted=has_code),
        Step(REPO_FILES, repo.names, repository_files, wanted=has_code),
        Step(REPO_BUCKETS, repo.groups, partial(buckets, graph=repo), wanted=has_code),
        Step(REPO_LABELS, repo.names, partial(labels, graph=repo), wanted=has_code),
        Step(
            REPO_CLUSTERS,
            repo.groups,
            partial(clusters, graph=repo, units=group_units(repo.names)),
            wanted=has_code,
        ),
        Step(REPO_DECISIONS, repo.names, partial(decisions, graph=repo), facts=False, wanted=has_code),
        Step(REPO_DOCS, shards, repo_docs, wanted=has_code),
    ]
    return [s for s in steps if optional.get(s.name, True)]


class MinhashDedupStage(Stage):
    name = "minhash_dedup"
    # what each version changed: docs/dedup.md "Stage versions"
    version = "9+norm" + NORMALIZATION_VERSION
    Config = MinhashDedupConfig
    artifact_kinds = (INDEX_RECORDS, SIGNATURE_STORE)

    def __init__(self, config: MinhashDedupConfig) -> None:
        super().__init__(config)
        self._held: list[HoldoutFile] = []
        #: what the steps report per rank (what distributed verification held: counted, not digested)
        self._run_info: dict[str, Any] = {}
        #: the build's band index (records written inside a build that keeps indexes; a base probed)
        self._index: AgainstBase | None = None

    def band_params(self) -> dict[str, Any]:
        """What defines this run's band keys (the band index refuses a base made with others)."""
        return band_key_params(**asdict(self.params))

    @property
    def params(self) -> MinHashParams:
        return MinHashParams.of(self.config)

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        held = sorted([f.name, f.sha256] for f in self._held)
        more: dict[str, Any] = {"records": True} if self._index.keeps_index else {}
        more |= self._index.phase_key()
        return global_phase_key(self, inputs, normalization=NORMALIZATION_VERSION, holdout=held, **more)

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        self._held = eval_holdout(ctx)
        against = self._index = AgainstBase.open(ctx, "band", self.band_params())
        docs = sum(max(s.records, 0) for s in inputs)
        groups = against.parts(part_count(docs * self.config.bands, self.config.part_rows))
        against.remove_stale_records(ctx, groups)
        store_files = (STORE_SUFFIX, STORE_SUFFIX + ".json")
        remove_stale_artifacts(
            ctx, group_units(groups) if against.keeps_index else [], SIGNATURE_STORE, store_files
        )
        phase = self._phase = GlobalPhase(ctx, self._key(inputs))  # (a barrier: after the removal)
        if phase.complete:
            return phase.reused()
        run = self._run(
            phase, sorted(inputs, key=lambda s: s.name), groups, part_count(docs, self.config.part_rows)
        )
        steps = []
        for step in phase_steps(run):
            if step.wanted is not None and not step.wanted(run):
                continue
            steps.append(step)
            if step.run is not None:
                self._run_info |= step.run(run) or {}
        facts = None
        if ctx.rank == 0:
            facts = merge_facts([p.facts for s in steps if s.facts for p in phase.parts(s.name, s.parts)])
        return phase.finish({s.name: s.parts for s in steps}, sleeping_bcast(ctx.comm, facts))

    def _run(self, phase: GlobalPhase, inputs: list[InputShard], groups: list[str], repo_parts: int) -> Run:
        """The run's context: its graphs (the repository graph's parts are fixed by the data alone)."""
        shards = [s.name for s in inputs]
        tags = shard_tags([*shards, BASE_NODE_NAME])  # (refuses a shard whose tag is the base's)
        del tags[BASE_NODE_TAG]
        repos, repo_groups = part_names("r", repo_parts), part_names("g", repo_parts)
        text = Graph(
            SIGNATURES,
            BUCKETS,
            LABELS,
            CLUSTERS,
            DECISIONS,
            shards,
            tags,
            SignatureParts(phase, shards),
            groups,
        )
        repo_parts = SignatureParts(phase, repos, REPOS)
        repo = Graph(
            REPOS, REPO_BUCKETS, REPO_LABELS, REPO_CLUSTERS, REPO_DECISIONS, repos, shard_tags(repos), repo_parts,
            repo_groups, "repo_", True,
        )  # fmt: skip
        held = SignatureParts(phase, [f.name for f in self._held], HELD_SIGNATURES)
        return Run(
            phase, self.config, MinHasher(self.params), inputs, self._held, held, self._index,
            text, repo,
        )  # fmt: skip

    # -- per shard -----------------------------------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        """A document no verdict and no held-out page touches goes on as the line it was read as, a
        member of a text cluster as that line with its cluster's fields set (:class:`Passed`, made by
        ``annotated_line``: neither parses its text); the others are parsed and annotated."""
        near = near_holdout(self._phase.root, self._held, shard.name)
        decisions = decisions_of(self._phase.root, DECISIONS, shard.name)
        repo_decisions = (
            decisions_of(self._phase.root, REPO_DOCS, shard.name)
            if self._phase.facts["counts"]["code_docs"]
            else {}
        )
        part = self._phase.part(SIGNATURES, shard.name)
        if part is None:
            raise FileNotFoundError(f"signatures of {shard.name} are not complete")
        cells, text_bytes = (np.load(part.path(s), allow_pickle=False).tolist() for s in PASS_FILES)
        for i, line in enumerate(iter_lines(shard.path)):
            v = decisions.get(str(i))
            r = repo_decisions.get(str(i))
            nbytes = text_bytes[i]
            if r is None and i not in near:
                out = line
                if v is not None:
                    annotation, fields = cluster_member(ClusterVerdict.from_json(v))
                    out = annotated_line(line, annotation, **fields)
                if out is not None:
                    source, lang = cells[i].rsplit("\t", 1)
                    yield Passed(out, (source, lang), nbytes), nbytes
                    continue
            doc = Document.from_dict(json.loads(line))
            if i in near:
                similarity = near[i] / self.config.num_perm
                doc = doc.annotate(
                    HOLDOUT_NEAR.note(similarity, "fail"),
                    scores={**doc.scores, NEAR_SCORE: similarity},
                )
            if r is not None:
                doc = annotate_repository(doc, ClusterVerdict.from_json(r))
            if v is None:
                yield Kept(doc), nbytes
                continue
            annotation, fields = cluster_member(ClusterVerdict.from_json(v))
            yield Kept(doc.annotate(annotation, **fields)), nbytes

    def run_info(self, ctx: StageContext) -> dict[str, Any]:
        return self._run_info

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        facts = self._phase.facts
        cfg = self.config
        sizes = {int(k): v for k, v in facts["cluster_sizes"].items()}
        repo_sizes = {int(k): v for k, v in facts["repo_cluster_sizes"].items()}
        docs = facts["counts"].get("docs", 0)
        clustered = sum(k * v for k, v in sizes.items())
        largest = max(sizes, default=0)
        alarms = []
        if largest > cfg.alarm_cluster_size:
            alarms.append(
                f"largest cluster has {largest} documents (alarm_cluster_size {cfg.alarm_cluster_size})"
            )
        if docs and clustered / docs > cfg.alarm_clustered_fraction:
            alarms.append(
                f"{clustered / docs:.1%} of documents are in clusters "
                f"(alarm_clustered_fraction {cfg.alarm_clustered_fraction:.0%})"
            )
        return {
            "normalization_version": NORMALIZATION_VERSION,
            "minhash": {
                "num_perm": cfg.num_perm,
                "bands": cfg.bands,
                "rows": cfg.rows,
                "ngram": cfg.ngram,
                "seed": cfg.seed,
            },
            **facts["counts"],
            "clusters": sum(sizes.values()),
            "docs_in_clusters": clustered,
            "largest_cluster": largest,
            "cluster_size_histogram": size_histogram(sizes),
            "repo_clusters": sum(repo_sizes.values()),
            "repo_cluster_size_histogram": size_histogram(repo_sizes),
            "alarms": alarms,
            **self._index.manifest_index(facts["index"] | {"join_threshold": cfg.join_threshold}),
        }


STAGE = MinhashDedupStage
