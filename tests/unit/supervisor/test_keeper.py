"""The keeper (hyperlaunch.supervisor.keeper): what it keeps, and three of them as the processes a
job's nodes run, on loopback: parts handed over, replicated to the peer once a step is whole,
read back after a node's keeper was killed, and nothing to restore once a node and its peer are
both gone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperlaunch.core.memory_snapshots import (
    KeeperRefused,
    Restore,
    get_part,
    holdings,
    newest_restorable,
    put_part,
)
from hyperlaunch.supervisor.keeper import Store
from tests.support.keepers import Keeper, held_by_live, running_keepers


def _part(step: int, rank: int, size: int = 1000) -> bytes:
    return bytes([(step + rank) % 251]) * size


def test_a_store_keeps_the_newest_whole_steps_and_hands_each_whole_step_over_once() -> None:
    store = Store("node1", keep=2)
    assert store.put("node1", 10, 0, [0, 1], _part(10, 0)) == []
    assert store.put("node1", 10, 1, [0, 1], _part(10, 1)) == [(10, 0, _part(10, 0)), (10, 1, _part(10, 1))]
    assert store.put("node1", 10, 1, [0, 1], _part(10, 1)) == [], "a step is replicated once"
    for step in (20, 30):
        store.put("node1", step, 0, [0, 1], _part(step, 0))
        store.put("node1", step, 1, [0, 1], _part(step, 1))
    store.put("node1", 40, 0, [0, 1], _part(40, 0))
    assert store.held() == {"node1": {20: [0, 1], 30: [0, 1], 40: [0]}}, "two whole steps and the one arriving"
    store.put("node2", 30, 2, [2, 3], _part(30, 2))
    assert store.put("node2", 30, 3, [2, 3], _part(30, 3)) == [], "a peer's replica is not sent on"
    assert store.get("node2", 30, 3) == _part(30, 3) and store.get("node2", 20, 3) is None


def test_a_part_past_the_budget_is_refused_after_older_steps_made_room() -> None:
    store = Store("node1", keep=2, max_bytes=4000)
    for step in (10, 20):
        store.put("node1", step, 0, [0, 1], _part(step, 0))
        store.put("node1", step, 1, [0, 1], _part(step, 1))
    assert store.put("node1", 30, 0, [0, 1], _part(30, 0)) == [], "step 10 gave way"
    assert store.held() == {"node1": {20: [0, 1], 30: [0]}}
    assert store.put("node1", 30, 1, [0, 1], _part(30, 1, size=3000)) is None, "the newest whole step stays"
    assert store.held() == {"node1": {20: [0, 1], 30: [0]}}


_RANKS = {"node1": [0, 1], "node2": [2, 3], "node3": [4, 5]}


@pytest.fixture()
def keepers() -> Iterator[dict[str, Keeper]]:
    """Three keepers on loopback in a ring, as the nodes node1-node3 would run them."""
    with running_keepers(list(_RANKS)) as started:
        yield started


def _until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_keepers_replicate_to_their_peer_and_a_lost_node_is_read_from_it(keepers: dict[str, Keeper]) -> None:
    for step in (10, 20):
        for node, ranks in _RANKS.items():
            for rank in ranks:
                if (step, rank) != (20, 5):  # rank 5 died before it handed step 20 over
                    put_part(keepers[node].address, node, step, rank, ranks, _part(step, rank, 100_000))
    expected = Restore(10, {"node1": "node1", "node2": "node2", "node3": "node3"})
    _until(lambda: newest_restorable(held_by_live(keepers), _RANKS) == expected and all(
        len(held) == 2 for held in held_by_live(keepers).values()
    ))
    assert holdings(keepers["node3"].address)["node2"] == {10: [2, 3], 20: [2, 3]}, "node2's replica, both whole steps"

    keepers["node2"].kill()
    restore = newest_restorable(held_by_live(keepers), _RANKS)
    assert restore == Restore(10, {"node1": "node1", "node2": "node3", "node3": "node3"})
    assert get_part(keepers["node3"].address, "node2", 10, 3) == _part(10, 3, 100_000), "node2's rank 3, from its peer"
    with pytest.raises(KeeperRefused, match="no part of step 30 rank 0 of node1"):
        get_part(keepers["node1"].address, "node1", 30, 0)

    keepers["node3"].kill()
    assert newest_restorable(held_by_live(keepers), _RANKS) is None, "node2 and its peer node3 both gone: the disk checkpoint"


def test_a_part_sent_from_a_file_arrives_as_its_bytes(keepers: dict[str, Keeper], tmp_path: Path) -> None:
    """A rank's data file goes from node-local memory to the keeper by sendfile, beside pieces in memory."""
    data = tmp_path / "__0_0.distcp"
    data.write_bytes(_part(1, 0, 300_000))
    put_part(keepers["node1"].address, "node1", 1, 0, [0], b"head", data, b"tail")
    assert bytes(get_part(keepers["node1"].address, "node1", 1, 0)) == b"head" + data.read_bytes() + b"tail"
