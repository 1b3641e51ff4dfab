"""At submit, a job's memory snapshots against its nodes' host memory: each node holds two whole
snapshots of its share of the state and two of its peer's, its ranks' copy buffers and the one
being taken; submit says how much, and refuses in one line where that is more than half an
instance's memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.instances import get_instance
from hyperlaunch.core.models import get_preset
from hyperlaunch.job import memory_room
from hyperlaunch.job.plan import plan_job, snapshot_memory_note
from hyperlaunch.job.spec import JobSpec
from tests.support.cli_runner import one_error_line, run_cli

GIB = 1 << 30
QWEN = get_preset("qwen3_0_6b")
STATE = 12 * QWEN.num_params


def _spec(tmp_path: Path, **flags: object) -> JobSpec:
    given = {"model": "qwen3_0_6b", "nodes": 2, "memory_checkpoint_every": 10, **flags}
    return plan_job(given, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml").spec


def test_a_node_holds_its_share_and_its_peers_twice_its_copy_and_the_snapshot_being_taken(tmp_path: Path) -> None:
    assert memory_room.per_node(_spec(tmp_path, nodes=2), QWEN) == -(-STATE // 2) * 6
    assert memory_room.per_node(_spec(tmp_path, nodes=4), QWEN) == -(-STATE // 4) * 6
    assert memory_room.per_node(_spec(tmp_path, nodes=1), QWEN) == STATE * 4, "alone: no peer's to hold"


def test_submit_says_what_the_snapshots_take_of_each_node(tmp_path: Path) -> None:
    note = snapshot_memory_note(_spec(tmp_path, instance_type="p5.48xlarge"))
    assert note == "memory snapshots: up to 20.0 GiB of host memory on each node, of 2.0 TiB"
    assert "does not say how much it has" in (snapshot_memory_note(_spec(tmp_path)) or "")
    assert snapshot_memory_note(_spec(tmp_path, memory_checkpoint_every=0)) is None


def test_snapshots_past_half_an_instances_memory_are_refused_naming_the_nodes_that_fit(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"up to 26\.6 GiB .* each of 1 node\(s\), more than the 8\.0 GiB they may use of g5\.xlarge's 16\.0 GiB; use at least 5 nodes"):
        _spec(tmp_path, nodes=1, instance_type="g5.xlarge")
    five = _spec(tmp_path, nodes=5, instance_type="g5.xlarge")
    assert memory_room.per_node(five, QWEN) <= get_instance("g5.xlarge").host_memory_gib * GIB / 2  # type: ignore[operator]


def test_the_refusal_is_one_line_and_nothing_is_rendered(monkeypatch: pytest.MonkeyPatch, _isolated_home: Path) -> None:
    result = run_cli(["render", "--model", "qwen3_0_6b", "--nodes", "1", "--instance-type", "g5.xlarge", "--memory-checkpoint-every", "5"], monkeypatch)
    one_error_line(result, 2, "--memory-checkpoint-every", "use at least 5 nodes")


def test_each_size_says_its_own_host_memory_and_a_family_one_for_all() -> None:
    assert [get_instance(name).host_memory_gib for name in ("g5.xlarge", "g5.48xlarge", "g6e.48xlarge", "p5.48xlarge", "p4d.24xlarge")] == [
        16, 768, 1536, 2048, 1152,
    ]
    assert get_instance("cpu").host_memory_gib is None
