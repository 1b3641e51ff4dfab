"""Steps that wait for each other on the dev cluster: `submit --after J:ok` behind a training
that fails is cancelled by Slurm and `status` says which job failed it, never left pending; and
`export --slurm --after J`, queued while J trains, exports the checkpoint J leaves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.devcluster_helpers import DevCluster, wait_until
from tests.integration.fault_helpers import MODEL, Job, submit

pytestmark = pytest.mark.integration


def test_a_job_after_a_failed_one_never_runs_and_status_names_why(dev_cluster: DevCluster, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("this is not json\n")
    first = submit(dev_cluster, tmp_path, "--data", str(bad), max_steps=10, checkpoint_every=5)
    second = dev_cluster.hyperlaunch(
        "submit", "--model", MODEL, "--nodes", "1", "--max-steps", "5", "--after", f"{first.job_id}:ok", "--json",
        "--checkpoint-dir", str(tmp_path / "second"), cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    waiting = Job(dev_cluster, tmp_path, json.loads(second.stdout)["job_id"])
    assert first.wait_final()["state"] == "FAILED"
    wait_until(lambda: waiting.status()["state"] not in ("PENDING", "UNKNOWN"), 120, "Slurm to cancel the job behind the failed one")
    doc = waiting.status()
    assert doc["state"] == "CANCELLED" and doc["attempts"] in ([], [a for a in doc["attempts"] if not a["start"] or a["start"] == "None"])
    assert doc["never_runs"] == f"job {first.job_id} ended FAILED; this one waited for it to complete (--after {first.job_id}:ok)"
    assert doc["waits_for"] == [{"job": first.job_id, "kind": "ok", "state": "FAILED"}]
    shown = dev_cluster.hyperlaunch("status", waiting.job_id, cwd=tmp_path)
    assert f"never runs: job {first.job_id} ended FAILED" in shown.stdout, shown.stdout


def test_an_export_queued_behind_its_training_exports_what_the_training_left(dev_cluster: DevCluster, tmp_path: Path) -> None:
    training = submit(dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.2", max_steps=20, checkpoint_every=10)
    queued = dev_cluster.hyperlaunch("export", training.job_id, "--slurm", "--after", training.job_id, "--json", cwd=tmp_path)
    assert queued.returncode == 0, queued.stderr
    export_job = json.loads(queued.stdout)["job_id"]
    listed = dev_cluster.run("squeue", "-h", "-j", export_job, "-o", "%T %r", check=False)
    assert listed.strip() in ("", "PENDING Dependency"), listed  # waits while the training runs (or already ran)
    assert training.wait_final()["state"] == "COMPLETED"
    exported = training.ckpt_dir / f"{MODEL}-20steps-hf"
    wait_until(lambda: (exported / "hyperlaunch-export.json").exists(), 180, "the export job")
    assert json.loads((exported / "hyperlaunch-export.json").read_text())["step"] == 20
