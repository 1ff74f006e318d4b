"""Near-duplicate dedup: MinHash-LSH over all documents, clusters by distributed connected components.

The global phase (``prepare``, all ranks) is a :class:`runtime.global_phase.GlobalPhase` of seven steps,
each writing parts checkpointed as they complete (``work/phase/<step>/``), so a rank killed or
pre-empted in the middle of it costs only the part it was on:

1. ``signatures`` (map, a part per input shard): doc_ids, representative keys and MinHash signatures
   (``mpi_kernels.minhash``) as ``.npy`` files. A part whose files no longer match the digests its
   marker recorded (a torn or corrupted file) is redone, not trusted and not fatal.
2. ``buckets`` (map, a part per bucket part, their number fixed by the input count): each part reads
   its run of band rows from every signature part, links each bucket as a star, hot buckets split by a
   secondary hash (``corpus.dedup.candidates``), and writes its candidate edges (``records.EDGE``).
3. ``labels`` (exchange of numpy rows, a part per input shard): connected components of all candidate
   edges (``mpi_kernels.union_find``: numpy rows, each round's edges spilled), then every labelled
   document goes to its shard's part, which writes (ordinal, smallest node of the component) rows
   (``LABEL``).
4. ``components`` (exchange of numpy rows, a part per bucket part): each shard's count of each label
   goes to the label's part, which keeps the components of more than ``distribute_components_above``
   members (``records.GIANT``); every rank learns them (a row per such component).
   ``clusters`` (exchange of numpy rows, parts fixed by the input count): every other labelled
   document (``records.MEMBER``: representative key and where it is) goes to the part owning its
   component; the part verifies components larger than ``verify_components_above`` by estimated
   Jaccard (``corpus.dedup.verify``, many small components in one pass), reading the signatures from
   the signature parts (memory-mapped), picks each cluster's representative (most trusted tier, best
   quality, earliest crawl, smallest doc_id: ``corpus.dedup.order``) and writes a verdict per member.
   ``giant_clusters`` (exchange of numpy rows, a part per input shard): the large components are
   verified by every rank together, each holding O(members / ranks) of any one of them, with the same
   rule and the same verdicts (``hpc_jobs.minhash_dedup.giant``); each verdict goes to its shard's part.
5. ``decisions``: verdicts to their shard's decision table (``runtime.global_phase.route_verdicts``).
6. ``band_records`` (exchange of numpy rows, a part per bucket part; only inside a build that keeps
   indexes, ``corpus build``): every band key of every document with the document's cluster id (its
   own doc_id outside a cluster) goes to the key's bucket part, which writes one record per key (the
   smallest cluster id sharing it) as the artifact ``index_records/PART.band.rec``: the build's own
   generation of the band index, committed as the build's last step (``runtime.build.commit_indexes``).

**Against a base** (``corpus build --base``: the build's band index holds the base's generations,
``runtime.runner.base_generations``; docs/incremental.md "Near duplicates across builds"), keep-first:
the bucket parts are the index's partitions (a band key's part is its index partition), and bucket part
``p`` probes its distinct keys in partition ``p`` of the base's generations (one Bloom filter and one
mapped file; a Bloom hit is confirmed by lookup). A key the base holds adds an edge from each of this
build's documents with it to a node standing for the base cluster the key names (``BASE_NODE_TAG``,
never an input shard's), so connected components join those documents to it; step ``base_links`` sends
each such component's base clusters to the component's part, and step ``components`` writes it with its
size (never verified, never distributed). Its members' verdicts name the base cluster (``dup_of`` and
``dup_cluster_id`` = its id, the smallest of the two where a component reaches two base clusters, which
stay apart): a base document stays its representative, and no base document changes. The base's band
keys carry no signatures, so the LSH match to a base cluster is trusted, not verified. Keys the base
holds are not recorded again.

Code documents (tier ``code``: parts of a repository) take no part in the text graph (their text
signature is the empty one, never banded): near-duplicate *repositories* are clustered instead
(``corpus.code.repo_dedup``: why the set is the repository's line keys, how the representative is
chosen), by the same steps over a graph whose nodes are repositories:

R1. ``repos`` (exchange of numpy rows, parts fixed by the input count): the signature step also wrote,
    per code document, its line-set MinHash, file count and rank fields (``.code_docs``) and its
    files' content hashes (``.code_files``); each goes to the part of its repository (a hash of its
    id), which merges a repository's documents (signature: elementwise minimum, the MinHash of the
    union) and writes them as a signature part of the repository graph, band rows included;
    ``repo_files`` keeps each repository's distinct file hashes there.
R2-R4. ``repo_buckets``, ``repo_labels``, ``repo_clusters``: steps 2-4 over the repository parts (the
    same bands, components, verification at ``verify_threshold`` and representative order, on the
    repositories' keys; every component at one part: repositories are few, and a verdict has the
    repository's ``rank`` in its cluster, which needs the cluster's members in one place).
R5. ``repo_decisions``, ``repo_docs``: each repository part gets its verdicts, adds the similarity to
    the representative (estimated from the signatures) and the share of files they share (exact
    Jaccard of the file hashes), and sends one verdict per document to its shard's decision table.
    Every document of a clustered repository is annotated (``annotate_repository``).

The eval holdout (when the chain of stages reaches extract's ``holdout/``, ``corpus.decont.holdout``):
its pages are signed too (step ``holdout_signatures``, a part per holdout file, nodes tagged
``holdout/NAME``), each bucket part also matches its candidates' band keys against the held-out
pages' and keeps the pairs whose signatures agree on at least ``verify_threshold`` (``buckets``
writes, per candidate, the best agreement), and step ``holdout`` routes them to their shard's part.
Held-out pages never enter the graph: clusters, representatives and every other output are as without
them. A candidate that matched gets ``scores["holdout_near"]`` = its estimated Jaccard similarity to
the closest held-out page (annotation ``holdout_near``), which the default selection excludes.

Per shard: a document in no cluster and near no held-out page goes on as the very line it was read
as (``corpus.model.Passed``: its yield cell and text size were kept with its signature), neither
parsed nor encoded again; every clustered document gets ``dup_cluster_id`` (smallest doc_id of its cluster) and
``dup_cluster_size`` and every other member ``dup_of`` = the representative, written into the head of
its line (``corpus.model.annotated_line``: the text is copied as bytes, not parsed); all stay candidates
(a version keeps, per cluster, the representative among its *selected* members: corpus.select.selection). The manifest's ``extra`` has the cluster-size distribution and an
``alarms`` list (a cluster above ``alarm_cluster_size``, or more than ``alarm_clustered_fraction`` of the
documents in clusters, usually means boilerplate is chaining unrelated pages).

    python -m hpc_jobs.minhash_dedup --in build/stages/line_dedup --out build/stages/minhash_dedup
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from corpus.code.repo_dedup import (
    FILE_ROUTE,
    FILE_ROW,
    REPO_MEMBER,
    code_doc_dtype,
    document_files,
    document_rank_fields,
    encode_repository_key,
    estimated_similarity,
    exact_jaccard,
    file_hashes,
    line_hashes,
)
from corpus.decont.holdout import NEAR_SCORE, HoldoutFile, holdout_files
from corpus.dedup.candidates import bucket_star_edges, concat, part_names, part_of_hash
from corpus.dedup.order import doc_id_bytes, encode_representative_key
from corpus.dedup.records import (
    BAND_KEY_BYTES,
    BAND_ROW,
    BAND_VALUE_ROUTE,
    DOC_ID_BYTES,
    EDGE,
    GIANT,
    GIANT_ROUTE,
    GIANT_VERDICT,
    KEPT,
    LABEL,
    LABEL_ROUTE,
    LINK,
    LINK_ROUTE,
    LINKED,
    MEMBER,
    MEMBER_ROUTE,
    NODE,
    REP_KEY_BYTES,
    SPLIT,
    graph_nodes,
    shard_numbers,
    shard_tag,
    shard_tags,
    unrouted,
)
from corpus.dedup.verify import verified_roots
from corpus.formats.dedup_index import BAND_RECORD, CURRENT, BaseGenerations, band_key_params, partition_of
from corpus.formats.docshard import RecordsFile, iter_docs, iter_lines
from corpus.model import Annotation, Document, Kept, Outcome, Passed, annotated_line
from corpus.model.digest import canonical_json
from corpus.model.layout import INDEX_RECORDS, build_dir_of_stage, dedup_base_path, dedup_index_dir
from corpus.text.normalize import CHAR_NGRAM, NORMALIZATION_VERSION
from hpc_jobs.minhash_dedup.giant import Settings, ShardMembers, giant_labels, verify_distributed
from hpc_jobs.minhash_dedup.giant import SpilledRows as ComponentMembers
from mpi_kernels.minhash import MinHasher, MinHashParams, is_empty
from mpi_kernels.union_find import connected_components, pair_dtype
from runtime.global_phase import DECISIONS as DECISION_TABLE
from runtime.global_phase import (
    SPILL_DIR,
    GlobalPhase,
    PartWriter,
    decisions_of,
    global_phase_key,
    part_of_name,
    route_verdicts,
    write_verdicts,
)
from runtime.runner import (
    InputShard,
    Stage,
    StageContext,
    assign,
    base_generations,
    remove_stale_index_records,
)

SIGNATURES, BUCKETS, LABELS, CLUSTERS, DECISIONS = "signatures", "buckets", "labels", "clusters", "decisions"
#: the components verified across every rank (``hpc_jobs.minhash_dedup.giant``): found, then verified
COMPONENTS, GIANT_CLUSTERS = "components", "giant_clusters"
GIANTS = ".giants"
#: the repository graph's steps (code documents): their repositories, then the same four steps as text
REPOS, REPO_FILES = "repos", "repo_files"
REPO_BUCKETS, REPO_LABELS, REPO_CLUSTERS = "repo_buckets", "repo_labels", "repo_clusters"
REPO_DECISIONS, REPO_DOCS = "repo_decisions", "repo_docs"
#: the tier whose documents are repositories (issue 17): deduplicated as repositories, never as text
CODE_TIER = "code"
HELD_SIGNATURES, HOLDOUT = "holdout_signatures", "holdout"
#: the shard tag of a held-out page's node is the tag of this prefix + its holdout file's name
HELD_TAG = "holdout/"
#: a candidate that matched a held-out page in one bucket part, with the best agreement found there
HIT = np.dtype([("node", NODE), ("agree", ">u2")])
#: a HIT on its way to the candidate's shard part, and what that part writes (ordinal ascending)
HIT_ROUTE = np.dtype([("part", ">u4"), ("ordinal", ">u4"), ("agree", ">u2")])
NEAR = np.dtype([("ordinal", ">u4"), ("agree", ">u2")])
HITS = ".holdout_hits"
NEAR_ROWS = ".holdout"
#: candidate/held-out pairs verified at once (two signatures each in memory)
PAIR_BATCH = 1 << 14
SIG_FILES = (".ids.npy", ".rep.npy", ".sigs.npy")
#: what per-shard processing needs to pass an untouched document on without parsing it again: its
#: yield cell ("source<TAB>lang") and its text's UTF-8 size, per ordinal
PASS_FILES = (".groups.npy", ".text_bytes.npy")
#: a signature part's code documents (``code_doc_dtype`` rows) and their files' content hashes
CODE_DOCS, CODE_FILES = ".code_docs", ".code_files"
#: a repository part's members (REPO_MEMBER rows) and its repositories' file hashes (FILE_ROW rows)
MEMBERS, FILE_HASHES = ".members", ".file_hashes"
BANDS = ".bands"
BAND_OFFSETS = ".band_offsets.npy"
EDGES = ".edges"
LABEL_ROWS = ".labels"
#: a build against a base whose band index has generations (``corpus build --base``): a band key of this
#: build that the base holds links its documents to a node standing for the base cluster (doc_id: the
#: cluster's id, tagged :data:`BASE_NODE_TAG`, never an input shard's tag); each bucket part writes the
#: keys it found (``.base_keys``), step ``base_links`` the base clusters of each component (``.links``,
#: LINK rows at the component's part), step ``components`` the joined components with their sizes
#: (``.linked``)
BASE_LINKS, BAND_RECORDS = "base_links", "band_records"
BASE_NODE_NAME = "base/band_index"
BASE_NODE_TAG = shard_tag(BASE_NODE_NAME)
BASE_KEYS, LINKS, LINKED_ROWS = ".base_keys", ".links", ".linked"
#: a build's own band index records (``index_records/PART.band.rec``: BAND_RECORD rows, a key once, in
#: key order, with a sidecar), which the build's last step commits as its generation
INDEX_RECORDS_SUFFIX = ".band.rec"
#: what a build's run reports about the band index (``extra.index``): band keys found in the base, this
#: build's documents joined to a base cluster, and the records of this build's own generation
INDEX_FACTS = ("base_keys", "base_linked_docs", "index_records")
#: the counts every run reports (zero included), so the manifest has the same keys on any data
COUNTS = (
    "docs",
    "docs_without_shingles",
    "shared_buckets",
    "hot_buckets",
    "largest_bucket",
    "candidate_edges",
    "clustered_docs",
    "verified_components",
    "distributed_components",
    "holdout_docs",
    "holdout_docs_without_shingles",
    "holdout_pairs",
    "holdout_near_docs",
    "code_docs",
    "repositories",
    "repo_shared_buckets",
    "repo_hot_buckets",
    "repo_largest_bucket",
    "repo_candidate_edges",
    "repo_clustered_docs",
    "repo_verified_components",
    "code_docs_in_repo_clusters",
)
#: facts that are a maximum over parts, not a sum
MAXIMA = ("largest_bucket", "repo_largest_bucket")


@dataclass(frozen=True)
class MinhashDedupConfig:
    num_perm: int = 112
    bands: int = 14
    rows: int = 8
    ngram: int = 5
    #: seeds the permutation coefficients; changing it changes every signature
    seed: int = 0
    #: buckets with more members are split by a secondary hash into sub-buckets of about this size
    bucket_cap: int = 10_000
    #: components with more members are clustered again from pairs verified by estimated Jaccard;
    #: the default 1 verifies every cluster (docs/dedup.md: better precision than LSH alone, same recall)
    verify_components_above: int = 1
    #: a verified pair needs estimated Jaccard >= this; it sits about one standard error of the K=112
    #: estimate (~0.045) below the 0.7 the default bands aim at, so estimation noise costs little recall
    verify_threshold: float = 0.65
    #: a text component with more members is verified across every rank, O(members / ranks) each
    #: (``hpc_jobs.minhash_dedup.giant``); a smaller one at one part, in one array pass with its neighbours.
    #: The verdicts are the same either way
    distribute_components_above: int = 10_000
    alarm_cluster_size: int = 10_000
    alarm_clustered_fraction: float = 0.5
    batch_docs: int = 1024

    def __post_init__(self) -> None:
        MinHashParams(self.num_perm, self.bands, self.rows, self.ngram, self.seed)
        if not 0.0 < self.verify_threshold <= 1.0:
            raise ValueError("verify_threshold must be in (0, 1]")
        if self.bucket_cap < 2:
            raise ValueError("bucket_cap must be at least 2")
        if self.distribute_components_above < 1:
            raise ValueError("distribute_components_above must be at least 1")


@dataclass(frozen=True)
class GroupUnit:
    """A bucket part as the unit of a map step (it names the part and is its own digest)."""

    name: str
    sha256: str


@dataclass(frozen=True)
class _Graph:
    """One clustering graph of the phase: the text graph (a node per document) or the repository graph
    (a node per repository, ``repos`` parts in place of input shards). Both go through the same steps:
    buckets of band rows, connected components, verified clusters, verdicts."""

    signatures: str  # the step whose parts hold the nodes' SIG_FILES and band rows
    buckets: str
    labels: str
    clusters: str
    names: list[str]  # the parts of ``signatures`` (node tags are their shard tags)
    tags: dict[bytes, str]
    parts: _SignatureParts
    facts: str = ""  # prefix of the graph's facts
    ranked: bool = False  # verdicts carry each member's rank in its cluster's representative order


def group_units(groups: list[str]) -> list[GroupUnit]:
    """The bucket parts as units of a map step (each reads its rows from every signature part)."""
    return [GroupUnit(g, g) for g in groups]


def band_rows(
    hasher: MinHasher,
    ids: np.ndarray,
    sigs: np.ndarray,
    shard_name: str,
    groups: int,
    part_of: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Every band key of every document with shingles, as BAND_ROW rows sorted by (part, key, node): a
    bucket part reads one contiguous run of them. A key's part is ``part_of(keys)`` ((n, 18) bytes)
    when given (against a base: the band index's partition), else a hash of it mod ``groups``."""
    live = np.flatnonzero(~is_empty(sigs))
    keys = hasher.band_keys(sigs[live])  # (n, bands, 18): band index (2 bytes), then a hash
    bands = keys.shape[1]
    flat = keys.reshape(-1, keys.shape[2])
    rows = np.empty(len(flat), dtype=BAND_ROW)
    rows["part"] = part_of(flat) if part_of is not None else part_of_hash(flat[:, 2:], groups)
    rows["key"] = np.ascontiguousarray(flat).view(f"V{flat.shape[1]}").reshape(-1)
    rows["node"] = np.repeat(graph_nodes(ids[live], live, shard_name), bands)
    return rows[np.argsort(rows.view(f"V{BAND_ROW.itemsize}").reshape(-1), kind="stable")]


