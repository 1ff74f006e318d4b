"""decontaminate: flag documents that contain eval-set items; keep the corpus's 13-grams for later checks.

Every rank builds the eval index from the registry (cheap next to the corpus; the registry digest is
the prepare digest, so a changed eval set redoes every shard). A flagged document leaves the stream as
``Filtered(doc, "contaminated")`` annotated with each benchmark it matched (its longest run and the
item): the policy keeps contaminated documents out of snapshots, and ``filtered/`` keeps them for the
report. Per output shard, the unique 13-gram hashes of the documents that went on are written to
``ngrams/NAME.npy``; the snapshot merges them into its retained corpus index.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corpus.decont.corpus_index import doc_grams, save_index
from corpus.decont.matcher import EvalIndex
from corpus.decont.ngrams import SCHEME
from corpus.decont.registry import EvalRegistry, RegistryError, registry_digest
from corpus.decont.report import ITEM_PREFIX, REASON, RUN_PREFIX
from corpus.digest import json_digest
from corpus.docshard import iter_docs
from corpus.model import Annotation, Filtered, Kept, Outcome
from corpus.tokenizer import resolve_asset
from runtime.runner import InputShard, Stage, StageContext, StageError, main


@dataclass(frozen=True)
class DecontaminateConfig:
    eval_dir: str = "assets/evals"  # relative paths resolve against the repository
    min_run: int = 10  # consecutive matching 13-grams that make a document contaminated
    min_item_words: int = 8  # eval items shorter than this are too generic to check
    #: computed, not set: the registry's content digest is part of the config (and its hash), so an
    #: eval file changed in place re-runs the stage like any other config change
    eval_registry_hash: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval_registry_hash", registry_digest(resolve_asset(self.eval_dir)))


class Decontaminate(Stage):
    name = "decontaminate"
    version = "2"
    Config = DecontaminateConfig
    artifact_kinds = ("ngrams",)

    def __init__(self, config: DecontaminateConfig) -> None:
        super().__init__(config)
        self.index: EvalIndex | None = None
        self._grams: dict[str, list[np.ndarray]] = {}

    def _load(self) -> EvalIndex:
        if self.index is None:
            try:
                registry = EvalRegistry.load(resolve_asset(self.config.eval_dir))
                if registry.digest != self.config.eval_registry_hash:
                    raise RegistryError(
                        f"eval registry {self.config.eval_dir} changed while the stage started"
                    )
                self.index = EvalIndex(registry, self.config.min_run, self.config.min_item_words)
            except (RegistryError, ValueError) as e:
                raise StageError(str(e)) from e
        return self.index

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        index = self._load()
        if ctx.rank == 0:  # the index files of inputs no longer in the stage would be listed in its manifest
            expected = {f"{s.name}.npy" for s in inputs}
            stale = ctx.out_dir / "ngrams"
            for p in sorted(stale.iterdir()) if stale.is_dir() else []:
                if p.name not in expected and not p.name.startswith("."):
                    p.unlink()
        return json_digest({"eval_registry": index.registry.digest, "scheme": SCHEME})

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        index = self._load()
        grams = self._grams[shard.name] = []
        for doc in iter_docs(shard.path):
            nbytes = len(doc.text.encode("utf-8"))
            matches = index.scan(doc.text)
            if matches:
                notes = []
                for m in matches:
                    notes.append(Annotation(self.name, RUN_PREFIX + m.benchmark, m.run, "fail"))
                    notes.append(Annotation(self.name, ITEM_PREFIX + m.benchmark, m.item_id, "info"))
                yield Filtered(doc.annotate(*notes), REASON), nbytes
            else:
                grams.append(doc_grams(doc.text))
                yield Kept(doc), nbytes

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
        parts = self._grams.pop(shard.name, [])
        hashes = np.concatenate(parts) if parts else np.empty(0, np.uint64)
        save_index(ctx.artifact_path("ngrams", f"{shard.name}.npy"), hashes)

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        index = self._load()
        described = index.registry.describe()
        for name, n in index.unchecked.items():
            described[name]["unchecked_items"] = n
        return {
            "eval_registry_hash": index.registry.digest,
            "eval_registry": described,
            "matching": index.describe() | {"scheme": SCHEME},
        }


STAGE = Decontaminate

if __name__ == "__main__":
    sys.exit(main(STAGE))
