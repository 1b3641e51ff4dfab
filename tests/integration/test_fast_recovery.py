"""Recovery that does not wait for Slurm: a node that dies is found by the batch script within
seconds and left (requeue away from it, or a spare node inside the same allocation), a rank
that crashes on a healthy node restarts the trainers in the allocation, and nodes that are
merely slow or briefly stopped are never taken for dead."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

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

STEPS = 40
EVERY = 5
SLOW = ("--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3")


@pytest.fixture(scope="module")
def reference(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    job = submit(dev_cluster, tmp_path_factory.mktemp("reference"), max_steps=STEPS, checkpoint_every=EVERY)
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    return job.losses()


def _out(job: Job) -> str:
    return job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.out").read_text()


def test_a_killed_node_is_left_at_once_and_the_job_resumes_with_the_same_losses(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    job = submit(dev_cluster, tmp_path, *SLOW, max_steps=STEPS, checkpoint_every=EVERY)
    job.wait_step(2 * EVERY + 2)
    victim = kill_a_node_of(job)
    try:
        # Slurm marks a dead node down after SlurmdTimeout (10 s here) and about 18 s more;
        # the script requeues the job itself well before.
        wait_until(lambda: len(job.status()["attempts"]) >= 2, 60, "the requeue")
        # sacct's record still reads REQUEUED (closed at the requeue) while this run goes on.
        wait_until(lambda: job.status()["attempts"][-1]["state"] == "RUNNING", 60, "the second attempt to show RUNNING", interval=0.5)
        final = job.wait_final()
    finally:
        revive(dev_cluster, victim)
    assert final["state"] == "COMPLETED", final
    (restart,) = final["restarts"]
    assert (restart["cause"], restart["nodes"]) == ("node failure", [victim])
    assert victim not in final["attempts"][1]["node_list"].replace("[", ",").replace("]", ",")
    assert "action=requeue" in _out(job) and "action=slurm-requeue" not in _out(job)
    assert "stopped answering" in job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()
    assert_losses_match(job, reference)


def _the_one_restart_inside_the_allocation(final: dict[str, Any]) -> dict[str, Any]:
    """The job completed in one Slurm attempt, with no trip through the queue: its one restart
    inside the allocation."""
    assert final["state"] == "COMPLETED", final
    assert final["restarts"] == [] and len(final["attempts"]) == 1, "no trip through the queue"
    (inside,) = final["restarts_in_allocation"]
    return inside


def test_with_a_spare_node_the_job_continues_inside_its_allocation(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    job = submit(dev_cluster, tmp_path, "--spare-nodes", "1", *SLOW, max_steps=STEPS, checkpoint_every=EVERY)
    job.wait_step(2 * EVERY + 2)
    nodes = nodes_with_a_spare(job)
    victim = nodes[1]
    kill_node(dev_cluster, victim)
    try:
        final = job.wait_final()
    finally:
        revive(dev_cluster, victim)
    inside = _the_one_restart_inside_the_allocation(final)
    assert (inside["cause"], inside["nodes"], inside["round"]) == ("node failure", [victim], 1)
    assert inside["detail"] == f"{victim} -> spare {nodes[2]}"
    resumed = job.events("resumed")
    assert [e.get("round") for e in resumed] == [1]
    assert_losses_match(job, reference)


# Alone: on a machine busy with the other tests, three runs in seven left the mark unwritten (the
# job recovered through Slurm's own detection instead); its timings need the machine to itself.
@pytest.mark.solo
def test_a_lost_batch_host_is_marked_down_by_the_node_after_it(dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]) -> None:
    """The batch host runs the supervisor and dies with it: the first node after it in the round
    finds it gone once the trainers fail and marks it down (the tests run as root, a Slurm
    admin), so Slurm requeues the job at once. Before, nothing did until Slurm found the node
    dead: about 50 s to the next step on this machine. With a spare, as the issue's run."""
    job = submit(dev_cluster, tmp_path, "--spare-nodes", "1", *SLOW, max_steps=STEPS, checkpoint_every=EVERY)
    job.wait_step(EVERY + 2)
    batch_host = dev_cluster.job_field(job.job_id, "%B")
    # Not drained first (kill_node): the job keeps its batch host until Slurm marks it down, so no
    # other test's job gets it before.
    killed = dev_cluster.cli("dev-cluster", "kill-node", batch_host)
    assert killed.returncode == 0, killed.stderr
    try:
        final = job.wait_final()
    finally:
        revive(dev_cluster, batch_host)
    assert final["state"] == "COMPLETED", final
    (restart,) = final["restarts"]
    assert (restart["cause"], restart["nodes"]) == ("node failure", [batch_host])
    out = _out(job)
    err = job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()
    said = [line for line in (out + err).splitlines() if "batch host" in line or line.startswith("###")]
    assert f"cause=node-failure nodes={batch_host} by=" in out and "action=requeue" in out, said
    assert f"the batch host {batch_host} stopped answering (its supervisor is gone): marked it down" in out
    assert_losses_match(job, reference)


