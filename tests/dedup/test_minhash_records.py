"""The fixed-width records of minhash_dedup's global phase: each decodes to what was encoded, and the
bytes of a record sort like its fields (the shuffles and the representative rule rely on that)."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.dedup.records import (
    EDGE,
    LABEL,
    LABEL_ROUTE,
    MEMBER,
    MEMBER_ROUTE,
    NODE,
    decode_node,
    graph_node,
    graph_nodes,
    member_doc_id,
    shard_numbers,
    shard_tag,
    shard_tags,
    unrouted,
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
    rows = np.zeros(2, dtype=MEMBER)
    rows["rep"] = [np.void(b"\x02" + b"r" * 34), np.void(b"\x01" + b"s" * 34)]
    rows["ordinal"] = [1, 2]
    rows["shard_tag"] = np.void(shard_tag("x"))
    back = np.frombuffer(rows.tobytes(), dtype=MEMBER)
    assert back["ordinal"].tolist() == [1, 2] and back["shard_tag"].tolist() == [shard_tag("x")] * 2
    first = min(rows[i].tobytes() for i in range(2))
    assert first == rows[1].tobytes() and member_doc_id(first) == b"s" * 16


def test_shard_tags_map_back_to_names_and_refuse_a_collision(monkeypatch):
    import corpus.dedup.records as records

    assert shard_tags(["a", "b"]) == {shard_tag("a"): "a", shard_tag("b"): "b"}
    monkeypatch.setattr(records, "shard_tag", lambda name: b"\0" * 8)  # two names, one tag
    with pytest.raises(ValueError, match="shard tag"):
        shard_tags(["a", "b"])


def test_a_component_past_its_memory_limit_spills_and_reads_back_the_same_rows(tmp_path):
    from hpc_jobs.minhash_dedup.spill import SpilledRows as ComponentMembers

    rows = np.zeros(50, dtype=MEMBER)
    rows["ordinal"] = np.arange(50)
    rows["rep"] = [np.void(bytes([i]) * 35) for i in range(50)]
    for limit, spilled in ((1 << 20, False), (4 * MEMBER.itemsize, True)):
        with ComponentMembers(MEMBER, limit, tmp_path) as buf:
            for lo in range(0, 50, 3):  # member records arrive as slices of shuffle batches
                buf.append(rows[lo : lo + 3])
            back = buf.rows()
            assert buf.spilled == spilled
            assert back.tobytes() == rows.tobytes()
        assert not list(tmp_path.iterdir()), "the spill file is removed with the component"


def test_routed_rows_carry_the_record_bytes_after_their_route():
    """A LABEL and a member travel with a route prefix (the part; for a member also its component's
    label); ``unrouted`` gives back exactly the record, so the part files keep their bytes."""
    nodes = graph_nodes(np.arange(48, dtype=np.uint8).reshape(3, 16), np.array([5, 1, 9]), "s")
    labels = np.empty(3, dtype=LABEL)
    labels["ordinal"], labels["label"] = [5, 1, 9], nodes
    routed = np.empty(3, dtype=LABEL_ROUTE)
    routed["part"], routed["ordinal"] = 7, labels["ordinal"]
    routed["label"] = nodes.view(LABEL_ROUTE["label"])
    assert unrouted(routed, LABEL_ROUTE, LABEL).tobytes() == labels.tobytes()
    native = routed.astype(routed.dtype.newbyteorder("="))  # as a merge of spilled runs may return it
    assert unrouted(native, LABEL_ROUTE, LABEL).tobytes() == labels.tobytes()

    members = np.zeros(3, dtype=MEMBER)
    members["ordinal"], members["rep"] = [3, 2, 1], [np.void(bytes([i]) * 35) for i in range(3)]
    routed = np.zeros(3, dtype=MEMBER_ROUTE)
    routed["part"], routed["label"] = 2, nodes.view(routed.dtype["label"])
    for name in MEMBER.names:
        routed[name] = members[name]
    got = unrouted(np.concatenate([routed[1:2], routed[2:]]), MEMBER_ROUTE, MEMBER)
    assert got.dtype == MEMBER and got.tobytes() == members[1:].tobytes()


def test_shard_numbers_name_each_nodes_shard_by_its_position():
    names = ["b", "a", "c"]
    nodes = np.concatenate(
        [graph_nodes(np.zeros((2, 16), np.uint8), np.arange(2), n) for n in ("c", "b", "a")]
    )
    assert shard_numbers(nodes["shard_tag"], names).tolist() == [2, 2, 0, 0, 1, 1]
    with pytest.raises(KeyError):
        shard_numbers(graph_nodes(np.zeros((1, 16), np.uint8), np.arange(1), "d")["shard_tag"], names)
