"""The attempt's nodes (hyperlaunch.supervisor.allocation), with Slurm's answers faked: the
round's nodes and the spares, HyperPod's auto-resume where its folder exists, a spare in a lost
node's place, and what a requeue leaves behind. The whole course against real processes is
tests/unit/script/test_render.py's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.supervisor import slurm_calls
from hyperlaunch.supervisor.allocation import Allocation


class FakeSlurm:
    """What the allocation asks Slurm, answered from fields, and what it asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, nodes: Sequence[str]) -> None:
        self.nodes = list(nodes)
        self.shrink_ok = True
        self.excluded: list[str] = []
        self.partition = 10
        self.calls: list[tuple[str, ...]] = []
        monkeypatch.setattr(slurm_calls, "hostnames", lambda nodelist: list(self.nodes))
        monkeypatch.setattr(slurm_calls, "shrink_to", self._shrink_to)
        monkeypatch.setattr(slurm_calls, "excluded_nodes", lambda job: list(self.excluded))
        monkeypatch.setattr(slurm_calls, "partition_size", lambda partition: self.partition)
        monkeypatch.setattr(slurm_calls, "exclude_nodes", self._exclude_nodes)

    def _shrink_to(self, job: str, nodes: list[str]) -> bool:
        self.calls.append(("shrink", job, *nodes))
        return self.shrink_ok

    def _exclude_nodes(self, job: str, nodes: list[str]) -> bool:
        self.calls.append(("exclude", job, *nodes))
        return True


def _allocation(spare_nodes: int = 0, hyperpod: str = "off", hyperpod_dir: str = "", exclude: tuple[str, ...] = ()) -> Allocation:
    value = SupervisorOptions(
        run_dir="/r", checkpoint_dir="/c", checkpoint_lock="/c/lock", max_restarts=3, launch_command=("t",),
        spare_nodes=spare_nodes, exclude=exclude, hyperpod=hyperpod, hyperpod_dir=hyperpod_dir, srun_flags=("--label",),
    )
    return Allocation(value, {"SLURM_JOB_NODELIST": "n[1-4]", "SLURM_JOB_PARTITION": "p"}, "12")


def test_the_last_nodes_wait_as_spares_and_the_others_train(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeSlurm(monkeypatch, ["n1", "n2", "n3", "n4"])
    allocation = _allocation(spare_nodes=1)
    allocation.take()
    assert (allocation.round_nodes, allocation.spares, allocation.nodes_needed) == (["n1", "n2", "n3"], ["n4"], 3)
    assert allocation.fast_node_check and allocation.srun_flags == ["--label"]


@pytest.mark.parametrize(("mode", "folder_exists", "auto_resume", "probes"), [
    ("off", True, False, True),
    ("on", False, False, False),  # srun's --auto-resume=1 is in the rendered flags already
    ("auto", True, True, False),
    ("auto", False, False, True),
])
def test_hyperpod_replaces_lost_nodes_itself_where_it_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, folder_exists: bool, auto_resume: bool, probes: bool,
) -> None:
    FakeSlurm(monkeypatch, ["n1", "n2"])
    folder = tmp_path / "sagemaker"
    if folder_exists:
        folder.mkdir()
    allocation = _allocation(hyperpod=mode, hyperpod_dir=str(folder))
    allocation.take()
    assert ("--auto-resume=1" in allocation.srun_flags, allocation.fast_node_check) == (auto_resume, probes)


def test_an_unknown_node_list_is_never_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeSlurm(monkeypatch, [])
    allocation = _allocation()
    allocation.take()
    assert not allocation.fast_node_check and allocation.round_nodes == []


def test_a_spare_takes_the_lost_nodes_place_once_slurm_has_it_back(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm = FakeSlurm(monkeypatch, ["n1", "n2", "n3", "n4"])
    allocation = _allocation(spare_nodes=1)
    allocation.take()
    assert allocation.replace(["n2"]) == ("n4",)
    assert (allocation.round_nodes, allocation.spares, allocation.nodes) == (["n1", "n4", "n3"], [], ["n1", "n3", "n4"])
    assert slurm.calls == [("shrink", "12", "n1", "n3", "n4")]
    assert allocation.replace(["n3"]) is None, "no spare left"


def test_no_spare_comes_in_where_slurm_keeps_the_lost_node_or_too_few_are_left(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    slurm = FakeSlurm(monkeypatch, ["n1", "n2", "n3", "n4"])
    slurm.shrink_ok = False
    allocation = _allocation(spare_nodes=1)
    allocation.take()
    assert allocation.replace(["n2"]) is None and allocation.round_nodes == ["n1", "n2", "n3"]
    slurm.shrink_ok = True
    allocation = _allocation(spare_nodes=1)
    allocation.take()
    assert allocation.replace(["n1", "n2"]) is None
    assert allocation.spares == [] and allocation.round_nodes == ["n1", "n2", "n3"]
    assert "hyperlaunch: 1 node(s) short after losing n1,n2: no spare left" in capfd.readouterr().err


def test_a_requeue_gives_the_lost_nodes_back_and_keeps_them_away_within_the_partitions_room(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:
    slurm = FakeSlurm(monkeypatch, ["n1", "n2"])
    slurm.excluded, slurm.partition = ["old1", "n9"], 4
    allocation = _allocation(exclude=("n9",))
    allocation.take()
    assert allocation.leave([]) == [] and slurm.calls == []
    excluded = allocation.leave(["n2"])
    assert excluded == ["n9", "n2"], "the user's --exclude stays, the oldest of the others goes"
    assert "no longer excluding old1" in capfd.readouterr().err
    allocation.keep_away(["n2"], excluded)
    assert slurm.calls == [("shrink", "12", "n1"), ("exclude", "12", "n9", "n2")]


def test_a_requeue_gives_back_every_node_gone_by_then_not_only_the_one_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two nodes killed half a second apart: the step ended on the first, the second is gone
    too by the requeue. Kept in the shrunk job, Slurm would hold the requeued job for good."""
    FakeSlurm(monkeypatch, ["n1", "n2", "n3", "n4"])
    allocation = _allocation()
    allocation.take()
    probed: list[list[str]] = []

    def gone(nodes: Sequence[str]) -> list[str]:
        probed.append(list(nodes))
        return [node for node in nodes if node == "n3"]

    assert allocation.all_gone(["n2"], gone) == ["n2", "n3"]
    assert probed == [["n1", "n3", "n4"]]
    assert allocation.all_gone([], gone) == [] and len(probed) == 1, "no lost node: nothing probed"
    monkeypatch.setattr(allocation, "fast_node_check", False)
    assert allocation.all_gone(["n2"], gone) == ["n2"] and len(probed) == 1, "HyperPod replaces nodes itself"
