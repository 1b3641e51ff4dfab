"""Memory snapshots with real torchrun (2 gloo ranks on CPU, each as if on a node of its own) and
two real keepers on loopback: the trainer hands each rank's part of every snapshot to its node's
keeper, which replicates it to its peer; after the trainers are gone and one node's keeper with
them, a new round restores the newest snapshot from the keepers left, and trains on exactly as an
undisturbed run does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperlaunch.core.memory_snapshots import (
    RESTORE_ENV,
    SNAPSHOTS_ENV,
    Layout,
    newest_restorable,
    restore_json,
)
from tests.support.keepers import Keeper, held_by_live, running_keepers
from tests.support.train_helpers import launch, tiny_args

pytestmark = pytest.mark.integration


@pytest.fixture()
def keepers() -> Iterator[dict[str, Keeper]]:
    with running_keepers(["node-a", "node-b"]) as started:
        yield started


def test_a_round_restores_the_newest_snapshot_from_the_keepers_left_and_trains_on_exactly(
    tmp_path: Path, keepers: dict[str, Keeper],
) -> None:
    """A crashed rank, then its node lost: one step recomputed, not every step since a disk save."""
    layout = Layout({"node-a": [0], "node-b": [1]}, {node: keeper.where for node, keeper in keepers.items()})
    common = ("--no-checkpoints", "--no-export")
    undisturbed = launch(tiny_args(tmp_path / "u-ckpt", *common, steps=12), run_dir=tmp_path / "u-run")
    # Snapshots at steps 4 and 8, then rank 1 crashes before step 10: step 9 is lost.
    first = launch(
        tiny_args(tmp_path / "ckpt", *common, "--memory-checkpoint-every", "4", steps=12), run_dir=tmp_path / "run",
        env={SNAPSHOTS_ENV: layout.to_json(), "HYPERLAUNCH_TEST_CRASH_AT_STEP": "10"}, check=False,
    )
    assert first.returncode != 0 and max(first.steps()) == 9 and not first.events("memory_snapshot_failed"), first.stderr[-3000:]

    assert held_by_live(keepers)["node-a"] == {"node-a": {4: [0], 8: [0]}, "node-b": {4: [1], 8: [1]}}, "its own and node-b's replica"
    keepers["node-b"].kill()  # node-b is lost, its keeper with it
    restore = newest_restorable(held_by_live(keepers), layout.ranks_of)
    assert restore is not None and (restore.step, dict(restore.source)) == (8, {"node-a": "node-a", "node-b": "node-a"})

    again = launch(
        tiny_args(tmp_path / "ckpt", *common, steps=12), run_dir=tmp_path / "run",
        env={SNAPSHOTS_ENV: layout.to_json(), RESTORE_ENV: restore_json(restore, layout)},
    )
    (resumed,) = again.events("resumed")
    assert (resumed["step"], resumed.get("source")) == (8, "memory")
    want, got = undisturbed.steps(), again.steps()
    for step in range(9, 13):
        assert got[step]["loss"] == pytest.approx(want[step]["loss"], rel=1e-6), step
        assert got[step]["lr"] == pytest.approx(want[step]["lr"], rel=1e-12), step
        assert got[step]["samples_consumed"] == want[step]["samples_consumed"]
