"""The card's pictures are a function of the card's numbers: the same numbers give the same bytes in any
process, whatever its hash seed (docs/report.md)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

#: languages whose values tie, so that only a tie-break decides their order on the plot
TIED = (
    "from corpus.report.plots import grouped_bars_plot\n"
    "series = {'before': {l: 5 for l in ('el', 'vi', 'de', 'fr', 'ja', 'zh')}, 'after': {'el': 2, 'vi': 2}}\n"
    "print(grouped_bars_plot(series, 'documents by language', 'documents'))\n"
)


def render_with_hash_seed(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    got = subprocess.run(
        [sys.executable, "-c", TIED], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return got.stdout


def test_tied_categories_are_drawn_in_the_same_order_under_any_hash_seed():
    assert len({render_with_hash_seed(seed) for seed in ("0", "1", "2", "3")}) == 1
