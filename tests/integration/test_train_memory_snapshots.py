"""Memory snapshots with real torchrun (2 gloo ranks on CPU, each as if on a node of its own) and
two real keepers on loopback: the trainer hands each rank's part of every snapshot to its node's
keeper, which replicates it to its peer; after the trainers are gone and one node's keeper with
them, a new round restores the newest snapshot from the keepers left, and trains on exactly as an
undisturbed run does; or the snapshot is written to the checkpoint folder (the requeue path) and
the next run resumes from it as from any checkpoint."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core import checkpoints as ck
from hyperlaunch.core.memory_snapshots import (
    Layout,
    newest_restorable,
    restore_json,
)
from hyperlaunch.core.script_env import RESTORE_ENV, SNAPSHOTS_ENV
from hyperlaunch.supervisor.snapshot_persist import persist
from tests.support.keepers import Keeper, held_by_live, running_keepers
from tests.support.train_helpers import Run, launch, tiny_args, train_env

pytestmark = pytest.mark.integration
MODEL = "qwen3_tiny"


@pytest.fixture()
def keepers() -> Iterator[dict[str, Keeper]]:
    with running_keepers(["node-a", "node-b"]) as started:
        yield started


def _crashed_after_two_snapshots(tmp_path: Path, layout: Layout) -> None:
    """Snapshots at steps 4 and 8, then rank 1 crashes before step 10: step 9 is lost."""
    first = launch(
        tiny_args(tmp_path / "ckpt", *_COMMON, "--memory-checkpoint-every", "4", steps=12), run_dir=tmp_path / "run",
        # Steps of 0.5 s, as real ones are long: the snapshot of step 8, taken in the background
        # while step 9 trains, is whole before the crash (one still on its way would be lost).
        env={SNAPSHOTS_ENV: layout.to_json(), "HYPERLAUNCH_TEST_CRASH_AT_STEP": "10", "HYPERLAUNCH_TEST_STEP_SECONDS": "0.5"}, check=False,
    )
    assert first.returncode != 0 and max(first.steps()) == 9 and not first.events("memory_snapshot_failed"), first.stderr[-3000:]


def _trained_on_exactly(again: Run, undisturbed: Run) -> None:
    want, got = undisturbed.steps(), again.steps()
    for step in range(9, 13):
        assert got[step]["loss"] == pytest.approx(want[step]["loss"], rel=1e-6), step
        assert got[step]["lr"] == pytest.approx(want[step]["lr"], rel=1e-12), step
        assert got[step]["samples_consumed"] == want[step]["samples_consumed"]


_COMMON = ("--no-checkpoints", "--no-export")


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    work = tmp_path_factory.mktemp("undisturbed")
    return launch(tiny_args(work / "ckpt", *_COMMON, steps=12), run_dir=work / "run")


def test_a_round_restores_the_newest_snapshot_from_the_keepers_left_and_trains_on_exactly(
    tmp_path: Path, keepers: dict[str, Keeper], undisturbed: Run,
) -> None:
    """A crashed rank, then its node lost: one step recomputed, not every step since a disk save."""
    layout = Layout({"node-a": [0], "node-b": [1]}, {node: keeper.where for node, keeper in keepers.items()})
    _crashed_after_two_snapshots(tmp_path, layout)
    assert held_by_live(keepers)["node-a"] == {"node-a": {4: [0], 8: [0]}, "node-b": {4: [1], 8: [1]}}, "its own and node-b's replica"
    keepers["node-b"].kill()  # node-b is lost, its keeper with it
    restore = newest_restorable(held_by_live(keepers), layout.ranks_of)
    assert restore is not None and (restore.step, dict(restore.source)) == (8, {"node-a": "node-a", "node-b": "node-a"})

    again = launch(
        tiny_args(tmp_path / "ckpt", *_COMMON, steps=12), run_dir=tmp_path / "run",
        env={SNAPSHOTS_ENV: layout.to_json(), RESTORE_ENV: restore_json(restore, layout)},
    )
    (resumed,) = again.events("resumed")
    assert (resumed["step"], resumed.get("source")) == (8, "memory")
    _trained_on_exactly(again, undisturbed)


def test_a_snapshot_persisted_from_the_keepers_is_a_checkpoint_that_resumes_and_exports(
    tmp_path: Path, keepers: dict[str, Keeper], undisturbed: Run,
) -> None:
    """The requeue path: before the allocation ends, the newest whole snapshot is written to the
    checkpoint folder; the next job resumes from it as from any checkpoint, and export reads it."""
    layout = Layout({"node-a": [0], "node-b": [1]}, {node: keeper.where for node, keeper in keepers.items()})
    _crashed_after_two_snapshots(tmp_path, layout)
    restore = newest_restorable(held_by_live(keepers), layout.ranks_of)
    assert restore is not None
    sources = restore.addresses(layout)
    path = persist(restore.step, sources, layout, tmp_path / "ckpt", MODEL, run_dir=tmp_path / "run", job="7", restart=0)
    assert path is not None and ck.read_pointer(tmp_path / "ckpt", MODEL) == "qwen3_tiny-8steps"
    assert integrity.verify(path) == [] and (ck.read_info(path) or {})["step"] == 8
    assert persist(restore.step, sources, layout, tmp_path / "ckpt", MODEL, run_dir=tmp_path / "run", job="7", restart=0) is None

    again = launch(tiny_args(tmp_path / "ckpt", "--no-export", steps=12), run_dir=tmp_path / "run")
    (resumed,) = again.events("resumed")
    assert (resumed["step"], resumed.get("path")) == (8, str(path))
    _trained_on_exactly(again, undisturbed)
    exported = subprocess.run(
        [sys.executable, "-m", "hyperlaunch", "export", "--checkpoint-dir", str(tmp_path / "ckpt"), "--name", MODEL,
         "--step", "8", "-o", str(tmp_path / "hf")], capture_output=True, text=True, check=False, env=train_env(),
    )
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "hf" / "config.json").is_file() and list((tmp_path / "hf").glob("*.safetensors"))
