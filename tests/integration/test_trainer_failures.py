"""A trainer that stops on input no restart can fix ends its job at once, and `status` says
why in the trainer's words - on the dev cluster, through the real batch script and torchrun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core.slurm_states import ACTIVE_STATES
from tests.integration.devcluster_helpers import DevCluster, wait_until

pytestmark = pytest.mark.integration


def _status(cluster: DevCluster, job: str, cwd: Path) -> dict:
    result = cluster.hyperlaunch("status", job, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_bad_data_fails_the_job_on_its_first_attempt_and_status_names_the_line(dev_cluster: DevCluster, tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"text": "a fine first document"}\n{"text": not json\n')
    submitted = dev_cluster.hyperlaunch(
        "submit", "--nodes", "2", "--model", "qwen3_tiny", "--max-steps", "4", "--data", str(data),
        "--max-restarts", "3", "--json", cwd=tmp_path,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)["job_id"]
    wait_until(lambda: _status(dev_cluster, job, tmp_path)["state"] not in ACTIVE_STATES, 240, f"job {job} to end")
    doc = _status(dev_cluster, job, tmp_path)
    assert doc["state"] == "FAILED", doc
    assert [state for state, _nodes in dev_cluster.sacct_attempts(job)] == ["FAILED"], "a final failure is never requeued"
    assert doc["restarts"] == []
    failure = doc["failure"]
    assert (failure["cause"], failure["kind"]) == ("trainer error", "invalid-data"), failure
    assert failure["detail"] == f"--data {data}:2: not valid JSON"
    shown = dev_cluster.hyperlaunch("status", job, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "bad.jsonl:2: not valid JSON" in shown.stdout and "Terminated" not in shown.stdout
