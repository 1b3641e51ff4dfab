"""The trainers people already have, submitted unchanged with --script on the dev cluster and a
node killed: they write where they always do (relative to their working folder, now the run's),
hyperlaunch finds their own checkpoints, counts them as progress and hands the newest to the next
start. Real libraries on CPU: transformers' Trainer (with accelerate)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.integration.test_script_jobs import ROOT, ScriptJob, _submit, _wait_two_attempts
from tests.support.devcluster_helpers import DevCluster, wait_until
from tests.support.fault_helpers import kill_a_node_of, revive

pytestmark = pytest.mark.integration

STEPS = 100
EVERY = 10


def _project(workdir: Path, example: str) -> Path:
    project = workdir / "project"
    project.mkdir(parents=True)
    shutil.copy(ROOT / "examples" / example, project / example)
    return project / example


def _snapshot_files(job: ScriptJob) -> list[str]:
    code = Path(job.status()["code_dir"])
    return sorted(str(path.relative_to(code)) for path in code.rglob("*"))


def _events(job: ScriptJob, name: str) -> list[dict[str, object]]:
    return [e for e in job.metrics("event") if e.get("event") == name]


def _killed_after_a_checkpoint(dev_cluster: DevCluster, job: ScriptJob, layout: str) -> dict[str, object]:
    """A node of the job killed once hyperlaunch counted the script's first checkpoint; the job
    COMPLETED with one node-failure requeue that used no budget, and its requeued attempt resumed
    from a `layout` checkpoint taken before the end: that `resumed` event. (A rank that aborts
    while Python exits, gloo's threads at teardown, costs a restart inside the allocation, which
    resumes again: from the last step.)"""
    wait_until(lambda: bool(_events(job, "checkpoint_completed")), 300, "hyperlaunch to count the script's first checkpoint", interval=0.5)
    victim = kill_a_node_of(job)
    _wait_two_attempts(job)
    revive(dev_cluster, victim)
    final = job.wait_final()
    assert final["state"] == "COMPLETED", job.status_text() + job.log()
    assert [r["cause"] for r in final["restarts"]] == ["node failure"], final["restarts"]
    assert final["failures_counted"] == 0, "a checkpoint completed before the kill: the requeue used no budget"
    resumed, *again = _events(job, "resumed")
    assert all(int(str(event["step"])) == STEPS for event in again), again
    assert resumed["source"] == layout and EVERY <= int(str(resumed["step"])) < STEPS, resumed
    return resumed


def test_a_transformers_trainer_script_resumes_from_its_own_checkpoint_after_a_killed_node(dev_cluster: DevCluster, tmp_path: Path) -> None:
    script = _project(tmp_path, "hf_trainer.py")
    job = _submit(
        dev_cluster, tmp_path, script,
        args=(
            "--output_dir", "out", "--max_steps", str(STEPS), "--save_steps", str(EVERY), "--report_to", "none",
            "--per_device_train_batch_size", "2", "--logging_steps", "1", "--step_seconds", "0.3",
            "{resume?--resume_from_checkpoint {resume}}",
        ),
    )
    work = Path(job.status()["work_dir"])
    assert work == job.run_dir / "work"
    snapshot_before = _snapshot_files(job)
    resumed = _killed_after_a_checkpoint(dev_cluster, job, "transformers")
    assert Path(str(resumed["path"])).parent == work / "out"
    assert (work / "out" / f"checkpoint-{STEPS}" / "trainer_state.json").exists()
    state = json.loads((work / "out" / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    assert state["global_step"] == STEPS
    # One model across both nodes (accelerate told it runs on CPUs), not one each: an epoch is
    # 512 samples, each step takes 2 from each of the 2 processes.
    assert state["epoch"] == pytest.approx(STEPS * 2 * 2 / 512, rel=1e-3), state["epoch"]
    # The second start took the resume argument, the first did not: the Trainer logged each step
    # from 1, then from the resumed one on.
    steps = [int(r["step"]) for r in state["log_history"] if "loss" in r]
    assert steps == list(range(1, STEPS + 1)), steps
    assert _snapshot_files(job) == snapshot_before, "the job wrote into its code snapshot"
    assert not any(name.startswith("out") for name in os.listdir(tmp_path / "project"))
    text = job.status_text()
    assert f"runs in:    {work}" in text
    last = _events(job, "checkpoint_completed")[-1]  # checkpoint-100, or 101 after a restart at exit
    assert int(str(last["step"])) >= STEPS and f"checkpoint: {last['path']} (step {last['step']})" in text, text
    listed = dev_cluster.hyperlaunch("checkpoints", job.job_id, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert doc["work_dir"] == str(work)
    newest = [item for item in doc["script_checkpoints"] if item["resume_point"]]
    assert [(item["layout"], item["path"]) for item in newest] == [("transformers", last["path"])], doc
    shown = dev_cluster.hyperlaunch("checkpoints", job.job_id, cwd=tmp_path)
    assert "<- next start" in shown.stdout and "no checkpoints of" not in shown.stderr, shown.stdout + shown.stderr


def test_a_lightning_script_resumes_from_its_last_ckpt_after_a_killed_node(dev_cluster: DevCluster, tmp_path: Path) -> None:
    script = _project(tmp_path, "lightning_trainer.py")
    job = _submit(
        dev_cluster, tmp_path, script,
        args=("--num_nodes", "{nodes}", "--max_steps", str(STEPS), "--every", str(EVERY), "--step_seconds", "0.3", "{resume?--ckpt_path {resume}}"),
    )
    work = Path(job.status()["work_dir"])
    snapshot_before = _snapshot_files(job)
    resumed = _killed_after_a_checkpoint(dev_cluster, job, "lightning")
    assert str(resumed["path"]).startswith(str(work / "lightning_logs"))
    ckpts = sorted(p.name for p in (work / "lightning_logs").rglob("*.ckpt"))
    assert f"epoch=0-step={STEPS}.ckpt" in ckpts and "last.ckpt" in ckpts, ckpts
    # One model over both nodes, as torchrun ranks them: Lightning split the data in two (an
    # epoch of 4096 samples in batches of 8 is 256 steps a rank; each rank's loader has 256).
    log = job.log()
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in log or "MEMBER: 2/2" in (job.workdir / "logs" / f"{job.name}_{job.job_id}.err").read_text(), log[-3000:]
    assert _snapshot_files(job) == snapshot_before, "the job wrote into its code snapshot"
