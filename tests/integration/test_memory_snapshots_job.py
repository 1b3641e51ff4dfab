"""Memory snapshots in a real job (issue 48): the supervisor runs a keeper on each node, the
trainers snapshot into them every few steps, and after a crashed rank, or a node lost with a
spare to take its place, the next round inside the allocation restores the newest snapshot
from the keepers (a lost node's parts from its peer's replica), not the older disk checkpoint:
no more steps trained twice than the snapshot interval, the losses of an undisturbed run."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core.decision_records import read_decisions
from hyperlaunch.devcluster import procs
from tests.support.devcluster_helpers import DevCluster, wait_until
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
SNAPSHOTS = ("--memory-checkpoint-every", str(MEMORY_EVERY))


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


@pytest.mark.parametrize(
    ("cause", "fault", "watchdog"),
    [("crash", "HYPERLAUNCH_TEST_CRASH_AT_STEP=14", []), ("hang", "HYPERLAUNCH_TEST_HANG_AT_STEP=14", ["--hang-timeout", "5", "--hang-floor", "8"])],
)
def test_a_crashed_or_hung_rank_restarts_from_the_memory_snapshot(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float], cause: str, fault: str, watchdog: list[str],
) -> None:
    # A step of 0.3 s, as a real one is long, so the snapshot of step 12 is whole (it is taken
    # while step 13 trains) before the fault: a fault while the newest one is still on its way
    # falls back to the one before it.
    job = submit(
        dev_cluster, tmp_path, *SNAPSHOTS, "--env", fault, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3",
        max_steps=STEPS, checkpoint_every=DISK_EVERY, extra=watchdog,
    )
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    assert [r["cause"] for r in final["restarts_in_allocation"]] == [cause], final
    assert _from_memory(job) == [12], job.metrics("event")
    assert _trained_twice(job) <= MEMORY_EVERY, "at most the snapshot interval, not every step since the disk checkpoint"
    assert_losses_match(job, reference)
    (restart,) = [d for d in read_decisions(job.run_dir, job.job_id) if d.event == "restart"]
    assert restart.cause == cause
    status = dev_cluster.hyperlaunch("status", job.job_id, cwd=tmp_path)
    assert "  trainer resumed from step(s): 12 (memory snapshot)" in status.stdout, status.stdout


def test_a_lost_node_is_restored_on_a_spare_from_its_peers_replica(dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]) -> None:
    job = submit(
        dev_cluster, tmp_path, *SNAPSHOTS, "--spare-nodes", "1", "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3",
        max_steps=STEPS, checkpoint_every=DISK_EVERY,
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
    job = submit(dev_cluster, tmp_path, *SNAPSHOTS, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3", max_steps=STEPS, checkpoint_every=DISK_EVERY)
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


def _kill_keeper(job: Job, node: str) -> None:
    """SIGKILL the keeper on `node`, its trainers left running."""
    keepers = [
        pid for pid in procs.node_process_ids(job.cluster.root, node)
        if b"hyperlaunch.supervisor.keeper" in _cmdline(pid)
    ]
    assert keepers, f"no keeper on {node}"
    procs.kill_pids(keepers)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_keeper_killed_on_a_healthy_node_leaves_training_on_and_the_next_failure_on_disk(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float],
) -> None:
    """Without its node's keeper a snapshot is never whole again: the trainers say so once and
    train on, and the crash after it restarts from the disk checkpoint, never from a snapshot
    missing that node's parts or mixing steps."""
    job = submit(
        dev_cluster, tmp_path, *SNAPSHOTS, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3", "--env", "HYPERLAUNCH_TEST_CRASH_AT_STEP=17",
        max_steps=STEPS, checkpoint_every=10,
    )
    job.wait_step(4)
    nodes: list[str] = []
    wait_until(lambda: bool(nodes.extend(job.running_nodes()) or nodes), 60, "the job to run")
    _kill_keeper(job, nodes[0])  # rank 0's node, whose metrics tell
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    assert [r["cause"] for r in final["restarts_in_allocation"]] == ["crash"], final
    assert job.events("memory_snapshot_failed"), job.metrics("event")
    resumed = job.events("resumed")
    assert [(e.get("source"), e["step"]) for e in resumed] == [(None, 10)], resumed
    assert resumed[0]["path"].endswith("qwen3_tiny-10steps")
    err = job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()
    assert f"keeper on {nodes[0]} did not answer" in err
    assert_losses_match(job, reference)


def test_a_node_and_its_peer_lost_together_fall_back_to_the_disk_checkpoint(dev_cluster: DevCluster, tmp_path: Path) -> None:
    """Three nodes in a ring, each holding the next one's replica: the second and the third
    lost at once take the second's parts with them. No snapshot is written before the requeue
    and the job resumes from its disk checkpoint, with the losses of an undisturbed run."""
    three = ("--nodes", "3")
    baseline = submit(dev_cluster, tmp_path / "reference", *three, max_steps=STEPS, checkpoint_every=10)
    job = submit(dev_cluster, tmp_path / "job", *three, *SNAPSHOTS, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3", max_steps=STEPS, checkpoint_every=10)
    job.wait_step(14)
    nodes: list[str] = []
    wait_until(lambda: bool(nodes.extend(job.running_nodes()) or nodes), 60, "the job to run")
    assert len(nodes) == 3, nodes
    victims = nodes[1:]
    for victim in victims:
        kill_node(dev_cluster, victim)
    try:
        final = job.wait_final()
    finally:
        for victim in victims:
            revive(dev_cluster, victim)
    assert final["state"] == "COMPLETED", final
    assert [r["cause"] for r in final["restarts"]] == ["node failure"], final
    resumed = job.events("resumed")
    assert [(e.get("source"), e["step"]) for e in resumed] == [(None, 10)], resumed
    err = job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()
    assert "wrote the memory snapshot" not in err
    assert baseline.wait_final()["state"] == "COMPLETED"
    assert_losses_match(job, baseline.losses())
