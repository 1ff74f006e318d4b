"""Every annotation name a stage writes, each defined once, grouped by the stage that writes it.

An annotation is found again by its (stage, name) pair: :class:`AnnotationName` is that pair, with the
one way to write it (:meth:`~AnnotationName.note`) and to read it back, from a document
(:meth:`~AnnotationName.of`) or from an annotation of a lineage record (:meth:`~AnnotationName.matches`).
A family of names, one per benchmark or PII kind, is an :class:`AnnotationPrefix` and a key. The stages
are those of :data:`corpus.model.stages.PIPELINE`, plus :data:`POLICY` (a selection, not a stage, whose
annotations are returned, never stored). A name here is a stored value: renaming one changes the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corpus.model.document import Annotation, Document
from corpus.model.stages import PIPELINE

Value = float | int | str | None


def _stage(name: str) -> str:
    if name not in PIPELINE:
        raise ValueError(f"annotations of an unknown stage {name!r}")
    return name


INGEST = _stage("ingest")
EXTRACT = _stage("extract")
EXACT_DEDUP = _stage("exact_dedup")
ANNOTATE = _stage("annotate")
LINE_DEDUP = _stage("line_dedup")
MINHASH_DEDUP = _stage("minhash_dedup")
DECONTAMINATE = _stage("decontaminate")
#: the quality policy's decisions (corpus.select.policy): not a stage, never stored in a document
POLICY = "policy"


@dataclass(frozen=True, slots=True)
class AnnotationName:
    """The (stage, name) an annotation is written and found by."""

    stage: str
    name: str

    def note(self, value: Value, verdict: str = "info") -> Annotation:
        """The annotation of this name with ``value``."""
        return Annotation(self.stage, self.name, value, verdict)

    def of(self, doc: Document) -> Annotation | None:
        """The document's latest annotation of this name (None: it has none)."""
        return doc.annotation(self.stage, self.name)

    def matches(self, d: Mapping[str, Any]) -> bool:
        """Whether an annotation's dict (``Annotation.to_dict``, a lineage record's) is of this name."""
        return d.get("name") == self.name and d.get("stage") == self.stage


@dataclass(frozen=True, slots=True)
class AnnotationPrefix:
    """A family of names ``prefix + key`` of one stage (a key: a benchmark, a PII kind)."""

    stage: str
    prefix: str

    def named(self, key: str) -> AnnotationName:
        return AnnotationName(self.stage, self.prefix + key)

    def note(self, key: str, value: Value, verdict: str = "info") -> Annotation:
        return Annotation(self.stage, self.prefix + key, value, verdict)

    def of(self, doc: Document, key: str) -> Annotation | None:
        return doc.annotation(self.stage, self.prefix + key)

    def key_of(self, a: Annotation | Mapping[str, Any]) -> str | None:
        """The key of an annotation (or its dict) of this family; None for any other annotation."""
        name, stage = (a.name, a.stage) if isinstance(a, Annotation) else (a.get("name"), a.get("stage"))
        if not (isinstance(name, str) and name.startswith(self.prefix)) or stage != self.stage:
            return None
        return name[len(self.prefix) :]


# written by ingest (hpc_jobs/ingest/items.py; RECRAWL_OF_DATE: hpc_jobs/ingest/stage.py)
#: a code document's files as ``[[path, language, bytes], ...]`` (canonical JSON), in text order
REPO_FILES = AnnotationName(INGEST, "repo_files")
REPO_PART = AnnotationName(INGEST, "repo_part")  # "<part>/<parts>" of a repository cut in parts
REPO_LICENCE = AnnotationName(INGEST, "repo_licence")  # {"decided_by", "conflicts"} of its licence
CHARSET_CORRECTED = AnnotationName(INGEST, "charset_corrected")  # "<declared>-><believed>"
CHARSET_DETECTED = AnnotationName(INGEST, "charset_detected")  # a detector's guess, no declaration
UNDECODABLE_BYTES = AnnotationName(INGEST, "undecodable_bytes")
RECRAWL_OF_DATE = AnnotationName(INGEST, "recrawl_of_date")  # verdict fail: a recrawl collapsed

# written by extract (hpc_jobs/extract/stage.py)
#: a held-out page's exact-dedup key, ``"<KEY_VERSION>:<hex>"`` of its text before the PII scrub
HOLDOUT_EXACT_KEY = AnnotationName(EXTRACT, "exact_key")
#: a held-out page's PII counts, ``pii_<kind>``
HOLDOUT_PII = AnnotationPrefix(EXTRACT, "pii_")
TRUNCATED_HTML_BYTES = AnnotationName(EXTRACT, "truncated_html_bytes")
INVISIBLE_CHARS_REMOVED = AnnotationName(EXTRACT, "invisible_chars_removed")
UTF8_REPAIRED_CHARS = AnnotationName(EXTRACT, "utf8_repaired_chars")
#: on a page the two-pass gate filtered: the clause it failed and its first-pass value, ``"words >= 20: 7"``
GATE_FAILED = AnnotationName(EXTRACT, "gate_failed")

