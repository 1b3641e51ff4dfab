"""The CLI against the real dev cluster and the real trainer: submit, status, cancel,
resume, checkpoints, and refusals that leave no record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints
from tests.support.devcluster_helpers import DevCluster, wait_until
from tests.support.train_helpers import save_tiny_model

pytestmark = pytest.mark.integration

TINY = ["--model", "qwen3_tiny", "--nodes", "2"]


def _status(cluster: DevCluster, job: str, cwd: Path) -> dict:
    result = cluster.hyperlaunch("status", job, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _submit(cluster: DevCluster, cwd: Path, *args: str) -> str:
    result = cluster.hyperlaunch("submit", *TINY, "--json", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["job_id"]


def test_submit_runs_to_the_end_and_status_tells_it(dev_cluster: DevCluster, tmp_path: Path) -> None:
    job = _submit(dev_cluster, tmp_path, "--max-steps", "6", "--", "--checkpoint-every", "3")
    wait_until(lambda: _status(dev_cluster, job, tmp_path)["state"] == "COMPLETED", 240, f"job {job} to complete")
    doc = _status(dev_cluster, job, tmp_path)
    assert doc["last_step"] == 6 and doc["checkpoint_step"] == 6 and doc["restarts"] == []
    assert isinstance(doc["last_loss"], float) and doc["tokens_per_s"] > 0
    listing = json.loads(dev_cluster.hyperlaunch("status", "--json", cwd=tmp_path).stdout)
    assert [j["job_id"] for j in listing["jobs"]] == [job]
    ckpts = dev_cluster.hyperlaunch("checkpoints", "--model", "qwen3_tiny", "--json", cwd=tmp_path)
    assert ckpts.returncode == 0, ckpts.stderr
    assert "qwen3_tiny-6steps" in ckpts.stdout
    log = dev_cluster.hyperlaunch("logs", job, cwd=tmp_path)
    assert "===== attempt 0 on " in log.stdout and "step 6" in log.stdout


def test_cancel_stops_a_job_and_resume_continues_from_its_checkpoint(dev_cluster: DevCluster, tmp_path: Path) -> None:
    job = _submit(dev_cluster, tmp_path, "--max-steps", "2000", "--", "--checkpoint-every", "4")
    ckpt_dir = tmp_path / "checkpoints"
    wait_until(lambda: checkpoints.newest_complete(ckpt_dir, "qwen3_tiny") is not None, 240, "a first checkpoint")
    # A shell that sets how Slurm's commands filter and print (scancel alone would then leave
    # the running job, squeue hide it, sacct print `17:11:09` as its start) changes nothing.
    shaped = {"SCANCEL_STATE": "PENDING", "SQUEUE_STATES": "PENDING", "SLURM_TIME_FORMAT": "relative"}
    cancelled = dev_cluster.hyperlaunch("cancel", job, cwd=tmp_path, extra_env=shaped)
    assert cancelled.returncode == 0, cancelled.stderr
    wait_until(lambda: _status(dev_cluster, job, tmp_path)["state"] == "CANCELLED", 60, "the cancel")
    seen = json.loads(dev_cluster.hyperlaunch("status", job, "--json", cwd=tmp_path, extra_env=shaped).stdout)
    assert seen["state"] == "CANCELLED" and seen["attempts"][0]["start"].startswith("20"), seen["attempts"]
    saved = checkpoints.newest_complete(ckpt_dir, "qwen3_tiny")
    assert saved is not None
    target = saved.step + 4
    resumed = dev_cluster.hyperlaunch("resume", job, "--max-steps", str(target), "--json", cwd=Path("/"))
    assert resumed.returncode == 0, resumed.stderr
    new_job = json.loads(resumed.stdout)["job_id"]
    assert new_job != job
    wait_until(lambda: _status(dev_cluster, new_job, tmp_path)["state"] == "COMPLETED", 240, "the resumed job")
    doc = _status(dev_cluster, new_job, tmp_path)
    assert doc["resumed_from_job"] == job
    assert doc["last_step"] == target
    assert saved.step in doc["resumed_from_steps"], doc["resumed_from_steps"]


def test_resume_refuses_without_a_complete_checkpoint(dev_cluster: DevCluster, tmp_path: Path) -> None:
    job = _submit(dev_cluster, tmp_path, "--max-steps", "1000", "--", "--checkpoint-every", "100000")
    # SIGKILL, not the trainer-friendly SIGTERM of `cancel`: no save on the way out.
    dev_cluster.run("scancel", "--signal=KILL", "--full", job)
    dev_cluster.run("scancel", job)
    # Until it left the queue (COMPLETING included), resume refuses for another reason: a live job.
    live = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")
    wait_until(lambda: dev_cluster.job_field(job, "%T") not in live, 60, "the killed job to end")
    result = dev_cluster.hyperlaunch("resume", job, cwd=tmp_path)
    assert result.returncode == 6, result.stderr
    assert "no complete checkpoint of qwen3_tiny" in result.stderr and "Traceback" not in result.stderr
    listing = json.loads(dev_cluster.hyperlaunch("status", "--json", cwd=tmp_path).stdout)
    assert [j["job_id"] for j in listing["jobs"]] == [job], "a refused resume records nothing"


@pytest.mark.parametrize("named", [False, True], ids=["symlink", "model-name"])
def test_a_model_directory_is_found_by_the_name_its_checkpoints_go_by(
    dev_cluster: DevCluster, tmp_path: Path, named: bool
) -> None:
    """The trainer names a model directory's checkpoints after the directory a symlink resolves
    to (or --model-name); checkpoints, status and resume must look for the same name."""
    real = tmp_path / "real-model-v1.0"
    save_tiny_model("qwen3", real)
    link = tmp_path / "current"
    link.symlink_to(real)
    name = "mine" if named else "real-model-v1.0"
    trainer = ["--tokenizer", "offline", "--seq-len", "32", "--micro-batch-size", "1", "--checkpoint-every", "2", "--no-export"]
    result = dev_cluster.hyperlaunch(
        "submit", "--model", str(link), "--nodes", "1", "--max-steps", "2", "--json", "--", *trainer,
        *(["--model-name=mine"] if named else []), cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)["job_id"]
    wait_until(lambda: _status(dev_cluster, job, tmp_path)["state"] == "COMPLETED", 240, f"job {job} to complete")
    assert (tmp_path / "checkpoints" / f"{name}-latest").read_text().strip() == f"{name}-2steps"
    assert _status(dev_cluster, job, tmp_path)["checkpoint_step"] == 2
    listed = dev_cluster.hyperlaunch("checkpoints", "--model", name if named else str(link), "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (model,) = json.loads(listed.stdout)["models"]
    assert (model["model"], model["latest"]) == (name, f"{name}-2steps")
    resumed = dev_cluster.hyperlaunch("resume", job, "--max-steps", "3", "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    new_job = json.loads(resumed.stdout)["job_id"]
    wait_until(lambda: _status(dev_cluster, new_job, tmp_path)["state"] == "COMPLETED", 240, "the resumed job")
    doc = _status(dev_cluster, new_job, tmp_path)
    assert (doc["last_step"], doc["checkpoint_step"], doc["resumed_from_steps"]) == (3, 3, [2])
    assert _status(dev_cluster, job, tmp_path)["checkpoint_step"] == 2, "the first job's own, not its resume's"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--partition", "nope"], 4, "invalid partition"),
        (["--model", "gpt5"], 2, "unknown model"),
        (["--nodes", "0"], 2, "--nodes must be between 1 and 2147483647"),
        (["--instance-type", "p9.huge"], 2, "p9.huge"),
        # Slurm itself would queue it, PENDING (PartitionNodeLimit) for good.
        (["--nodes", "6", "--spare-nodes", "40"], 2, "the job asks for 6 node(s) + 40 spare but the default partition has"),
    ],
)
def test_bad_submissions_are_one_line_and_leave_no_record(dev_cluster: DevCluster, tmp_path: Path, args: list[str], code: int, message: str) -> None:
    result = dev_cluster.hyperlaunch("submit", *TINY, *args, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("hyperlaunch: error")]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    listing = json.loads(dev_cluster.hyperlaunch("status", "--json", cwd=tmp_path).stdout)
    assert listing["jobs"] == []


def test_a_bad_config_file_is_one_line(dev_cluster: DevCluster, tmp_path: Path) -> None:
    (tmp_path / "hyperlaunch.toml").write_text("nodez = 2\n")
    result = dev_cluster.hyperlaunch("submit", *TINY, cwd=tmp_path)
    assert result.returncode == 3
    assert "nodez" in result.stderr and "Traceback" not in result.stderr
