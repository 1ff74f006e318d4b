"""Stage ``policy``: the keep/drop decision from stored values only (see ``corpus.policy``).

It reads no model and no text, so it is cheap; changing a threshold in ``[policy]`` re-runs this
stage alone, every earlier stage's manifest stays as it was.
"""

from __future__ import annotations

import sys

from corpus.model import Document, Filtered, Kept, Outcome
from corpus.policy import PolicyConfig, decide
from runtime.runner import Stage, StageContext, main


class PolicyStage(Stage):
    name = "policy"
    version = "1"
    Config = PolicyConfig

    def process_doc(self, doc: Document, ctx: StageContext) -> Outcome:
        reason, verdicts = decide(doc, self.config)
        doc = doc.annotate(*verdicts)
        return Filtered(doc, reason) if reason else Kept(doc)


STAGE = PolicyStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
