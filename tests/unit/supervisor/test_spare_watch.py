"""Idle spares are watched while a round trains (hyperlaunch.supervisor.spare_watch): the probe
runs in a thread of its own, every interval, and a spare found gone is given back, unless it
was taken as a training node meanwhile; a live spare is left alone."""

from __future__ import annotations

import time
from collections.abc import Sequence

from hyperlaunch.supervisor.spare_watch import SpareWatch


def _until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_spare_found_gone_is_given_back_and_a_live_one_is_kept() -> None:
    spares = ["node3", "node4"]
    given: list[list[str]] = []
    probed: list[list[str]] = []

    def gone(nodes: Sequence[str]) -> list[str]:
        probed.append(list(nodes))
        return [node for node in nodes if node == "node4"]

    watch = SpareWatch(lambda: spares, gone, lambda dead: given.append(list(dead)), interval_s=0.0)
    watch.poll()  # starts the probe
    _until(lambda: probed)
    _until(lambda: (watch.poll(), given)[1])
    assert given == [["node4"]] and probed[0] == ["node3", "node4"]


def test_a_spare_taken_as_a_training_node_meanwhile_is_not_given_back() -> None:
    spares = ["node3"]
    given: list[list[str]] = []

    def gone(nodes: Sequence[str]) -> list[str]:
        spares.clear()  # a lost training node's place was taken by it while the probe ran
        return list(nodes)

    watch = SpareWatch(lambda: spares, gone, lambda dead: given.append(list(dead)), interval_s=0.0)
    watch.poll()
    time.sleep(0.2)
    watch.poll()
    assert given == []


def test_no_spares_no_probe_and_probes_come_at_the_interval() -> None:
    probed: list[int] = []
    watch = SpareWatch(lambda: [], lambda nodes: probed.append(1) or [], lambda dead: None, interval_s=0.0)
    watch.poll()
    assert probed == []
    slow = SpareWatch(lambda: ["node3"], lambda nodes: probed.append(1) or [], lambda dead: None, interval_s=3600)
    for _ in range(5):
        slow.poll()
        time.sleep(0.02)
    assert probed == [1]
