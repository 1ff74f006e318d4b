"""The fixed-width records of minhash_dedup's global phase: each decodes to what was encoded, and the
bytes of a record sort like its fields (the shuffles and the representative rule rely on that)."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.dedup.records import (
    EDGE,
    LABEL,
    NODE,
    decode_node,
    graph_node,
    graph_nodes,
    member_doc_id,
    member_dtype,
    shard_tag,
    shard_tags,
)


def test_a_graph_node_round_trips_and_one_row_equals_the_batch_row():
    doc_ids = np.frombuffer(bytes(range(32)), np.uint8).reshape(2, 16)
    rows = graph_nodes(doc_ids, np.array([7, 70000]), "part-003")
    assert rows.dtype.itemsize == NODE.itemsize == 28
    for i, ordinal in enumerate((7, 70000)):
        raw = rows[i].tobytes()
        assert raw == graph_node(doc_ids[i].tobytes(), ordinal, "part-003")
        assert decode_node(raw) == (doc_ids[i].tobytes(), ordinal, shard_tag("part-003"))


def test_node_bytes_sort_by_doc_id_then_ordinal():
    a = graph_node(b"\x01" * 16, 300, "z")
    b = graph_node(b"\x01" * 16, 2, "a")
    c = graph_node(b"\x02" + b"\x00" * 15, 0, "a")
    assert sorted([c, a, b]) == [b, a, c]


def test_edges_and_labels_are_nodes_side_by_side():
    n1, n2 = graph_node(b"\x05" * 16, 1, "s"), graph_node(b"\x06" * 16, 2, "s")
    edge = np.frombuffer(n1 + n2, dtype=EDGE)[0]
    assert edge["node"].tobytes() == n1 and edge["hub"].tobytes() == n2
    label = np.frombuffer((9).to_bytes(4, "big") + n1, dtype=LABEL)[0]
    assert int(label["ordinal"]) == 9 and label["label"].tobytes() == n1


def test_a_member_record_round_trips_and_sorts_by_representative_key_first():
    dt = member_dtype(4)
    rows = np.zeros(2, dtype=dt)
    rows["rep"] = [np.void(b"\x02" + b"r" * 34), np.void(b"\x01" + b"s" * 34)]
    rows["ordinal"] = [1, 2]
    rows["shard_tag"] = np.void(shard_tag("x"))
    rows["sig"] = [[1, 2, 3, 2**64 - 1], [5, 6, 7, 8]]
    back = np.frombuffer(rows.tobytes(), dtype=dt)
    assert back["sig"].tolist() == [[1, 2, 3, 2**64 - 1], [5, 6, 7, 8]] and back["ordinal"].tolist() == [1, 2]
    first = min(rows[i].tobytes() for i in range(2))
    assert first == rows[1].tobytes() and member_doc_id(first) == b"s" * 16


def test_shard_tags_map_back_to_names_and_refuse_a_collision(monkeypatch):
    import corpus.dedup.records as records

    assert shard_tags(["a", "b"]) == {shard_tag("a"): "a", shard_tag("b"): "b"}
    monkeypatch.setattr(records, "shard_tag", lambda name: b"\0" * 8)  # two names, one tag
    with pytest.raises(ValueError, match="shard tag"):
        shard_tags(["a", "b"])


def test_a_component_past_its_memory_limit_spills_and_reads_back_the_same_rows(tmp_path):
    from hpc_jobs.minhash_dedup import ComponentMembers

    dt = member_dtype(3)
    rows = np.zeros(50, dtype=dt)
    rows["ordinal"] = np.arange(50)
    rows["sig"] = np.arange(150).reshape(50, 3)
    for limit, spilled in ((1 << 20, False), (4 * dt.itemsize, True)):
        with ComponentMembers(dt, limit, tmp_path) as buf:
            for i in range(50):
                buf.append(rows[i].tobytes())
            back = buf.rows()
            assert buf.spilled == spilled
            assert back.tobytes() == rows.tobytes()
        assert not list(tmp_path.iterdir()), "the spill file is removed with the component"
