"""Work dealt to ranks by size: no rank is left with the larger units while the others wait."""

from __future__ import annotations

import hashlib
from pathlib import Path

from corpus.formats.docshard import iter_docs
from corpus.model.deal import largest_first
from runtime.input_shard import InputShard
from runtime.runner import assign, shards_of_stage
from tests.test_runner import make_inputs, run_toy


def test_each_item_goes_to_one_rank_and_the_loads_differ_by_at_most_the_largest_item():
    sizes = [17, 3, 3, 40, 8, 8, 8, 1, 25, 12, 5, 30]
    for ranks in (1, 2, 3, 5):
        owned = largest_first(sizes, ranks)
        assert sorted(i for o in owned for i in o) == list(range(len(sizes)))
        loads = [sum(sizes[i] for i in o) for o in owned]
        assert max(loads) - min(loads) <= max(sizes)
        # each rank takes its items largest first
        assert all([sizes[i] for i in o] == sorted((sizes[i] for i in o), reverse=True) for o in owned)


def test_equal_sizes_are_dealt_round_robin():
    assert largest_first([4] * 7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert largest_first([], 2) == [[], []]


def _shard(name: str, text_bytes: int) -> InputShard:
    return InputShard(name, Path(name), hashlib.sha256(name.encode()).hexdigest(), text_bytes=text_bytes)


def test_a_stage_deals_its_input_shards_by_their_text_bytes_not_by_digest_alone():
    shards = [_shard(f"s{k}", b) for k, b in enumerate([900, 800, 100, 100, 100, 100])]
    mine = [assign(shards, rank, 2) for rank in range(2)]
    assert sorted(s.name for m in mine for s in m) == sorted(s.name for s in shards)
    assert sorted(sum(s.size for s in m) for m in mine) == [1000, 1100]
    # a rank's own list does not depend on the order the shards were listed in
    assert [s.name for s in assign(shards[::-1], 0, 2)] == [s.name for s in mine[0]]


def test_units_without_a_size_are_dealt_round_robin_by_digest():
    class Part:
        def __init__(self, name: str) -> None:
            self.name, self.sha256 = name, hashlib.sha256(name.encode()).hexdigest()

    parts = [Part(f"p{k}") for k in range(5)]
    ordered = sorted(parts, key=lambda p: p.sha256)
    assert [assign(parts, r, 2) for r in range(2)] == [ordered[0::2], ordered[1::2]]


def test_a_previous_stage_shard_is_sized_by_the_text_its_documents_hold(tmp_path):
    run_toy(2, make_inputs(tmp_path / "in", files=3), tmp_path / "out")
    shards = shards_of_stage(tmp_path / "out")
    assert len(shards) == 3
    for s in shards:
        assert s.size == sum(len(d.text.encode()) for d in iter_docs(s.path)) > 0