def test_an_idle_spare_that_dies_is_given_back_and_the_job_is_not_requeued(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    """Before, the supervisor never probed its spares: Slurm marked the dead spare down after
    SlurmdTimeout and requeued the whole job (its training since the last checkpoint lost)."""
    job = submit(dev_cluster, tmp_path, "--spare-nodes", "1", *SLOW, max_steps=STEPS, checkpoint_every=EVERY)
    job.wait_step(EVERY + 2)
    spare = nodes_with_a_spare(job)[2]
    kill_node(dev_cluster, spare)
    try:
        err = job.workdir / "logs" / f"qwen3_tiny_{job.job_id}.err"
        wait_until(lambda: f"spare node(s) {spare} stopped answering while idle: given back" in err.read_text(), 30, "the spare given back")
        final = job.wait_final()
    finally:
        revive(dev_cluster, spare)
    assert final["state"] == "COMPLETED", final
    assert final["restarts"] == [] and final["restarts_in_allocation"] == [] and len(final["attempts"]) == 1
    assert job.events("resumed") == [], "the training never stopped"
    assert_losses_match(job, reference)


def test_a_crashed_rank_on_a_healthy_node_restarts_inside_the_allocation_and_no_node_is_excluded(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    job = submit(
        dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_CRASH_AT_STEP=8", "--env", "HYPERLAUNCH_TEST_CRASH_RANK=1",
        max_steps=STEPS, checkpoint_every=EVERY,
    )
    inside = _the_one_restart_inside_the_allocation(job.wait_final())
    assert inside["cause"] == "crash" and inside["nodes"] == [] and "injected failure at step 8 on rank 1" in inside["detail"]
    assert "stopped answering" not in job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()
    excluded = dev_cluster.run("scontrol", "show", "job", job.job_id)
    assert "ExcNodeList=(null)" in excluded
    assert [e["step"] for e in job.events("resumed")] == [5]
    assert_losses_match(job, reference)


def test_a_node_drained_under_a_failed_step_is_left_and_the_job_completes(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    # Slurm requeues a job by itself only when one of its nodes goes DOWN: never for a drained
    # node (a health check's verdict), nor for a dead one that answers again first. The script
    # used to leave both to Slurm, and the job ended FAILED. The trainers wait before step 1
    # while `pause` exists, so the node is drained before rank 1 crashes at step 8.
    pause = tmp_path / "pause"
    pause.touch()
    job = submit(
        dev_cluster, tmp_path, "--env", f"HYPERLAUNCH_TEST_PAUSE_FILE={pause}",
        "--env", "HYPERLAUNCH_TEST_CRASH_AT_STEP=8", "--env", "HYPERLAUNCH_TEST_CRASH_RANK=1",
        max_steps=STEPS, checkpoint_every=EVERY,
    )
    nodes: list[str] = []
    wait_until(lambda: bool(nodes.extend(job.running_nodes()) or nodes), 120, "the job to run")
    drained = nodes[1]
    dev_cluster.run("scontrol", "update", f"NodeName={drained}", "State=DRAIN", "Reason=hyperlaunch-test")
    try:
        pause.unlink()
        final = job.wait_final()
    finally:
        dev_cluster.run("scontrol", "update", f"NodeName={drained}", "State=RESUME")
    assert final["state"] == "COMPLETED", final
    (restart,) = final["restarts"]
    assert (restart["cause"], restart["nodes"]) == ("node failure", [drained]), restart
    assert drained not in final["attempts"][1]["node_list"].replace("[", ",").replace("]", ",")
    assert f"cause=node-failure nodes={drained} failures=0 round=0 action=requeue" in _out(job)
    assert [e["step"] for e in job.events("resumed")] == [5]
    assert_losses_match(job, reference)


def test_a_node_stopped_for_a_few_seconds_is_not_taken_for_dead(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    job = submit(dev_cluster, tmp_path, *SLOW, max_steps=STEPS, checkpoint_every=EVERY)
    job.wait_step(EVERY + 2)
    node = job.running_nodes()[-1]
    stopped = procs.node_process_ids(dev_cluster.root, node)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(6)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    assert final["restarts"] == [] and final["restarts_in_allocation"] == [] and len(final["attempts"]) == 1
    assert_losses_match(job, reference)


def test_a_hung_rank_is_noticed_its_stacks_logged_and_the_trainers_restarted(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    job = submit(
        dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_HANG_AT_STEP=8", "--env", "HYPERLAUNCH_TEST_HANG_RANK=1",
        max_steps=STEPS, checkpoint_every=EVERY, extra=["--hang-timeout", "5", "--hang-floor", "8"],
    )
    inside = _the_one_restart_inside_the_allocation(job.wait_final())
    assert inside["cause"] == "hang" and "after step 7" in inside["detail"], inside
    err = job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()
    for rank in (0, 1):
        assert f"hang watchdog: rank {rank}" in err
    assert "before_step" in err, "the hung rank's stack shows where it stopped"
    assert [e.get("step") for e in job.events("hang")] == [7], "rank 0 records the hang once, at the step it stopped after"
    assert [e["step"] for e in job.events("resumed")] == [5]
    assert_losses_match(job, reference)
