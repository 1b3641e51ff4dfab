"""Which memory snapshot a round restores (hyperlaunch.core.memory_snapshots): the newest step
whose every rank's part is held by a keeper that answered, an owner's own keeper first, else
its peer's replica; never a step some part of which is gone."""

from __future__ import annotations

from hyperlaunch.core.memory_snapshots import Layout, Restore, newest_restorable, ring_peers

_RANKS = {"node1": [0, 1], "node2": [2, 3], "node3": [4, 5]}


def _whole(*owners: str, steps: tuple[int, ...]) -> dict[str, dict[int, list[int]]]:
    return {owner: {step: _RANKS[owner] for step in steps} for owner in owners}


def test_each_node_is_held_by_the_next_in_the_ring() -> None:
    assert ring_peers(["node1", "node2", "node3"]) == {"node1": "node2", "node2": "node3", "node3": "node1"}
    assert ring_peers(["node1", "node2"]) == {"node1": "node2", "node2": "node1"}
    assert ring_peers(["node1"]) == {}, "alone: no peer, the disk checkpoint"


def test_the_newest_whole_step_from_each_nodes_own_keeper() -> None:
    held = {
        "node1": {**_whole("node1", steps=(10, 20)), **_whole("node3", steps=(10, 20))},
        "node2": {**_whole("node2", steps=(10, 20)), **_whole("node1", steps=(10, 20))},
        "node3": {**_whole("node3", steps=(10, 20)), **_whole("node2", steps=(10, 20))},
    }
    assert newest_restorable(held, _RANKS) == Restore(20, {"node1": "node1", "node2": "node2", "node3": "node3"})


def test_a_lost_node_is_read_from_its_peer() -> None:
    held = {
        "node1": {**_whole("node1", steps=(20,)), **_whole("node3", steps=(20,))},
        "node3": {**_whole("node3", steps=(20,)), **_whole("node2", steps=(20,))},
    }
    assert newest_restorable(held, _RANKS) == Restore(20, {"node1": "node1", "node2": "node3", "node3": "node3"})


def test_a_step_missing_one_part_anywhere_is_never_restored() -> None:
    held = {
        "node1": {"node1": {10: [0, 1], 20: [0, 1]}, "node3": {10: [4, 5], 20: [4, 5]}},
        "node2": {"node2": {10: [2, 3], 20: [2]}, "node1": {10: [0, 1], 20: [0, 1]}},
        "node3": {"node3": {10: [4, 5], 20: [4, 5]}, "node2": {10: [2, 3]}},
    }
    assert newest_restorable(held, _RANKS) == Restore(10, {"node1": "node1", "node2": "node2", "node3": "node3"})


def test_a_node_and_its_peer_lost_together_leave_nothing_to_restore() -> None:
    held = {"node1": {**_whole("node1", steps=(20,)), **_whole("node3", steps=(20,))}}
    assert newest_restorable(held, _RANKS) is None
    assert newest_restorable({}, _RANKS) is None
    assert newest_restorable(held, {}) is None


def test_a_layout_reads_back_as_written_and_ignores_what_it_does_not_know() -> None:
    layout = Layout({"node1": [0, 1], "node2": [2, 3]}, {"node1": "10.0.0.1:4000", "node2": "10.0.0.2:4000"}, every=5)
    assert Layout.from_json(layout.to_json()) == layout
    assert Layout.from_json('{"ranks_of": {"n": [0]}, "keepers": {}, "every": -3}') == Layout({"n": [0]}, {}, 0)
    assert Layout.from_json("not json") is None and Layout.from_json('{"ranks_of": []}') is None
