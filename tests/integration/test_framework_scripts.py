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
    wait_until(lambda: (work / "out" / f"checkpoint-{EVERY}" / "trainer_state.json").exists(), 300, "the Trainer's first checkpoint", interval=0.2)
    wait_until(lambda: bool(_events(job, "checkpoint_completed")), 30, "hyperlaunch to count it")
    victim = kill_a_node_of(job)
    _wait_two_attempts(job)
    revive(dev_cluster, victim)

    final = job.wait_final()
    assert final["state"] == "COMPLETED", job.status_text() + job.log()
    assert [r["cause"] for r in final["restarts"]] == ["node failure"], final["restarts"]
    assert final["failures_counted"] == 0, "a checkpoint-N completed before the kill: the requeue used no budget"
    (resumed,) = _events(job, "resumed")
    assert resumed["source"] == "transformers" and EVERY <= int(resumed["step"]) < STEPS, resumed  # type: ignore[call-overload]
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
    assert f"checkpoint: {work / 'out' / f'checkpoint-{STEPS}'} (step {STEPS})" in text, text
    listed = dev_cluster.hyperlaunch("checkpoints", job.job_id, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert doc["work_dir"] == str(work)
    newest = [item for item in doc["script_checkpoints"] if item["resume_point"]]
    assert [(item["layout"], item["step"]) for item in newest] == [("transformers", STEPS)], doc