class MinhashDedupStage(Stage):
    name = "minhash_dedup"
    # 2: the global phase checkpointed in parts; 3: members stay candidates (labelled); 4: near copies
    # of held-out pages tagged (holdout_near); 5: shingles chosen per document by script
    # 6: signature parts keep each document's yield cell and text size, and an untouched document is
    # passed on as the line it was read as (same output bytes). The shingles' normalization version is
    # part of this one: the runner reuses a complete stage on its version, never on the phase key
    # 7: code documents leave text clustering; repositories are clustered as sets of line keys
    # (corpus.code.repo_dedup: repo_cluster, repo_rank, repo_similarity, repo_file_share)
    # 8: inside a build, the band index records (index_records/); against a base, its band index probed
    version = "8+norm" + NORMALIZATION_VERSION
    Config = MinhashDedupConfig
    artifact_kinds = (INDEX_RECORDS,)

    def __init__(self, config: MinhashDedupConfig) -> None:
        super().__init__(config)
        self._held: list[HoldoutFile] = []
        #: what distributed verification held per rank (counted; run_info, not digested)
        self._distributed: dict[str, int] | None = None
        #: the base's band index (None: no build, or a build without a base band index yet)
        self._band_base: BaseGenerations | None = None
        #: whether the run is inside a build that keeps indexes (then it writes index_records/)
        self._records = False

    @property
    def _probed(self) -> bool:
        """Whether the run probes a base's band index (a build against a base that has band records)."""
        return self._band_base is not None and self._band_base.probed

    def band_params(self) -> dict[str, Any]:
        """What defines this run's band keys (the band index refuses a base made with others)."""
        c = self.config
        return band_key_params(
            num_perm=c.num_perm, bands=c.bands, rows=c.rows, seed=c.seed, ngram=c.ngram, char_ngram=CHAR_NGRAM
        )

    @property
    def params(self) -> MinHashParams:
        c = self.config
        return MinHashParams(c.num_perm, c.bands, c.rows, c.ngram, c.seed)

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        held = sorted([f.name, f.sha256] for f in self._held)
        more: dict[str, Any] = {"records": True} if self._records else {}
        if self._probed:
            more["index"] = {"partitions": self._band_base.partitions, "base": self._band_base.digest}
        return global_phase_key(self, inputs, normalization=NORMALIZATION_VERSION, holdout=held, **more)

    def _groups(self, inputs: list[InputShard]) -> list[str]:
        """The bucket parts: fixed by the data (one per input shard), never by the rank count; against a
        base, the band index's partitions, so that bucket part ``p`` probes index partition ``p`` only."""
        if self._probed:
            return [f"p{p:05d}" for p in range(self._band_base.partitions)]
        return part_names("g", len(inputs))

    def _part_of(self, keys: np.ndarray) -> np.ndarray:
        """The bucket part of band keys ((n, 18) bytes) against a base: their band index partition."""
        return partition_of("band", keys, self._band_base.partitions).astype(np.int64)

    def _open_band_index(self, ctx: StageContext) -> None:
        """The build's band index, as the base left it: probed when it has the base's generations (a base
        of other band parameters ends the job in one line); a build that keeps indexes writes its own
        records whether or not it has a base."""
        build = build_dir_of_stage(ctx.out_dir)
        self._records = build is not None and (dedup_index_dir(build, "exact") / CURRENT).exists()
        if build is None or not dedup_base_path(build).exists():
            return  # no base: the build's own band index (an earlier run's, of other parameters) is not read
        self._band_base = base_generations(ctx.out_dir, "band", self.band_params())
        if self._band_base is not None and not self._probed:
            ctx.say(
                "the base's band index holds no generation (a base built before builds kept band records): "
                "near-duplicates of base documents are not found"
            )

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        self._held = sorted(holdout_files(ctx.in_paths[0]), key=lambda f: f.name)
        self._open_band_index(ctx)
        groups = self._groups(inputs)
        remove_stale_index_records(ctx, groups if self._records else [])
        phase = self._phase = GlobalPhase(ctx, self._key(inputs))  # (a barrier: after the removal)
        if phase.complete:
            return phase.reused()
        inputs = sorted(inputs, key=lambda s: s.name)
        shards = [s.name for s in inputs]
        self._tags = shard_tags([*shards, BASE_NODE_NAME])  # (refuses a shard whose tag is the base's)
        del self._tags[BASE_NODE_TAG]
        self._signature_parts = _SignatureParts(phase, shards)
        held = [f.name for f in self._held]
        self._held_parts = _SignatureParts(phase, held, HELD_SIGNATURES)
        self._hasher = MinHasher(self.params)
        # the repository graph's parts (repositories and their buckets) are fixed by the data alone
        repos = self._repos = part_names("r", len(inputs))
        repo_groups = part_names("g", len(inputs))

        # 1. signatures, a part per input shard (a part whose files are damaged is redone)
        self._drop_damaged_signatures(phase, inputs)
        phase.map(SIGNATURES, inputs, lambda s, w: self._write_signatures(s, w, len(groups)))
        if held:  # the held-out pages, a part per holdout file
            phase.map(
                HELD_SIGNATURES,
                self._held,
                lambda f, w: self._write_signatures(f, w, len(groups), HELD_TAG + f.name, "holdout_"),
            )
        text = _Graph(SIGNATURES, BUCKETS, LABELS, CLUSTERS, shards, self._tags, self._signature_parts)
        # 2-4. the text graph: buckets (and the candidates matching a held-out page), components,
        # verified clusters
        self._cluster(phase, text, groups, inputs)
        # 5. verdicts to their shard's decision table
        route_verdicts(phase, DECISIONS, CLUSTERS, groups, shards, also=[(GIANT_CLUSTERS, shards)])
        if self._records:  # 6. the build's own band index records, a key once, at the key's part
            self._band_records(phase, groups, inputs)
        # R. the repository graph: code documents to their repository's part, the same steps over
        # repositories, then each repository's verdict to its documents' shards
        self._repositories(phase, inputs, repos)
        repo_parts = _SignatureParts(phase, repos, REPOS)
        repo_graph = _Graph(
            REPOS, REPO_BUCKETS, REPO_LABELS, REPO_CLUSTERS, repos, shard_tags(repos), repo_parts, "repo_", True
        )
        self._cluster(phase, repo_graph, repo_groups, group_units(repos))
        route_verdicts(phase, REPO_DECISIONS, REPO_CLUSTERS, repo_groups, repos)
        self._repo_docs(phase, repo_graph, shards)
        facts = None
        if ctx.rank == 0:
            facts = merge_facts(
                [
                    p.facts
                    for step, names in (
                        (SIGNATURES, shards),
                        (HELD_SIGNATURES, held),
                        (BUCKETS, groups),
                        (BAND_RECORDS, groups if self._records else []),
                        (HOLDOUT, shards if held else []),
                        (LABELS, shards),
                        (COMPONENTS, groups),
                        (CLUSTERS, groups),
                        (GIANT_CLUSTERS, shards),
                        (REPOS, repos),
                        (REPO_BUCKETS, repo_groups),
                        (REPO_LABELS, repos),
                        (REPO_CLUSTERS, repo_groups),
                        (REPO_DOCS, shards),
                    )
                    for p in phase.parts(step, names)
                ]
            )
        steps = {SIGNATURES: shards, BUCKETS: groups, LABELS: shards, CLUSTERS: groups, DECISIONS: shards}
        steps |= {COMPONENTS: groups, GIANT_CLUSTERS: shards}
        steps |= {REPOS: repos, REPO_FILES: repos, REPO_BUCKETS: repo_groups, REPO_LABELS: repos}
        steps |= {REPO_CLUSTERS: repo_groups, REPO_DECISIONS: repos, REPO_DOCS: shards}
        if held:
            steps |= {HELD_SIGNATURES: held, HOLDOUT: shards}
        if self._probed:
            steps |= {BASE_LINKS: groups}
        if self._records:
            steps |= {BAND_RECORDS: groups}
        return phase.finish(steps, ctx.comm.bcast(facts, root=0))

    # -- 1. signatures -------------------------------------------------------------------------------
    def _write_signatures(
        self, shard: InputShard | HoldoutFile, writer: PartWriter, groups: int, tag: str = "", facts: str = ""
    ) -> dict[str, Any]:
        """A signature part: doc_ids, representative keys, signatures and sorted band rows of the
        documents of ``shard``, their nodes tagged ``tag`` (the shard's name by default); the facts'
        names begin with ``facts``. A code document (an input shard's) gets the empty text signature,
        so it is never banded with text, and goes to the repository graph instead: its line-set
        signature and rank fields (``.code_docs``) and its files' content hashes (``.code_files``)."""
        ids, rep, sigs, batch, cells, text_bytes = [], [], [], [], [], []
        code = _CodeRows(self._hasher, len(self._repos), shard.name) if not tag else None
        for i, doc in enumerate(iter_docs(shard.path)):
            ids.append(doc_id_bytes(doc.doc_id))
            rep.append(encode_representative_key(doc))
            cells.append("\t".join(doc.group))
            text_bytes.append(len(doc.text.encode("utf-8")))
            if code is not None and doc.source_tier == CODE_TIER:
                code.add(i, doc)
                batch.append("")  # no units: the empty signature
            else:
                batch.append(doc.text)
            if len(batch) >= self.config.batch_docs:
                sigs.append(self._hasher.signatures(batch))
                batch = []
        if batch or not sigs:
            sigs.append(self._hasher.signatures(batch))
        if code is not None:
            code.write(writer)
        arrays = (
            np.frombuffer(b"".join(ids), np.uint8).reshape(-1, DOC_ID_BYTES),
            np.frombuffer(b"".join(rep), np.uint8).reshape(-1, REP_KEY_BYTES),
            np.concatenate(sigs),
        )
        for suffix, array in zip(SIG_FILES, arrays, strict=True):
            np.save(writer.open(suffix), array, allow_pickle=False)
        passing = (np.array(cells, dtype=np.str_), np.array(text_bytes, dtype=np.int64))
        for suffix, array in zip(PASS_FILES, passing, strict=True):
            np.save(writer.open(suffix), array, allow_pickle=False)
        part_of = self._part_of if self._probed else None
        rows = band_rows(self._hasher, arrays[0], arrays[2], tag or shard.name, groups, part_of)
        writer.open(BANDS).write(rows.tobytes())
        offsets = np.searchsorted(rows["part"], np.arange(groups + 1)).astype(np.int64)
        np.save(writer.open(BAND_OFFSETS), offsets, allow_pickle=False)
        code_docs = code.count if code is not None else 0
        return {
            f"{facts}docs": len(ids),
            f"{facts}docs_without_shingles": int(is_empty(arrays[2]).sum()) - code_docs,
            **({"code_docs": code_docs} if code is not None else {}),
        }

    def _drop_damaged_signatures(self, phase: GlobalPhase, inputs: list[InputShard]) -> None:
        """Each rank checks its completed signature parts against the digests their markers recorded;
        a damaged part is forgotten, so the map step below computes it again."""
        for shard in assign(inputs, phase.ctx.rank, phase.ctx.size):
            phase.verified_part(SIGNATURES, shard.name)

    def _load_signatures(
        self, phase: GlobalPhase, shard_name: str, step: str = SIGNATURES
    ) -> tuple[np.ndarray, ...]:
        part = phase.part(step, shard_name)
        if part is None:
            raise FileNotFoundError(f"signatures of {shard_name} are not complete")
        return tuple(np.load(part.path(s), mmap_mode="r", allow_pickle=False) for s in SIG_FILES)

    def _cluster(self, phase: GlobalPhase, graph: _Graph, groups: list[str], units: list[Any]) -> None:
        """Steps 2-4 over one graph: buckets, connected components, verified clusters and verdicts."""
        # 2. each bucket part reads its band rows from every signature part -> candidate edges (and,
        # for text, the candidates matching a held-out page)
        phase.map(graph.buckets, group_units(groups), lambda g, w: self._write_buckets(phase, graph, g, w))
        if graph.signatures == SIGNATURES and self._held:  # 2b. the matches to their candidate's shard
            self._route_holdout(phase, groups, graph.names)
        # 3. connected components -> a label table per signature part
        self._labels(phase, graph, groups)
        # 4a. (text) the components too large for one part: counted per label, found by every rank
        text = graph.signatures == SIGNATURES
        giants = self._giants(phase, graph, groups, units) if text else np.empty(0, dtype=GIANT)
        # 4b. members of the others to their component's part -> verified clusters, representatives,
        # verdicts
        phase.exchange_rows(
            graph.clusters,
            groups,
            units,
            lambda u: self._member_rows(phase, graph, u, len(groups), giants["label"]),
            lambda g, batches, writer: self._reduce_clusters(graph, batches, writer, groups[g]),
            dtype=MEMBER_ROUTE,
            order_fields=("label",),
        )
        # 4c. (text) the large ones verified by every rank together -> verdicts to their shard's part
        if text:
            self._giant_clusters(phase, graph, giants)

    # -- 6. the build's band index records -----------------------------------------------------------
    def _band_records(self, phase: GlobalPhase, groups: list[str], inputs: list[InputShard]) -> None:
        """Step ``band_records``: every band key of every document, with the document's cluster id (its
        ``dup_cluster_id`` as the verdicts set it, a base cluster's included; its own doc_id outside a
        cluster), to the bucket part owning the key, which writes one record per key (the smallest
        cluster id of the documents sharing it) as the artifact ``index_records/PART.band.rec``; a key
        the base already holds is left to the base (keep-first). A later build probing the key finds
        the cluster, and its document joins it."""
        out_dir = phase.ctx.out_dir

        def send(shard: InputShard) -> Iterator[np.ndarray]:
            part = phase.part(SIGNATURES, shard.name)
            bands = np.fromfile(part.path(BANDS), dtype=BAND_ROW)
            if not len(bands):
                return
            clusters = np.array(np.load(part.path(SIG_FILES[0]), allow_pickle=False))  # (n, 16) doc_ids
            for ordinal, verdict in decisions_of(phase.root, DECISIONS, shard.name).items():
                clusters[int(ordinal)] = np.frombuffer(bytes.fromhex(verdict["cluster"]), np.uint8)
            rows = np.empty(len(bands), dtype=BAND_VALUE_ROUTE)
            rows["part"], rows["key"] = bands["part"], bands["key"]
            ordinals = bands["node"]["ordinal"].astype(np.int64)
            rows["value"] = np.ascontiguousarray(clusters[ordinals]).view(BAND_VALUE_ROUTE["value"]).reshape(-1)
            yield rows

        def reduce(g: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            found = np.empty(0, f"V{BAND_KEY_BYTES}")
            if self._probed:
                found = np.fromfile(phase.part(BUCKETS, groups[g]).path(BASE_KEYS), dtype=found.dtype)
            own = RecordsFile(out_dir / INDEX_RECORDS / f"{groups[g]}{INDEX_RECORDS_SUFFIX}")
            last = None  # the previous batch's last key: its records are written
            for batch in batches:  # sorted by (key, value): a key's first row has its smallest value
                key = np.ascontiguousarray(batch["key"]).view(f"V{BAND_KEY_BYTES}").reshape(-1)
                first = np.append(True, key[1:] != key[:-1])
                if last is not None:
                    first[0] = key[0] != last
                last = key[-1]
                first &= ~_among(key, found)
                rows = np.empty(int(first.sum()), dtype=BAND_RECORD)
                rows["key"], rows["value"] = key[first], batch["value"][first]
                own.write_rows(rows)
            own.close()  # before the part's marker: a completed part always has its records
            return {"index_records": own.records}

        phase.exchange_rows(
            BAND_RECORDS, groups, inputs, send, reduce, dtype=BAND_VALUE_ROUTE, order_fields=("key", "value")
        )

    # -- R. repositories ------------------------------------------------------------------------------
    def _repositories(self, phase: GlobalPhase, inputs: list[InputShard], repos: list[str]) -> None:
        """Step ``repos``: every code document's row to its repository's part, which merges each
        repository's documents: its signature (their elementwise minimum, the MinHash of the union of
        their line sets), its file count, its representative key (``encode_repository_key``) and band
        rows, written as a signature part (SIG_FILES, BANDS) of the repository graph, and ``.members``
        (its documents, to send its verdict back to). Step ``repo_files``: every file hash to the same
        part, which keeps each repository's distinct ones (FILE_ROW, sorted) for the exact share."""
        k = self.config.num_perm
        dtype = code_doc_dtype(k)

        def send_docs(shard: InputShard) -> Iterator[np.ndarray]:
            yield np.fromfile(phase.part(SIGNATURES, shard.name).path(CODE_DOCS), dtype=dtype)

        def reduce_docs(p: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            merged = _RepositoryMerge(k)
            for batch in batches:  # sorted by repository, then the other fields
                merged.add(batch.astype(dtype, copy=False))
            ids, keys, sigs, members = merged.arrays()
            for suffix, array in zip(SIG_FILES, (ids, keys, sigs), strict=True):
                np.save(writer.open(suffix), array, allow_pickle=False)
            writer.open(MEMBERS).write(members.tobytes())
            rows = band_rows(self._hasher, ids, sigs, repos[p], len(repos))
            writer.open(BANDS).write(rows.tobytes())
            offsets = np.searchsorted(rows["part"], np.arange(len(repos) + 1)).astype(np.int64)
            np.save(writer.open(BAND_OFFSETS), offsets, allow_pickle=False)
            return {"repositories": len(ids)}

        phase.exchange_rows(REPOS, repos, inputs, send_docs, reduce_docs, dtype=dtype, order_fields=("repo",))

        def send_files(shard: InputShard) -> Iterator[np.ndarray]:
            yield np.fromfile(phase.part(SIGNATURES, shard.name).path(CODE_FILES), dtype=FILE_ROUTE)

        def reduce_files(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            out, last = writer.open(FILE_HASHES), None
            for batch in batches:  # sorted by (repository, hash): a repeat follows its first
                rows = unrouted(batch, FILE_ROUTE, FILE_ROW)
                raw = rows.view(np.uint8).reshape(len(rows), -1)
                new = np.append(True, np.any(raw[1:] != raw[:-1], axis=1)) if len(rows) else np.empty(0, bool)
                if len(rows) and last is not None and raw[0].tobytes() == last:
                    new[0] = False
                if len(rows):
                    last = raw[-1].tobytes()
                out.write(rows[new].tobytes())
            return {}

        phase.exchange_rows(
            REPO_FILES, repos, inputs, send_files, reduce_files, dtype=FILE_ROUTE, order_fields=("repo", "hash")
        )

    def _repository(self, phase: GlobalPhase, repos: list[str], repo: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(signature, distinct file hashes) of a repository by its id, read from its part (found by
        the same hash that routed it there)."""
        name = repos[int(part_of_hash(np.frombuffer(repo, np.uint8).reshape(1, -1), len(repos))[0])]
        ids, _, sigs = self._load_signatures(phase, name, REPOS)
        keys = np.ascontiguousarray(ids).view(f"V{DOC_ID_BYTES}").reshape(-1)  # sorted: rows came by repo
        at = int(np.searchsorted(keys, np.void(repo)))
        path = phase.part(REPO_FILES, name).path(FILE_HASHES)  # memory-mapped: a part is not held
        files = np.memmap(path, dtype=FILE_ROW, mode="r") if path.stat().st_size else np.empty(0, FILE_ROW)
        lo = np.searchsorted(files["repo"], np.void(repo), side="left")
        hi = np.searchsorted(files["repo"], np.void(repo), side="right")
        return np.asarray(sigs[at]), files["hash"][lo:hi].astype(np.uint64)

    def _repo_docs(self, phase: GlobalPhase, graph: _Graph, shards: list[str]) -> None:
        """Step ``repo_docs``: each repository part turns the verdicts on its repositories into verdicts
        on their documents, adding the repository's similarity to its cluster's representative
        (estimated from the signatures) and the share of files they share (exact Jaccard of their
        file hashes), and sends them to their shards' decision tables."""
        shard_no, tags = part_of_name(shards), shard_tags(shards)
        senders = group_units(graph.names)

        def send(unit: GroupUnit) -> Iterator[tuple[int, bytes, bytes]]:
            decisions = decisions_of(phase.root, REPO_DECISIONS, unit.name)
            if not decisions:
                return
            members = np.fromfile(phase.part(REPOS, unit.name).path(MEMBERS), dtype=REPO_MEMBER)
            ids, _, _ = self._load_signatures(phase, unit.name, REPOS)
            starts = np.searchsorted(members["repo"], np.arange(len(ids) + 1))
            for key in sorted(decisions, key=int):
                v, r = decisions[key], int(key)
                sig, files = self._repository(phase, graph.names, ids[r].tobytes())
                rep_sig, rep_files = (sig, files)
                if v["dup_of"]:
                    rep_sig, rep_files = self._repository(phase, graph.names, bytes.fromhex(v["dup_of"]))
                similarity, share = estimated_similarity(sig, rep_sig), exact_jaccard(files, rep_files)
                verdict = canonical_json({**v, "similarity": similarity, "file_share": share})
                for m in members[starts[r] : starts[r + 1]]:
                    yield shard_no(tags[m["shard_tag"].tobytes()]), str(int(m["ordinal"])).encode(), verdict

        def reduce(_: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
            table = {k.decode(): json.loads(v) for k, v in records}
            writer.write_json(DECISION_TABLE, table)
            return {"code_docs_in_repo_clusters": len(table)}

        phase.exchange(REPO_DOCS, shards, senders, send, reduce)

    # -- 2. buckets ----------------------------------------------------------------------------------
    def _write_buckets(self, phase: GlobalPhase, graph: _Graph, unit: Any, writer: PartWriter) -> dict[str, Any]:
        """One bucket part: its band rows from every signature part (a contiguous run of each, found by
        the part's offsets), sorted by (band key, node), grouped into buckets, linked as stars."""
        g = int(unit.name[1:])
        rows = _band_run(phase, graph.signatures, graph.names, g)
        edges, facts = bucket_star_edges(rows, self.config.bucket_cap)
        facts = {graph.facts + k: v for k, v in facts.items()}
        if graph.signatures == SIGNATURES and self._probed:  # edges to the base clusters the keys name
            base_edges, found = self._base_edges(g, rows)
            edges = concat([edges, base_edges], EDGE)
            writer.open(BASE_KEYS).write(found.tobytes())
            facts["base_keys"] = len(found)
        writer.open(EDGES).write(edges.tobytes())
        if graph.signatures == SIGNATURES and self._held:
            held = _band_run(phase, HELD_SIGNATURES, [f.name for f in self._held], g)
            hits, pairs = self._holdout_hits(rows, held)
            writer.open(HITS).write(hits.tobytes())
            facts = {**facts, "holdout_pairs": pairs}
        return facts

    def _base_edges(self, g: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bucket part ``g``'s band keys probed in the base's band index (partition ``g``: one Bloom
        filter and one mapped file; a Bloom hit is confirmed by lookup): an edge from every document with
        a key the base holds to the node of the base cluster it names (keep-first: the document joins that
        cluster, whose id and members stay as they are), and the keys found (sorted, each once)."""
        if not len(rows):
            return np.empty(0, EDGE), np.empty(0, f"V{BAND_KEY_BYTES}")
        key = np.ascontiguousarray(rows["key"]).view(f"V{BAND_KEY_BYTES}").reshape(-1)
        heads = np.flatnonzero(np.append(True, key[1:] != key[:-1]))  # rows are sorted by (key, node)
        found = self._band_base.index.probe_partition(g, key[heads])
        hit = np.repeat(found.found, np.diff(np.append(heads, len(rows))))
        edges = np.empty(int(hit.sum()), dtype=EDGE)
        edges["node"] = rows["node"][hit]
        cluster = np.repeat(found.values, np.diff(np.append(heads, len(rows))))[hit]
        edges["hub"] = base_nodes(cluster)
        return edges, key[heads][found.found]

    def _holdout_hits(self, rows: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, int]:
        """The candidates of a bucket part's band ``rows`` that share a bucket with a held-out page
        (``held``: the held-out pages' band rows of the part) and agree with it on at least
        ``verify_threshold`` of their signatures: HIT rows, one per candidate (its best agreement),
        node ascending; and the number of distinct (candidate, held-out page) pairs checked."""
        if not len(rows) or not len(held):
            return np.empty(0, HIT), 0
        hkey = np.ascontiguousarray(held["key"]).view(f"V{BAND_KEY_BYTES}").reshape(-1)
        order = np.argsort(hkey, kind="stable")
        hkey, hnode = hkey[order], held["node"][order]
        ckey = np.ascontiguousarray(rows["key"]).view(f"V{BAND_KEY_BYTES}").reshape(-1)
        lo, hi = np.searchsorted(hkey, ckey, "left"), np.searchsorted(hkey, ckey, "right")
        count = hi - lo
        match = np.flatnonzero(count)
        if not len(match):
            return np.empty(0, HIT), 0
        n = count[match]
        first = np.repeat(np.cumsum(n) - n, n)
        pairs = np.empty(int(n.sum()), dtype=[("node", NODE), ("held", NODE)])
        pairs["node"] = rows["node"][np.repeat(match, n)]
        pairs["held"] = hnode[np.repeat(lo[match], n) + np.arange(len(pairs)) - first]
        pairs = np.unique(pairs.view(f"V{pairs.dtype.itemsize}").reshape(-1)).view(pairs.dtype)
        k = self.config.num_perm
        agree = np.empty(len(pairs), dtype=np.int64)
        held_names = [HELD_TAG + f.name for f in self._held]
        for at in range(0, len(pairs), PAIR_BATCH):
            p = pairs[at : at + PAIR_BATCH]
            c = _signature_rows(self._signature_parts, p["node"], self._signature_parts.shards)
            h = _signature_rows(self._held_parts, p["held"], held_names)
            agree[at : at + len(p)] = (c == h).sum(axis=1)
        good = agree / k >= self.config.verify_threshold
        if not good.any():
            return np.empty(0, HIT), len(pairs)
        nodes, agree = pairs["node"][good], agree[good]
        # pairs are sorted by (candidate node, held-out node): each candidate's rows are one run
        raw = np.ascontiguousarray(nodes).view(np.uint8).reshape(len(nodes), -1)
        starts = np.flatnonzero(np.append(True, np.any(raw[1:] != raw[:-1], axis=1)))
        hits = np.empty(len(starts), dtype=HIT)
        hits["node"] = nodes[starts]
        hits["agree"] = np.maximum.reduceat(agree, starts)
        return hits, len(pairs)

    def _route_holdout(self, phase: GlobalPhase, groups: list[str], shards: list[str]) -> None:
        """Step ``holdout``: every bucket part's hits to the part of their candidate's shard, which
        writes its NEAR rows (ordinal ascending, the best agreement over every part)."""
        units = group_units(groups)

        def send(unit: GroupUnit) -> Iterator[np.ndarray]:
            hits = np.fromfile(phase.part(BUCKETS, unit.name).path(HITS), dtype=HIT)
            rows = np.empty(len(hits), dtype=HIT_ROUTE)
            rows["part"] = shard_numbers(hits["node"]["shard_tag"], shards)
            rows["ordinal"] = hits["node"]["ordinal"]
            rows["agree"] = hits["agree"]
            yield rows

        def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            got = [b for b in batches if len(b)]
            rows = concat(got, HIT_ROUTE) if got else np.empty(0, HIT_ROUTE)
            # sorted by (ordinal, agree): the last row of each ordinal has its best agreement
            last = np.flatnonzero(np.append(rows["ordinal"][1:] != rows["ordinal"][:-1], len(rows) > 0))
            out = np.empty(len(last), dtype=NEAR)
            out["ordinal"], out["agree"] = rows["ordinal"][last], rows["agree"][last]
            writer.open(NEAR_ROWS).write(out.tobytes())
            return {"holdout_near_docs": len(out)}

        phase.exchange_rows(HOLDOUT, shards, units, send, reduce, dtype=HIT_ROUTE, order_fields=("ordinal", "agree"))

    def _near_holdout(self, shard_name: str) -> dict[int, int]:
        """ordinal -> agreement with the closest held-out page, for a shard's candidates that matched one."""
        if not self._held:
            return {}
        path = self._phase.root / HOLDOUT / f"{shard_name}{NEAR_ROWS}"
        rows = np.fromfile(path, dtype=NEAR)
        return dict(zip(rows["ordinal"].tolist(), rows["agree"].tolist(), strict=True))

    # -- 3. components -> labels ---------------------------------------------------------------------
    def _labels(self, phase: GlobalPhase, graph: _Graph, groups: list[str]) -> None:
        """Connected components of every candidate edge, then each document's label to its shard's
        part. Components are recomputed only while some label part is missing (they are rounds of
        shuffles, not parts; a rerun recomputes them, deterministically)."""
        ctx, comm, shards = phase.ctx, phase.comm, graph.names
        linking = graph.signatures == SIGNATURES and self._probed
        todo = None
        if ctx.rank == 0:
            todo = any(phase.part(graph.labels, s) is None for s in shards)
            todo = todo or (linking and any(phase.part(BASE_LINKS, g) is None for g in groups))
        labels = np.empty(0, dtype=pair_dtype(NODE.itemsize))
        if comm.bcast(todo, root=0):
            edge_parts = phase.parts(graph.buckets, groups) if ctx.rank == 0 else None
            edge_parts = comm.bcast(edge_parts, root=0)
            edges = (
                np.fromfile(part.path(EDGES), dtype=EDGE).view(labels.dtype)
                for part in assign(edge_parts, ctx.rank, ctx.size)
            )
            components = connected_components(
                comm,
                edges,
                width=NODE.itemsize,
                memory_budget_bytes=ctx.memory_budget_bytes,
                spill_dir=Path(ctx.work_dir) / SPILL_DIR,
            )
            # the round count depends on the rank count, so it is logged, not digested
            ctx.say(
                f"{len(components.labels)} clustered documents here; components in {components.rounds} rounds"
            )
            labels = components.labels
        nodes = np.ascontiguousarray(labels["u"]).view(NODE)
        based = _tagged(nodes, BASE_NODE_TAG)  # the base clusters' nodes: to the links, not to a shard
        links, labels, nodes = labels[based], labels[~based], nodes[~based]
        rows = np.empty(len(labels), dtype=LABEL_ROUTE)
        rows["part"] = shard_numbers(nodes["shard_tag"], shards)
        rows["ordinal"] = nodes["ordinal"]
        rows["label"] = labels["v"]

        def send(_: None) -> Iterator[np.ndarray]:
            yield rows

        def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            out = writer.open(LABEL_ROWS)
            n = 0
            for batch in batches:  # sorted by ordinal: the part's LABEL rows in order
                out.write(unrouted(batch, LABEL_ROUTE, LABEL).tobytes())
                n += len(batch)
            return {graph.facts + "clustered_docs": n}

        # each rank sends the labels it holds
        phase.exchange_rows(graph.labels, shards, None, send, reduce, dtype=LABEL_ROUTE, order_fields=("ordinal",))
        if linking:
            self._base_links(phase, groups, links)

    def _base_links(self, phase: GlobalPhase, groups: list[str], links: np.ndarray) -> None:
        """Step ``base_links``: each component holding a base cluster's node (``links``: its labels,
        as connected components left them on this rank) to the part of its label, the part its members
        go to; a part writes its LINK rows sorted by (label, base cluster)."""
        rows = np.empty(len(links), dtype=LINK_ROUTE)
        if len(links):
            label = np.ascontiguousarray(links["v"])
            rows["part"] = part_of_hash(label.view(np.uint8).reshape(len(links), -1), len(groups))
            rows["label"] = label.view(LINK_ROUTE["label"]).reshape(-1)
            rows["base"] = np.ascontiguousarray(links["u"]).view(NODE)["doc_id"]

        def send(_: None) -> Iterator[np.ndarray]:
            yield rows

        def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            out = writer.open(LINKS)
            for batch in batches:
                out.write(unrouted(batch, LINK_ROUTE, LINK).tobytes())
            return {}

        phase.exchange_rows(BASE_LINKS, groups, None, send, reduce, dtype=LINK_ROUTE, order_fields=("label", "base"))

    def _links(self, phase: GlobalPhase, group: str) -> np.ndarray:
        """A bucket part's components joined to the base: LINK rows, a label once (its smallest base
        cluster: a component that reaches two base clusters joins the one with the smaller id, and the
        base clusters stay apart), sorted by label. None against no base."""
        if not self._probed:
            return np.empty(0, LINK)
        rows = np.fromfile(phase.part(BASE_LINKS, group).path(LINKS), dtype=LINK)
        return rows[np.flatnonzero(np.append(True, rows["label"][1:] != rows["label"][:-1]))] if len(rows) else rows

    # -- 4. clusters ---------------------------------------------------------------------------------
    def _member_rows(
        self, phase: GlobalPhase, graph: _Graph, shard: Any, parts: int, giants: np.ndarray
    ) -> Iterator[np.ndarray]:
        """The shard's labelled documents as rows routed to the part of their component (a hash of its
        label, whose doc_id is itself a hash), but those of the components ``giants`` (labels, sorted),
        which are verified across ranks. Their signatures stay in this shard's signature part,
        where the component's owner reads them (a member row is 79 bytes, its signature 8 K)."""
        labels = np.fromfile(phase.part(graph.labels, shard.name).path(LABEL_ROWS), dtype=LABEL)
        labels = labels[~_among(np.ascontiguousarray(labels["label"]).view(f"V{NODE.itemsize}"), giants)]
        if not labels.size:
            return
        _, rep, _ = self._load_signatures(phase, shard.name, graph.signatures)
        label_nodes = np.ascontiguousarray(labels["label"])
        rows = np.empty(len(labels), dtype=MEMBER_ROUTE)
        rows["part"] = part_of_hash(label_nodes.view(np.uint8).reshape(len(labels), -1), parts)
        rows["label"] = label_nodes.view(MEMBER_ROUTE["label"])
        rows["rep"] = (
            np.ascontiguousarray(rep[labels["ordinal"].astype(np.int64)]).view(MEMBER["rep"]).reshape(-1)
        )
        rows["ordinal"] = labels["ordinal"]
        rows["shard_tag"] = np.void(shard_tag(shard.name))
        yield rows

    # -- 4a, 4c. components verified across every rank ------------------------------------------------
    def _giants(self, phase: GlobalPhase, graph: _Graph, groups: list[str], units: list[Any]) -> np.ndarray:
        """Step ``components``: each shard's count of each of its labels goes to the label's part (the
        part its members would go to), which sums them and keeps the components of more than
        ``distribute_components_above`` members (GIANT rows, by label). Every rank gets them all: one
        row per component that large."""
        above = self.config.distribute_components_above
        node = f"V{NODE.itemsize}"
        linking = self._probed

        def send(shard: Any) -> Iterator[np.ndarray]:
            labels = np.fromfile(phase.part(graph.labels, shard.name).path(LABEL_ROWS), dtype=LABEL)
            if not len(labels):
                return
            found, counts = np.unique(np.ascontiguousarray(labels["label"]).view(node), return_counts=True)
            rows = np.empty(len(found), dtype=GIANT_ROUTE)
            rows["part"] = part_of_hash(found.view(np.uint8).reshape(len(found), -1), len(groups))
            rows["label"], rows["size"] = found, counts
            yield rows

        def reduce(g: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            out = writer.open(GIANTS)
            links = self._links(phase, groups[g])
            joined = writer.open(LINKED_ROWS) if linking else None
            kept = 0

            def done_with(summed: np.ndarray) -> None:
                """Components whose count is complete: joined to the base (written with their size:
                never verified, so never distributed) or, above the threshold, distributed."""
                nonlocal kept
                based = _among(summed["label"], links["label"])
                if joined is not None and based.any():
                    rows = np.empty(int(based.sum()), dtype=LINKED)
                    rows["label"], rows["size"] = summed["label"][based], summed["size"][based]
                    rows["base"] = links["base"][np.searchsorted(links["label"], rows["label"])]
                    joined.write(rows.tobytes())
                big = summed[~based & (summed["size"].astype(np.int64) > above)]
                out.write(big.tobytes())
                kept += len(big)

            carry: np.ndarray | None = None  # the last label of the batches so far, its count open
            for batch in batches:  # sorted by label
                rows = unrouted(batch, GIANT_ROUTE, GIANT)
                if carry is not None:  # (concatenate may hand back native-endian integers)
                    rows = np.concatenate([carry, rows]).astype(GIANT)
                heads = np.flatnonzero(np.append(True, rows["label"][1:] != rows["label"][:-1]))
                summed = rows[heads].copy()
                summed["size"] = np.add.reduceat(rows["size"].astype(np.int64), heads)
                done_with(summed[:-1])
                carry = summed[-1:]
            if carry is not None:
                done_with(carry)
            return {"distributed_components": kept}

        phase.exchange_rows(COMPONENTS, groups, units, send, reduce, dtype=GIANT_ROUTE, order_fields=("label",))
        giants = None
        if phase.ctx.rank == 0:
            parts = phase.parts(COMPONENTS, groups)
            giants = giant_labels(np.fromfile(p.path(GIANTS), dtype=GIANT) for p in parts)
        return phase.comm.bcast(giants, root=0)

    def _giant_members(self, phase: GlobalPhase, graph: _Graph, giants: np.ndarray) -> Iterator[ShardMembers]:
        """The members of ``giants`` in this rank's shards (label and signature parts)."""
        node = f"V{NODE.itemsize}"
        for unit in assign(group_units(graph.names), phase.ctx.rank, phase.ctx.size):
            labels = np.fromfile(phase.part(graph.labels, unit.name).path(LABEL_ROWS), dtype=LABEL)
            label = np.ascontiguousarray(labels["label"]).view(node)
            mine = _among(label, giants["label"])
            if not mine.any():
                continue
            ordinals = labels["ordinal"][mine].astype(np.int64)
            ids, rep, sigs = self._load_signatures(phase, unit.name, graph.signatures)
            nodes = graph_nodes(np.asarray(ids[ordinals]), ordinals, unit.name)
            yield ShardMembers(
                nodes=np.ascontiguousarray(nodes).view(node),
                labels=label[mine],
                rep=np.ascontiguousarray(rep[ordinals]).view(f"V{REP_KEY_BYTES}").reshape(-1),
                ordinals=ordinals,
                sigs=sigs,
            )

    def _giant_clusters(self, phase: GlobalPhase, graph: _Graph, giants: np.ndarray) -> None:
        """Step ``giant_clusters``: the components ``giants`` verified by every rank together
        (``hpc_jobs.minhash_dedup.giant``: recomputed while any part of the step is missing, as connected
        components are), each verdict sent to its shard's part, which writes verdict lines as
        ``clusters`` does, and counts its clusters (at their representative) and the components
        verification cut apart (at their smallest node)."""
        ctx, comm, shards = phase.ctx, phase.comm, graph.names
        todo = None
        if ctx.rank == 0:
            todo = any(phase.part(GIANT_CLUSTERS, s) is None for s in shards)
        rows = np.empty(0, dtype=GIANT_VERDICT)
        if comm.bcast(todo, root=0) and len(giants):
            cfg = self.config
            settings = Settings(
                cfg.bands, cfg.rows, cfg.num_perm, cfg.verify_threshold, cfg.verify_components_above,
                ctx.memory_budget_bytes, Path(ctx.work_dir) / SPILL_DIR,
            )
            rows, stats = verify_distributed(
                comm,
                giants,
                lambda: self._giant_members(phase, graph, giants),
                lambda nodes: _signature_rows(graph.parts, np.ascontiguousarray(nodes).view(NODE), shards),
                lambda nodes: shard_numbers(np.ascontiguousarray(nodes).view(NODE)["shard_tag"], shards),
                settings,
            )
            self._distributed = stats.reduced(comm)
            ctx.say(f"{len(giants)} components verified across ranks: {self._distributed}")

        def send(_: None) -> Iterator[np.ndarray]:
            yield rows

        def reduce(p: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            sizes: Counter = Counter()
            split = 0

            def verdicts() -> Iterator[tuple[str, str, dict[str, Any]]]:
                nonlocal split
                for batch in batches:  # sorted by ordinal
                    got = batch.astype(GIANT_VERDICT, copy=False)
                    kinds, size = got["kind"].tolist(), got["size"].tolist()
                    clusters, reps = _row_bytes(got["cluster"]), _row_bytes(got["rep"])
                    for i, ordinal in enumerate(got["ordinal"].tolist()):
                        if kinds[i] == SPLIT:
                            split += 1
                            continue
                        sizes[size[i]] += kinds[i] == KEPT
                        dup = "" if kinds[i] == KEPT else reps[i].hex()
                        yield shards[p], str(ordinal), {"cluster": clusters[i].hex(), "size": size[i], "dup_of": dup}

            write_verdicts(writer, verdicts())
            by_size = {str(k): sizes[k] for k in sorted(sizes) if sizes[k]}
            return {"verified_components": split, "cluster_sizes": by_size}

        phase.exchange_rows(
            GIANT_CLUSTERS, shards, None, send, reduce, dtype=GIANT_VERDICT, order_fields=("ordinal", "kind")
        )

    def _reduce_clusters(
        self, graph: _Graph, batches: Iterator[np.ndarray], writer: PartWriter, group: str
    ) -> dict[str, Any]:
        """One bucket part's components, their rows sorted by (label, member record): complete components
        are gathered up to a quarter of the budget and verified together; one that outgrows it alone
        is spilled to ``work/spill`` and verified memory-mapped. A verdict is written per member.
        Signatures are read from the signature parts (memory-mapped) as verification needs them. A
        component joined to a base cluster (``components`` wrote it) is not verified: each member's
        verdict names the base cluster (keep-first: a base document stays its representative)."""
        dtype, routed = MEMBER, MEMBER_ROUTE
        sizes: Counter = Counter()
        facts = {"verified_components": 0}
        joined = np.empty(0, LINKED)
        if graph.signatures == SIGNATURES and self._probed:
            joined = np.fromfile(self._phase.part(COMPONENTS, group).path(LINKED_ROWS), dtype=LINKED)
            facts["base_linked_docs"] = 0
        spill = Path(self._phase.ctx.work_dir) / SPILL_DIR
        limit = max(self._phase.ctx.memory_budget_bytes // 4, dtype.itemsize)
        gathered = _Gathered(limit)  # whole components waiting to be verified together

        def flush() -> Iterator[tuple[str, str, dict[str, Any]]]:
            if gathered.parts:
                yield from self._verdicts(graph, *gathered.take(), facts, sizes)

        def gather(rows: np.ndarray, starts: list[int]) -> Iterator[tuple[str, str, dict[str, Any]]]:
            if gathered.parts and gathered.bytes + rows.nbytes > limit:
                yield from flush()
            gathered.add(rows, starts)

        def tail_done(tail: ComponentMembers) -> Iterator[tuple[str, str, dict[str, Any]]]:
            with tail:
                members = tail.rows()
                if not tail.spilled:
                    yield from gather(members, [0])
                    return
                self._phase.ctx.say(f"a component of {len(members)} members spilled to disk")
                yield from flush()
                yield from self._verdicts(graph, members, np.zeros(1, dtype=np.int64), facts, sizes)

        def verdicts() -> Iterator[tuple[str, str, dict[str, Any]]]:
            label, tail = None, None  # the last component seen, which the next batch may continue
            for batch in batches:
                if len(joined):  # a joined component's rows are all joined: the others stay contiguous
                    based = _among(np.ascontiguousarray(batch["label"]).view(LINKED["label"]), joined["label"])
                    if based.any():
                        facts["base_linked_docs"] += int(based.sum())
                        yield from _joined_verdicts(graph, batch[based], joined)
                        batch = batch[~based]
                        if not len(batch):
                            continue
                raw = np.ascontiguousarray(batch["label"]).view(np.uint8).reshape(len(batch), -1)
                cuts = [0, *(np.flatnonzero(np.any(raw[1:] != raw[:-1], axis=1)) + 1).tolist(), len(batch)]
                members = unrouted(batch, routed, dtype)
                first = 0
                if tail is not None and raw[0].tobytes() == label:
                    tail.append(members[: cuts[1]])
                    first = 1
                if first < len(cuts) - 1:  # the batch starts other components: the tail is complete
                    if tail is not None:
                        yield from tail_done(tail)
                    if first < len(cuts) - 2:  # components wholly inside the batch
                        yield from gather(
                            members[cuts[first] : cuts[-2]], [c - cuts[first] for c in cuts[first:-2]]
                        )
                    label, tail = raw[cuts[-2]].tobytes(), ComponentMembers(dtype, limit, spill)
                    tail.append(members[cuts[-2] :])
            if tail is not None:
                yield from tail_done(tail)
            yield from flush()

        write_verdicts(writer, verdicts())
        p = graph.facts
        by_size = {str(k): sizes[k] for k in sorted(sizes)}
        return {p + k: v for k, v in facts.items()} | {p + "cluster_sizes": by_size}

    def _verdicts(
        self, graph: _Graph, members: np.ndarray, starts: np.ndarray, facts: dict[str, int], sizes: Counter
    ) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Verdicts of whole components (``members`` of each in member-record order, component c from
        ``starts[c]``), in component order, then cluster order (by smallest node), members ascending.
        A cluster's representative is its smallest member record (representative key, ordinal, shard
        tag: unique per document), its id the smallest doc_id."""
        n = len(members)
        comp = np.repeat(np.arange(len(starts), dtype=np.uint64), np.diff(np.append(starts, n)))
        keys = np.empty(n, dtype=[("rep", f"V{REP_KEY_BYTES}"), ("ordinal", ">u4"), ("tag", "V8")])
        keys["rep"], keys["ordinal"], keys["tag"] = members["rep"], members["ordinal"], members["shard_tag"]
        raw = keys.view(np.uint8).reshape(n, -1)
        doc_ids = raw[:, REP_KEY_BYTES - DOC_ID_BYTES : REP_KEY_BYTES]
        roots = self._cluster_roots(graph, members, comp, doc_ids, raw[:, REP_KEY_BYTES:])
        split = np.zeros(len(starts), dtype=bool)  # components cut into more than one cluster
        split[comp[roots != roots[starts[comp.astype(np.int64)]]].astype(np.int64)] = True
        facts["verified_components"] += int(split.sum())
        # clusters of two or more, in root order (component, then smallest node), members ascending
        root_ids, size_of = np.unique(roots, return_counts=True)
        size = size_of[np.searchsorted(root_ids, roots)]
        cluster_sizes, counts = np.unique(size_of[size_of > 1], return_counts=True)
        sizes.update(dict(zip(cluster_sizes.tolist(), counts.tolist(), strict=True)))
        out = np.flatnonzero(size > 1)
        out = out[np.argsort(roots[out], kind="stable")]
        if not len(out):
            return
        cut = np.flatnonzero(np.diff(roots[out])) + 1
        heads = np.append(0, cut)
        # per cluster: the first member by (root, member record) and by (root, doc_id)
        best = out[_first_of_runs(roots[out], raw[out], heads)]
        smallest = out[_first_of_runs(roots[out], doc_ids[out], heads)]
        names = [graph.tags[t] for t in _row_bytes(keys["tag"][out])]
        ordinals = keys["ordinal"][out].tolist()
        for c, (lo, hi) in enumerate(zip(heads.tolist(), [*cut.tolist(), len(out)], strict=True)):
            rep_id = doc_ids[best[c]].tobytes().hex()
            dup = {"cluster": doc_ids[smallest[c]].tobytes().hex(), "size": hi - lo, "dup_of": rep_id}
            kept = {**dup, "dup_of": ""}
            for i in range(lo, hi):
                verdict = kept if out[i] == best[c] else dup
                if graph.ranked:  # members of a cluster come in member-record order: i - lo is the rank
                    verdict = {**verdict, "rank": i - lo}
                yield names[i], str(ordinals[i]), verdict

    def _cluster_roots(
        self, graph: _Graph, members: np.ndarray, comp: np.ndarray, doc_ids: np.ndarray, where: np.ndarray
    ) -> np.ndarray:
        """Each member's cluster, as the index of its smallest node: components of more than
        ``verify_components_above`` members are split by verification (``corpus.dedup.verify``),
        smaller ones are one cluster."""
        n = len(members)
        node_keys = np.empty((n, 8 + NODE.itemsize), dtype=np.uint8)  # (component, node) bytewise
        node_keys[:, :8] = comp.astype(">u8").view(np.uint8).reshape(n, 8)
        node_keys[:, 8 : 8 + DOC_ID_BYTES] = doc_ids
        node_keys[:, 8 + DOC_ID_BYTES :] = where
        order = np.argsort(node_keys.view(f"V{node_keys.shape[1]}").reshape(-1), kind="stable")
        in_order = comp[order]
        roots = np.searchsorted(in_order, in_order)  # unverified: each component's first position
        count = np.bincount(in_order.astype(np.int64))[in_order.astype(np.int64)]
        check = np.flatnonzero(count > self.config.verify_components_above)
        if len(check):
            cfg = self.config
            sigs = _MemberSignatures(
                graph.parts, members[order[check]], self._phase.ctx.memory_budget_bytes // 4
            )
            sub = verified_roots(sigs, cfg.bands, cfg.rows, cfg.verify_threshold, groups=in_order[check])
            roots[check] = check[sub]
        by_member = np.empty(n, dtype=np.int64)
        by_member[order] = roots
        return by_member

    # -- per shard -----------------------------------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        """A document no verdict and no held-out page touches goes on as the line it was read as, a
        member of a text cluster as that line with its cluster's fields set (:class:`Passed`, made by
        ``annotated_line``: neither parses its text); the others are parsed and annotated."""
        near = self._near_holdout(shard.name)
        decisions = decisions_of(self._phase.root, DECISIONS, shard.name)
        repo_decisions = decisions_of(self._phase.root, REPO_DOCS, shard.name)
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
                    annotation, fields = cluster_member(self.name, v)
                    out = annotated_line(line, annotation, **fields)
                if out is not None:
                    source, lang = cells[i].rsplit("\t", 1)
                    yield Passed(out, (source, lang), nbytes), nbytes
                    continue
            doc = Document.from_dict(json.loads(line))
            if i in near:
                similarity = near[i] / self.config.num_perm
                doc = doc.annotate(
                    Annotation(self.name, NEAR_SCORE, similarity, "fail"),
                    scores={**doc.scores, NEAR_SCORE: similarity},
                )
            if r is not None:
                doc = annotate_repository(doc, self.name, r)
            if v is None:
                yield Kept(doc), nbytes
                continue
            annotation, fields = cluster_member(self.name, v)
            yield Kept(doc.annotate(annotation, **fields)), nbytes

    def run_info(self, ctx: StageContext) -> dict[str, Any]:
        return {"distributed_verification": self._distributed} if self._distributed else {}

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
            **({"index": self._band_base.describe() | facts["index"]} if self._probed else {}),
        }


class _CodeRows:
    """The code documents of one shard as the repository graph needs them: a ``code_doc_dtype`` row per
    document (its part = its repository's, by a hash of the repository id) and a FILE_ROUTE row per
    distinct file content hash. Held for one shard, as the shard's text signatures are: a document's
    line set is reduced to its signature as soon as it is read."""

    def __init__(self, hasher: MinHasher, parts: int, shard_name: str) -> None:
        self.hasher, self.parts, self.tag = hasher, parts, shard_tag(shard_name)
        self.dtype = code_doc_dtype(hasher.params.num_perm)
        self.docs: list[tuple] = []
        self.sigs: list[np.ndarray] = []
        self.files: list[np.ndarray] = []

    @property
    def count(self) -> int:
        return len(self.docs)

    def add(self, ordinal: int, doc: Document) -> None:
        files = document_files(doc)
        repo, tier, release = document_rank_fields(doc)
        self.docs.append((repo, tier, release, ordinal, len(files)))
        lines = line_hashes(files)
        self.sigs.append(self.hasher.set_signatures(lines, np.array([0, len(lines)]))[0])
        self.files.append(file_hashes(files))

    def write(self, writer: PartWriter) -> None:
        n = len(self.docs)
        rows = np.empty(n, dtype=self.dtype)
        if n:
            sigs = np.stack(self.sigs)
            repos = np.frombuffer(b"".join(d[0] for d in self.docs), np.uint8).reshape(n, -1)
            rows["part"] = part_of_hash(repos, self.parts)
            rows["repo"] = repos.view(f"V{repos.shape[1]}").reshape(-1)
            rows["tier"] = [d[1] for d in self.docs]
            rows["release"] = np.frombuffer(b"".join(d[2] for d in self.docs), f"V{len(self.docs[0][2])}")
            rows["ordinal"] = [d[3] for d in self.docs]
            rows["shard_tag"] = np.void(self.tag)
            rows["files"] = [d[4] for d in self.docs]
            rows["sig"] = np.ascontiguousarray(sigs).view(self.dtype["sig"]).reshape(-1)
        writer.open(CODE_DOCS).write(rows.tobytes())
        counts = [len(f) for f in self.files]
        files = np.empty(sum(counts), dtype=FILE_ROUTE)
        if len(files):
            files["part"] = np.repeat(rows["part"], counts)
            files["repo"] = np.repeat(rows["repo"], counts)
            files["hash"] = np.concatenate(self.files)
        writer.open(CODE_FILES).write(files.tobytes())


class _RepositoryMerge:
    """A repository part's code-document rows (sorted by repository) merged into one record per
    repository as they stream in: signature = elementwise minimum, files summed, most trusted tier."""

    def __init__(self, num_perm: int) -> None:
        self.k = num_perm
        self.ids: list[bytes] = []
        self.keys: list[bytes] = []
        self.sigs: list[np.ndarray] = []
        self.members: list[tuple[int, bytes, int]] = []
        self._open: list[Any] | None = None  # [repo, tier, release, files, signature]

    def add(self, rows: np.ndarray) -> None:
        sigs = np.ascontiguousarray(rows["sig"]).view(np.uint64).reshape(len(rows), self.k)
        for j in range(len(rows)):
            repo = rows["repo"][j].tobytes()
            if self._open is None or self._open[0] != repo:
                self._close()
                self._open = [repo, int(rows["tier"][j]), rows["release"][j].tobytes(), 0, sigs[j].copy()]
            else:
                np.minimum(self._open[4], sigs[j], out=self._open[4])
                self._open[1] = min(self._open[1], int(rows["tier"][j]))
            self._open[3] += int(rows["files"][j])
            self.members.append((len(self.ids), rows["shard_tag"][j].tobytes(), int(rows["ordinal"][j])))

    def _close(self) -> None:
        if self._open is not None:
            repo, tier, release, files, sig = self._open
            self.ids.append(repo)
            self.keys.append(encode_repository_key(tier, files, release, repo))
            self.sigs.append(sig)
            self._open = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids (n, 16) uint8, representative keys (n, 35) uint8, signatures (n, K), REPO_MEMBER rows)."""
        self._close()
        n = len(self.ids)
        ids = np.frombuffer(b"".join(self.ids), np.uint8).reshape(n, DOC_ID_BYTES)
        keys = np.frombuffer(b"".join(self.keys), np.uint8).reshape(n, REP_KEY_BYTES)
        sigs = np.stack(self.sigs) if n else np.empty((0, self.k), dtype=np.uint64)
        members = np.array(self.members, dtype=REPO_MEMBER) if self.members else np.empty(0, REPO_MEMBER)
        return ids, keys, sigs, members


class _Gathered:
    """Member records of whole components, gathered to be verified in one pass (``parts`` in order,
    component c beginning at row ``starts[c]`` of their concatenation)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[np.ndarray] = []
        self.starts: list[int] = []
        self.rows = self.bytes = 0

    def add(self, rows: np.ndarray, starts: list[int]) -> None:
        self.starts.extend(self.rows + s for s in starts)
        self.parts.append(rows)
        self.rows += len(rows)
        self.bytes += rows.nbytes

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        members = self.parts[0] if len(self.parts) == 1 else concat(self.parts, self.parts[0].dtype)
        starts = np.array(self.starts, dtype=np.int64)
        self.parts, self.starts, self.rows, self.bytes = [], [], 0, 0
        return members, starts


class _SignatureParts:
    """The signatures a signature step wrote, one memory map per shard (``.sigs.npy``), the most
    recently used few kept open: a component's owner reads its members' signatures where they are."""

    OPEN = 64

    def __init__(self, phase: GlobalPhase, shards: list[str], step: str = SIGNATURES) -> None:
        self.phase, self.shards, self.step = phase, shards, step
        self._open: OrderedDict[int, np.ndarray] = OrderedDict()

    def of(self, shard_no: int) -> np.ndarray:
        sigs = self._open.pop(shard_no, None)
        if sigs is None:
            part = self.phase.part(self.step, self.shards[shard_no])
            sigs = np.load(part.path(SIG_FILES[2]), mmap_mode="r", allow_pickle=False)
            if len(self._open) >= self.OPEN:
                self._open.popitem(last=False)
        self._open[shard_no] = sigs
        return sigs


class _MemberSignatures:
    """The signatures of ``members`` (MEMBER rows, in this order): read from the signature parts, shard
    by shard, by ordinal. Up to ``limit`` bytes of them are read at once and held; beyond that (a giant
    component) what ``verified_roots`` indexes (a band's columns of every row, or a few rows) is read
    when asked for, so they are never copied whole."""

    def __init__(self, parts: _SignatureParts, members: np.ndarray, limit: int) -> None:
        self.parts = parts
        self.shard = shard_numbers(members["shard_tag"], parts.shards)
        self.ordinal = members["ordinal"].astype(np.int64)
        self.shape = (len(members), parts.of(int(self.shard[0])).shape[1] if len(members) else 0)
        self.held = None
        if self.shape[0] * self.shape[1] * 8 <= limit:
            self.held = self._take(np.arange(self.shape[0]), slice(None))

    def __getitem__(self, index: Any) -> np.ndarray:
        if self.held is not None:
            return self.held[index]
        if isinstance(index, tuple):  # (all rows, some columns): one band
            rows, cols = index
            return self._take(np.arange(self.shape[0])[rows], cols)
        return self._take(np.asarray(index, dtype=np.int64), slice(None))

    def _take(self, idx: np.ndarray, cols: slice) -> np.ndarray:
        out = np.empty((len(idx), len(range(self.shape[1])[cols])), dtype=np.uint64)
        shard = self.shard[idx]
        by_shard = np.argsort(shard, kind="stable")
        for group in np.split(by_shard, np.flatnonzero(np.diff(shard[by_shard])) + 1):
            if len(group):
                out[group] = self.parts.of(int(shard[group[0]]))[self.ordinal[idx[group]], cols]
        return out


def _band_run(phase: GlobalPhase, step: str, names: list[str], g: int) -> np.ndarray:
    """Bucket part ``g``'s band rows of every signature part of ``step`` (a contiguous run of each,
    found by the part's offsets), one after another."""
    runs = []
    for name in names:
        part = phase.part(step, name)
        lo, hi = np.load(part.path(BAND_OFFSETS), allow_pickle=False)[g : g + 2]
        runs.append(
            np.fromfile(part.path(BANDS), dtype=BAND_ROW, offset=int(lo) * BAND_ROW.itemsize, count=int(hi - lo))
        )
    return concat(runs, BAND_ROW)


def _signature_rows(parts: _SignatureParts, nodes: np.ndarray, tag_names: list[str]) -> np.ndarray:
    """The signatures of ``nodes`` (NODE rows of the shards ``parts`` holds, whose tags are those of
    ``tag_names``), read from their signature parts by ordinal."""
    shard = shard_numbers(nodes["shard_tag"], tag_names)
    ordinal = nodes["ordinal"].astype(np.int64)
    out = np.empty((len(nodes), parts.of(int(shard[0])).shape[1] if len(nodes) else 0), dtype=np.uint64)
    for s in np.unique(shard).tolist():
        at = np.flatnonzero(shard == s)
        out[at] = parts.of(s)[ordinal[at]]
    return out


def _joined_verdicts(
    graph: _Graph, rows: np.ndarray, joined: np.ndarray
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """The verdicts of members (MEMBER_ROUTE ``rows``) of components joined to a base cluster
    (``joined``: LINKED rows sorted by label): each is ``dup_of`` the base cluster, whose id it takes;
    its size is the component's member count in this build."""
    at = np.searchsorted(joined["label"], np.ascontiguousarray(rows["label"]).view(LINKED["label"]))
    cluster = [c.hex() for c in _row_bytes(joined["base"][at])]
    size = joined["size"][at].tolist()
    names = [graph.tags[t] for t in _row_bytes(rows["shard_tag"])]
    for i, ordinal in enumerate(rows["ordinal"].tolist()):
        yield names[i], str(ordinal), {"cluster": cluster[i], "size": size[i], "dup_of": cluster[i]}


def _tagged(nodes: np.ndarray, tag: bytes) -> np.ndarray:
    """Whether each NODE carries shard tag ``tag``."""
    tags = np.ascontiguousarray(nodes["shard_tag"]).view(">u8").reshape(-1)
    return tags == np.frombuffer(tag, dtype=">u8")[0]


def base_nodes(clusters: np.ndarray) -> np.ndarray:
    """The graph nodes standing for base clusters (their ids: V16 doc_ids), tagged
    :data:`BASE_NODE_TAG`: never an input shard's, so they are routed to no shard."""
    nodes = np.zeros(len(clusters), dtype=NODE)
    nodes["doc_id"] = np.ascontiguousarray(clusters).view(NODE["doc_id"]).reshape(-1)
    nodes["shard_tag"] = np.void(BASE_NODE_TAG)
    return nodes


def _among(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is one of ``sorted_keys`` (byte fields of the same width)."""
    if not len(sorted_keys) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[at] == values


def _first_of_runs(runs: np.ndarray, raw: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """For rows grouped in runs of equal ``runs`` (ascending; run r starts at ``heads[r]``), the index
    of each run's bytewise smallest row of ``raw`` (n, w) uint8."""
    keyed = np.empty((len(raw), 8 + raw.shape[1]), dtype=np.uint8)
    keyed[:, :8] = runs.astype(">u8").view(np.uint8).reshape(-1, 8)
    keyed[:, 8:] = raw
    return np.argsort(keyed.view(f"V{keyed.shape[1]}").reshape(-1), kind="stable")[heads]


def cluster_member(stage: str, verdict: dict[str, Any]) -> tuple[Annotation, dict[str, Any]]:
    """What a member of a text cluster gets from its verdict: an annotation of its cluster's size
    (failed by every member but the representative) and its cluster's document fields."""
    size, dup = verdict["size"], verdict["dup_of"]
    annotation = Annotation(stage, "dup_cluster_size", size, "fail" if dup else "pass")
    return annotation, {"dup_cluster_id": verdict["cluster"], "dup_cluster_size": size, "dup_of": dup}


def _row_bytes(rows: np.ndarray) -> list[bytes]:
    raw = np.ascontiguousarray(rows).tobytes()
    w = rows.dtype.itemsize
    return [raw[i : i + w] for i in range(0, len(raw), w)]


def annotate_repository(doc: Document, stage: str, verdict: dict[str, Any]) -> Document:
    """A code document with its repository's cluster: ``repo_cluster`` (the smallest repository id of
    the cluster), ``repo_cluster_size`` (repositories), ``repo_rank`` (its repository's place in the
    cluster's representative order, 0 = the representative), ``repo_dup_of`` (the representative's id;
    only on other members), and the scores ``repo_similarity`` (estimated Jaccard of line sets with
    the representative) and ``repo_file_share`` (exact Jaccard of their file hashes). Every member
    stays a candidate: a version keeps, per cluster, the best-ranked selected repository."""
    dup = verdict["dup_of"]
    notes = [
        Annotation(stage, "repo_cluster", verdict["cluster"], "info"),
        Annotation(stage, "repo_cluster_size", verdict["size"], "fail" if dup else "pass"),
        Annotation(stage, "repo_rank", verdict["rank"], "info"),
    ]
    if dup:
        notes.append(Annotation(stage, "repo_dup_of", dup, "info"))
    scores = {**doc.scores, "repo_file_share": verdict["file_share"], "repo_similarity": verdict["similarity"]}
    return doc.annotate(*notes, scores=dict(sorted(scores.items())))


def size_histogram(sizes: dict[int, int]) -> dict[str, int]:
    """Clusters by size in powers of two: "2", "3-4", "5-8", ... (keys in increasing order)."""
    out: dict[str, int] = {}
    for size in sorted(sizes):
        hi = 2
        while hi < size:
            hi *= 2
        lo = hi // 2 + 1
        label = str(hi) if lo >= hi else f"{lo}-{hi}"
        out[label] = out.get(label, 0) + sizes[size]
    return out


def merge_facts(per_part: list[dict[str, Any]]) -> dict[str, Any]:
    """Every part's facts as the manifest reports them: counts summed (the largest bucket: maximum),
    cluster sizes summed per size."""
    counts = dict.fromkeys(COUNTS, 0)
    index: Counter = Counter()
    sizes: Counter = Counter()
    repo_sizes: Counter = Counter()
    for f in per_part:
        for k, v in f.items():
            if k in INDEX_FACTS:
                index[k] += v
            elif k == "cluster_sizes":
                sizes.update({int(s): n for s, n in v.items()})
            elif k == "repo_cluster_sizes":
                repo_sizes.update({int(s): n for s, n in v.items()})
            elif k in MAXIMA:
                counts[k] = max(counts[k], v)
            else:
                counts[k] += v
    return {
        "counts": counts,
        "cluster_sizes": {str(k): sizes[k] for k in sorted(sizes)},
        "repo_cluster_sizes": {str(k): repo_sizes[k] for k in sorted(repo_sizes)},
        "index": {k: index[k] for k in INDEX_FACTS if k in index},
    }


STAGE = MinhashDedupStage