# written by exact_dedup (hpc_jobs/exact_dedup/stage.py)
EXACT_DUP_OF = AnnotationName(EXACT_DEDUP, "dup_of")  # verdict fail: the keeper's doc_id
EXACT_COPIES = AnnotationName(EXACT_DEDUP, "copies")  # on a keeper: the copies it stands for
EXACT_KEEPER_ID = AnnotationName(EXACT_DEDUP, "keeper_id")  # its doc_id then: what copies/ points at
#: a copy of a held-out page (1.0, verdict fail); also the name of its score
HOLDOUT_EXACT = AnnotationName(EXACT_DEDUP, "holdout_exact")

# written by annotate (hpc_jobs/annotate/stage.py)
LANG = AnnotationName(ANNOTATE, "lang")
QUALITY = AnnotationName(ANNOTATE, "quality")
#: PII replaced, per kind: ``pii_<kind>`` (a kind of corpus.signals.pii.KINDS, never "spans")
PII = AnnotationPrefix(ANNOTATE, "pii_")
PII_SPANS = AnnotationName(ANNOTATE, "pii_spans")  # ``[[start, end, kind], ...]`` before the scrub
#: the ``[annotate] gate`` clause a document did not pass, so its costly signals were not computed (the
#: Gopher/C4 signals, script_fraction, quality); also the name of its score (1.0), which the policy rejects
SIGNALS_SKIPPED = AnnotationName(ANNOTATE, "signals_skipped")

# written by line_dedup (hpc_jobs/line_dedup/stage.py)
LINES_REMOVED = AnnotationName(LINE_DEDUP, "lines_removed")
BYTES_REMOVED = AnnotationName(LINE_DEDUP, "bytes_removed")

# written by minhash_dedup (hpc_jobs/minhash_dedup/: stage.py, graph.py, repo_graph.py)
#: the estimated Jaccard similarity to the closest held-out page (verdict fail); also its score's name
HOLDOUT_NEAR = AnnotationName(MINHASH_DEDUP, "holdout_near")
DUP_CLUSTER_SIZE = AnnotationName(MINHASH_DEDUP, "dup_cluster_size")  # fail on all but the representative
REPO_CLUSTER = AnnotationName(MINHASH_DEDUP, "repo_cluster")
REPO_CLUSTER_SIZE = AnnotationName(MINHASH_DEDUP, "repo_cluster_size")
REPO_RANK = AnnotationName(MINHASH_DEDUP, "repo_rank")
REPO_DUP_OF = AnnotationName(MINHASH_DEDUP, "repo_dup_of")

# written by decontaminate (hpc_jobs/decontaminate/stage.py), per benchmark
CONTAMINATED_RUN = AnnotationPrefix(DECONTAMINATE, "contaminated:")  # the longest run (verdict fail)
CONTAMINATED_ITEM = AnnotationPrefix(DECONTAMINATE, "contaminated_item:")  # the item of that run
CONTAMINATED_ITEMS = AnnotationPrefix(DECONTAMINATE, "contaminated_items:")  # every item (JSON list)
#: the fuzzy tier: the largest share of a passage's words covered by 5-grams held (verdict fail), and that item
CONTAMINATED_FUZZY = AnnotationPrefix(DECONTAMINATE, "contaminated_fuzzy:")
CONTAMINATED_FUZZY_ITEM = AnnotationPrefix(DECONTAMINATE, "contaminated_fuzzy_item:")

# written by the quality policy (corpus/select/policy.py), besides one per failed check named by it
POLICY_DECISION = AnnotationName(POLICY, "decision")

#: every name and family above, by the stage that writes it
WRITTEN_BY: dict[str, tuple[AnnotationName | AnnotationPrefix, ...]] = {
    INGEST: (
        REPO_FILES,
        REPO_PART,
        REPO_LICENCE,
        CHARSET_CORRECTED,
        CHARSET_DETECTED,
        UNDECODABLE_BYTES,
        RECRAWL_OF_DATE,
    ),
    EXTRACT: (
        HOLDOUT_EXACT_KEY,
        HOLDOUT_PII,
        TRUNCATED_HTML_BYTES,
        INVISIBLE_CHARS_REMOVED,
        UTF8_REPAIRED_CHARS,
        GATE_FAILED,
    ),
    EXACT_DEDUP: (EXACT_DUP_OF, EXACT_COPIES, EXACT_KEEPER_ID, HOLDOUT_EXACT),
    ANNOTATE: (LANG, QUALITY, PII, PII_SPANS, SIGNALS_SKIPPED),
    LINE_DEDUP: (LINES_REMOVED, BYTES_REMOVED),
    MINHASH_DEDUP: (HOLDOUT_NEAR, DUP_CLUSTER_SIZE, REPO_CLUSTER, REPO_CLUSTER_SIZE, REPO_RANK, REPO_DUP_OF),
    DECONTAMINATE: (
        CONTAMINATED_RUN,
        CONTAMINATED_ITEM,
        CONTAMINATED_ITEMS,
        CONTAMINATED_FUZZY,
        CONTAMINATED_FUZZY_ITEM,
    ),
    POLICY: (POLICY_DECISION,),
}
