"""A small real stage for testing the runner itself: JSONL files in, documents out.

Lines with invalid JSON are quarantined, documents containing the configured word are filtered (and
copied to the side output ``dropped/``), a document containing ``fail_on`` fails its shard, and an
optional per-document sleep gives the kill tests a window in which a rank is mid-shard.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from corpus.model import Document, Filtered, Kept, Outcome, Quarantined, QuarantineRecord
from corpus.model.digest import sha256_hex
from runtime.input_shard import InputShard, raw_input_shard
from runtime.runner import Stage, StageContext, main
from runtime.side_output import SideOutput


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    drop_word: str = "spam"
    sleep_per_doc: float = 0.0
    seed: int = 0
    fail_on: str = ""


class ToyStage(Stage):
    name = "toy"
    version = "1"
    Config = ToyConfig
    artifact_kinds = ("dropped",)
    side_outputs = (SideOutput("dropped"),)

    def list_inputs(self, ctx: StageContext) -> list[InputShard]:
        return [raw_input_shard(p) for p in sorted(ctx.in_paths)]

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for line in shard.path.read_bytes().splitlines():
            time.sleep(self.config.sleep_per_doc)
            try:
                rec = json.loads(line)
            except ValueError:
                yield (
                    Quarantined(
                        QuarantineRecord(
                            stage=self.name,
                            reason="bad_json",
                            raw_digest=sha256_hex(line),
                            source=shard.name,
                            input_name=shard.name,
                        )
                    ),
                    len(line),
                )
                continue
            doc = Document.create(
                text=rec["text"].strip(),
                source="toy",
                source_tier="web",
                url=rec["url"],
                crawl_date="2026-01-01",
                raw_digest=sha256_hex(line),
            )
            if self.config.fail_on and self.config.fail_on in doc.text:
                raise RuntimeError(f"toy: {doc.text!r} contains {self.config.fail_on!r}")
            if self.config.drop_word in doc.text:
                ctx.side("dropped").write_doc(doc)
                yield Filtered(doc, "contains_drop_word"), len(line)
            else:
                yield Kept(doc), len(line)


if __name__ == "__main__":
    sys.exit(main(ToyStage))
