"""Memory snapshots in a real job (issue 48): the supervisor runs a keeper on each node, the
trainers snapshot into them every few steps, and after a crashed rank, or a node lost with a
spare to take its place, the next round inside the allocation restores the newest snapshot
from the keepers (a lost node's parts from its peer's replica), not the older disk checkpoint:
no more steps trained twice than the snapshot interval, the losses of an undisturbed run."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core.decision_records import read_decisions
from tests.support.devcluster_helpers import DevCluster
from tests.support.fault_helpers import (
    Job,
    assert_losses_match,
    kill_a_node_of,
    kill_node,
    nodes_with_a_spare,
    revive,
    submit,
)

pytestmark = pytest.mark.integration

STEPS = 30
DISK_EVERY = 25
MEMORY_EVERY = 3
SNAPSHOTS = ["--memory-checkpoint-every", str(MEMORY_EVERY)]


@pytest.fixture(scope="module")
def reference(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    job = submit(dev_cluster, tmp_path_factory.mktemp("reference"), max_steps=STEPS, checkpoint_every=DISK_EVERY)
    assert job.wait_final()["state"] == "COMPLETED"
    return job.losses()


def _from_memory(job: Job) -> list[int]:
    return [e["step"] for e in job.metrics("event") if e["event"] == "resumed" and e.get("source") == "memory"]


def _trained_twice(job: Job) -> int:
    steps = [r["step"] for r in job.metrics("step")]
    return len(steps) - len(set(steps))


def test_a_crashed_rank_restarts_from_the_memory_snapshot(dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]) -> None:
    job = submit(
        dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_CRASH_AT_STEP=14", max_steps=STEPS, checkpoint_every=DISK_EVERY, extra=SNAPSHOTS,
    )
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    assert [r["cause"] for r in final["restarts_in_allocation"]] == ["crash"], final
    assert _from_memory(job) == [12], job.metrics("event")
    assert _trained_twice(job) <= MEMORY_EVERY, "at most the snapshot interval, not every step since the disk checkpoint"
    assert_losses_match(job, reference)
    (restart,) = [d for d in read_decisions(job.run_dir, job.job_id) if d.event == "restart"]
    assert restart.cause == "crash"
    status = dev_cluster.hyperlaunch("status", job.job_id, cwd=tmp_path)
    assert "  trainer resumed from step(s): 12 (memory snapshot)" in status.stdout, status.stdout


def test_a_lost_node_is_restored_on_a_spare_from_its_peers_replica(dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]) -> None:
    job = submit(
        dev_cluster, tmp_path, "--spare-nodes", "1", "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3",
        max_steps=STEPS, checkpoint_every=DISK_EVERY, extra=SNAPSHOTS,
    )
    job.wait_step(10)
    nodes = nodes_with_a_spare(job)
    victim = nodes[1]
    kill_node(dev_cluster, victim)
    try:
        final = job.wait_final()
    finally:
        revive(dev_cluster, victim)
    assert final["state"] == "COMPLETED", final
    assert [(r["cause"], r["nodes"]) for r in final["restarts_in_allocation"]] == [("node failure", [victim])], final
    assert len(_from_memory(job)) == 1 and _from_memory(job)[0] >= 9, job.metrics("event")
    assert _trained_twice(job) <= MEMORY_EVERY + 1
    assert_losses_match(job, reference)


def test_without_a_spare_the_snapshot_is_written_to_disk_before_the_requeue(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float],
) -> None:
    """The keepers end with the allocation: the newest whole snapshot (the lost node's parts from
    its peer) becomes an ordinary checkpoint first, and the requeued job resumes from it."""
    job = submit(dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3", max_steps=STEPS, checkpoint_every=DISK_EVERY, extra=SNAPSHOTS)
    job.wait_step(10)
    victim = kill_a_node_of(job)
    try:
        final = job.wait_final()
    finally:
        revive(dev_cluster, victim)
    assert final["state"] == "COMPLETED", final
    assert [(r["cause"], r["nodes"]) for r in final["restarts"]] == [("node failure", [victim])], final
    resumed = [e for e in job.metrics("event") if e["event"] == "resumed"]
    assert len(resumed) == 1 and resumed[0]["step"] >= 9 and resumed[0]["step"] % MEMORY_EVERY == 0, resumed
    assert resumed[0]["path"].endswith(f"qwen3_tiny-{resumed[0]['step']}steps")
    err = job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()
    assert f"wrote the memory snapshot of step {resumed[0]['step']} to" in err
    assert _trained_twice(job) <= MEMORY_EVERY + 1
    assert_losses_match(job, reference)
