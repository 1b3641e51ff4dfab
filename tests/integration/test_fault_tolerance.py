"""The promise, end to end on the dev cluster with the real CLI and trainer: a node dies,
the job is preempted, runs out of time or a rank crashes - and training continues from the
last checkpoint, with the same losses as a run that was never interrupted."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.support import fault_entry
from tests.support.devcluster_helpers import DevCluster, importable_tests_env, wait_until
from tests.support.fault_helpers import (
    Job,
    assert_losses_match,
    kill_a_node_of,
    revive,
    submit,
    wait_attempts,
)

pytestmark = pytest.mark.integration

STEPS = 60
EVERY = 10


@pytest.fixture(scope="module")
def reference(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    """Per-step losses of the scenarios' spec, run once without interruption."""
    job = submit(dev_cluster, tmp_path_factory.mktemp("reference"), max_steps=STEPS, checkpoint_every=EVERY)
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    losses = job.losses()
    assert sorted(losses) == list(range(1, STEPS + 1))
    return losses


def test_three_node_failures_in_one_job_end_completed_with_the_same_losses(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    # Slowed steps (the losses do not change) so that "right after a checkpoint" holds while
    # the kill command starts up on a loaded machine.
    job = submit(
        dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3", max_steps=STEPS, checkpoint_every=EVERY
    )
    victims = []
    # Right after a checkpoint: the pointer has just moved to step 10.
    wait_until(lambda: job.pointer_step() == EVERY, 240, "the step-10 checkpoint", interval=0.1)
    victims.append(kill_a_node_of(job))
    latest_at_death = job.pointer_step()  # training cannot go on without the dead rank
    assert latest_at_death is not None and latest_at_death <= 2 * EVERY
    wait_attempts(job, 2)
    revive(dev_cluster, victims[-1])
    # Between checkpoints: steps after the last checkpoint are lost and trained again.
    job.wait_step(2 * EVERY + 3)
    victims.append(kill_a_node_of(job))
    wait_attempts(job, 3)
    revive(dev_cluster, victims[-1])
    job.wait_step(4 * EVERY + 5)
    victims.append(kill_a_node_of(job))
    try:
        final = job.wait_final()
    finally:
        revive(dev_cluster, victims[-1])
    assert final["state"] == "COMPLETED", final
    assert [(r["cause"], r["nodes"]) for r in final["restarts"]] == [("node failure", [v]) for v in victims]
    assert final["last_step"] == STEPS
    # Every attempt resumed from the model's -latest checkpoint. (Its first round's: on this
    # shared, loaded cluster a rank once died from outside after the last requeue, and the
    # supervisor rightly restarted the trainers in the allocation, from step 50.)
    resumed = [e["step"] for e in job.events("resumed") if e.get("round", 0) == 0]
    assert resumed[0] == latest_at_death and len(resumed) == 3 and resumed == sorted(resumed)
    assert_losses_match(job, reference)
    log = dev_cluster.hyperlaunch("logs", job.job_id, cwd=tmp_path).stdout
    # `logs` and `status` name each attempt by Slurm's restart count, which can skip a number
    # (a lost node's requeue counted twice, the script's and Slurm's own).
    banners = [int(n) for n in re.findall(r"^===== attempt (\d+) on ", log, re.MULTILINE)]
    assert banners[0] == 0 and banners == sorted(set(banners)) and len(banners) == 4, banners
    assert [a["restart"] for a in final["attempts"]] == banners, final["attempts"]


def test_restart_limit_fails_the_job_and_resume_exclude_failed_finishes_it(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    # The budget counts attempts without a new checkpoint: a node lost after one (the first
    # kill) uses none of it; two lost in a row before the next checkpoint spend a budget of 1.
    # Slowed steps and checkpoints 30 steps apart, so each later kill lands before one: at 20
    # apart, a loaded machine once let an attempt save before its kill (0 counted, not 1).
    every = 3 * EVERY
    job = submit(
        dev_cluster, tmp_path, "--max-restarts", "1", "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3",
        max_steps=STEPS, checkpoint_every=every,
    )
    job.wait_step(every + 2)
    free = kill_a_node_of(job)
    wait_attempts(job, 2)
    revive(dev_cluster, free)
    assert job.status()["failures_counted"] == 0, "an attempt that saved uses no budget"
    job.wait_step(job.last_step() + 2)
    first = kill_a_node_of(job)
    wait_attempts(job, 3)
    revive(dev_cluster, first)
    assert job.status()["failures_counted"] == 1
    job.wait_step(job.last_step() + 2)
    second = kill_a_node_of(job)
    try:
        final = job.wait_final()
    finally:
        revive(dev_cluster, second)
    assert final["state"] == "FAILED", final
    assert final["failure"]["cause"] == "restart limit"
    assert "2 attempts in a row without a new checkpoint, 1 allowed" in final["failure"]["detail"]
    assert f"node failure ({second})" in final["failure"]["detail"]
    assert job.pointer_step() == every, "no attempt after the first saved"
    # Three nodes failed it; away from them it continues on one node (DCP reshards 2 -> 1).
    resumed = dev_cluster.hyperlaunch(
        "resume", job.job_id, "--exclude-failed", "--nodes", "1", "--json", cwd=tmp_path, extra_env=importable_tests_env()
    )
    assert resumed.returncode == 0, resumed.stderr
    assert free in resumed.stderr and first in resumed.stderr and second in resumed.stderr
    import json

    new = Job(dev_cluster, tmp_path, json.loads(resumed.stdout)["job_id"])
    done = new.wait_final()
    assert done["state"] == "COMPLETED", done
    assert done["last_step"] == STEPS
    assert free not in done["node_list"] and first not in done["node_list"] and second not in done["node_list"]


def test_time_limit_saves_requeues_and_finishes(dev_cluster: DevCluster, tmp_path: Path) -> None:
    # A 2-minute limit with the save signal 45 s before it (Slurm may send it up to 30 s
    # early), steps of at least 0.25 s: 250 steps need more than one attempt. No periodic
    # checkpoints: only the signal saves.
    job = submit(
        dev_cluster, tmp_path, "--time", "2", "--signal-seconds", "45", "--max-restarts", "6",
        "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.25", max_steps=250, checkpoint_every=1000,
    )
    final = job.wait_final(timeout=600)
    assert final["state"] == "COMPLETED", final
    assert final["restarts"] and all(r["cause"] == "time limit" for r in final["restarts"]), final["restarts"]
    saved = [e["step"] for e in job.events("exit") if e.get("requeue")]
    resumed = [e["step"] for e in job.events("resumed")]
    assert saved and resumed[: len(saved)] == saved, (saved, resumed)
    # At most the step in flight is lost: each attempt saved the step it had just finished.
    for event in job.events("signal_received"):
        assert event["step"] in saved


def test_preemption_by_signal_and_by_requeue_continues_with_the_same_losses(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    job = submit(dev_cluster, tmp_path, max_steps=STEPS, checkpoint_every=EVERY)
    job.wait_step(EVERY + 3)
    dev_cluster.run("scancel", "--signal=USR2", job.job_id)  # what a preempting scheduler sends
    wait_attempts(job, 2)
    job.wait_step(job.last_step() + 3)
    dev_cluster.run("scontrol", "requeue", job.job_id)
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    causes = [r["cause"] for r in final["restarts"]]
    assert causes[0] == "preemption" and causes[1] in ("requeued", "preemption"), final["restarts"]
    assert_losses_match(job, reference)


def test_a_crashed_rank_fails_the_step_fast_and_the_job_is_retried(dev_cluster: DevCluster, tmp_path: Path) -> None:
    # No restarts inside the allocation: the crash goes through Slurm's queue (the path a crash
    # takes once those are spent; test_fast_recovery covers the restart inside the allocation).
    started = time.monotonic()
    job = submit(
        dev_cluster, tmp_path, "--restarts-in-allocation", "0",
        "--env", "HYPERLAUNCH_TEST_CRASH_AT_STEP=8", "--env", "HYPERLAUNCH_TEST_CRASH_RANK=1",
        max_steps=20, checkpoint_every=5,
    )
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    (restart,) = final["restarts"]
    assert restart["cause"] == "crash"
    assert restart["detail"].startswith("exit ") and "injected failure at step 8 on rank 1" in restart["detail"]
    first = final["attempts"][0]
    assert first["elapsed_s"] < 120, "the step hung instead of failing"
    assert [e["step"] for e in job.events("resumed")] == [5]
    assert time.monotonic() - started < 400


def test_the_same_error_at_the_same_step_twice_ends_the_job_with_that_line(dev_cluster: DevCluster, tmp_path: Path) -> None:
    """A bad batch or a bug: the requeued attempt fails at the step the first one did, with the
    same error. Before, the job was requeued until --max-restarts was spent (6 attempts here)."""
    job = submit(
        dev_cluster, tmp_path, "--restarts-in-allocation", "0", "--max-restarts", "5",
        "--env", "HYPERLAUNCH_TEST_RAISE_AT_STEP=8", max_steps=20, checkpoint_every=5,
    )
    final = job.wait_final()
    assert final["state"] == "FAILED", final
    assert len(final["attempts"]) == 2, final["attempts"]
    failure = final["failure"]
    assert (failure["cause"], failure["kind"]) == ("trainer error", "unexpected"), failure
    assert failure["detail"] == "ValueError: a bad batch at step 8 (rank 1); the same error at step 8 in the round before, so not retried"
    shown = dev_cluster.hyperlaunch("status", job.job_id, cwd=job.workdir)
    assert shown.returncode == 0 and "ValueError: a bad batch at step 8 (rank 1)" in shown.stdout, shown.stdout + shown.stderr
    assert "not restarted again" in job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()


# HyperPod's auto-resume, as far as a plain Slurm cluster allows: srun accepts
# --auto-resume=1 and, when the step fails, runs the same, already expanded srun line again
# in the same allocation (HyperPod would first swap the faulty node for a new one).
FAKE_HYPERPOD_SRUN = """#!/bin/bash
args=()
auto=0
for arg in "$@"; do
  if [ "$arg" = --auto-resume=1 ]; then auto=1; else args+=("$arg"); fi
done
{real} "${{args[@]}}"
status=$?
if [ "$auto" = 1 ] && [ "$status" -ne 0 ]; then
  echo "### fake-hyperpod: step failed ($status); re-running the same srun line" >&2
  {real} "${{args[@]}}"
  status=$?
fi
exit "$status"
"""


def test_hyperpod_rerun_of_the_same_step_rendezvouses_and_resumes(dev_cluster: DevCluster, tmp_path: Path) -> None:
    import shutil

    from hyperlaunch.devcluster import procs

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "srun"
    wrapper.write_text(FAKE_HYPERPOD_SRUN.format(real=shutil.which("srun")))
    wrapper.chmod(0o755)
    job = submit(
        dev_cluster, tmp_path / "work", "--hyperpod", max_steps=30, checkpoint_every=5,
        submit_env={"PATH": f"{bin_dir}:{dev_cluster.env['PATH']}"},
    )
    assert "--auto-resume=1" in dev_cluster.hyperlaunch("render", "--model", "qwen3_tiny", "--hyperpod").stdout
    wait_until(lambda: (job.pointer_step() or 0) >= 10, 240, "the step-10 checkpoint", interval=0.2)
    # A rank dies on a healthy node: kill the training processes (not torchrun) of one node.
    node = job.running_nodes()[-1]
    trainers = [
        pid for pid in procs.node_process_ids(dev_cluster.root, node)
        if fault_entry.MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        and b"torch.distributed.run" not in Path(f"/proc/{pid}/cmdline").read_bytes()
        and b"torchrun" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert trainers
    saved = job.pointer_step()
    procs.kill_pids(trainers)
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    assert final["restarts"] == [] and len(final["attempts"]) == 1, "the step was re-run inside the same attempt"
    err = job.workdir.joinpath("logs", f"qwen3_tiny_{job.job_id}.err").read_text()
    assert err.count("fake-hyperpod: step failed") == 1
    resumed = job.events("resumed")
    assert len(resumed) == 1 and resumed[0]["step"] >= (saved or 0) and resumed[0]["restart"] == 0
    assert final["last_step"] == 30


def test_a_torn_checkpoint_is_set_aside_and_the_training_goes_on_from_the_one_before(
    dev_cluster: DevCluster, tmp_path: Path, reference: dict[int, float]
) -> None:
    """Checkpoint 30 loses half a shard (its manifest finds it before the round loads it), then
    checkpoint 50 has a shard zeroed at its size with no manifest (only loading finds it): each
    is set aside, kept on disk, the pointer moves to the one before, and the job completes with
    the reference's losses. A checkpoint another model cannot load is not set aside."""
    job = submit(dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_TEAR_AFTER_CHECKPOINT=30,50:silent", max_steps=STEPS, checkpoint_every=EVERY)
    final = job.wait_final()
    assert final["state"] == "COMPLETED", final
    assert [r["cause"] for r in final["restarts_in_allocation"]] == ["crash", "crash", "torn checkpoint"]
    assert final["restart_budget_left"] == final["max_restarts"], "no budget spent"
    torn = [a["name"] for a in final["set_aside"]]
    assert torn == ["qwen3_tiny-30steps.bad", "qwen3_tiny-50steps.bad"]
    assert all((job.ckpt_dir / name / "__0_0.distcp").is_file() for name in torn), "set aside, not deleted"
    assert [e["step"] for e in job.events("resumed")] == [20, 40]
    assert_losses_match(job, reference)
    text = dev_cluster.hyperlaunch("status", job.job_id, cwd=tmp_path).stdout
    assert "set aside:  qwen3_tiny-30steps.bad: checkpoint qwen3_tiny-30steps is torn: qwen3_tiny-30steps/__0_0.distcp is" in text
    assert "torn checkpoint" in text
    verified = dev_cluster.hyperlaunch("checkpoints", "--checkpoint-dir", str(job.ckpt_dir), "--verify", cwd=tmp_path)
    assert verified.returncode == 0 and "torn" not in verified.stdout, verified.stdout + verified.stderr

    # Another model's trainer told to load these checkpoints: the job's fault, nothing set aside.
    other = dev_cluster.hyperlaunch(
        "submit", "--model", "llama_tiny", "--nodes", "2", "--exclusive", "--max-steps", "70", "--json",
        "--checkpoint-dir", str(job.ckpt_dir), "--run-dir", str(tmp_path / "other"), "--", "--model-name", "qwen3_tiny",
        cwd=tmp_path,
    )
    assert other.returncode == 0, other.stderr
    other_id = json.loads(other.stdout)["job_id"]
    wait_until(lambda: _state(dev_cluster, tmp_path, other_id) in ("FAILED", "COMPLETED", "CANCELLED"), 200, f"job {other_id} to end")
    status = json.loads(dev_cluster.hyperlaunch("status", other_id, "--json", cwd=tmp_path).stdout)
    assert status["state"] == "FAILED" and "another architecture" in json.dumps(status["failure"]), status
    assert sorted(p.name for p in job.ckpt_dir.glob("*.bad*")) == torn


def _state(cluster: DevCluster, cwd: Path, job_id: str) -> str:
    result = cluster.hyperlaunch("status", job_id, "--json", cwd=cwd)
    return json.loads(result.stdout)["state"] if result.returncode == 0 else ""
