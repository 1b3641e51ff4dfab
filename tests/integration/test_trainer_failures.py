"""A trainer that stops on input no restart can fix ends its job at once, and `status` says
why in the trainer's words - on the dev cluster, through the real batch script and torchrun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core.slurm_states import ACTIVE_STATES
from tests.support.devcluster_helpers import DevCluster, wait_until

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


def test_a_package_the_trainer_cannot_import_is_a_final_record_not_a_crash(tmp_path: Path) -> None:
    """Nodes whose venv lacks transformers (installed without the [train] extra): the trainer's
    record says trainer-broken and final, so the supervisor ends the job on its first round.
    Before, it recorded `unexpected`, and the job ran 12 launches (new-user trial)."""
    from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV, read_trainer_failure
    from tests.support.train_helpers import launch, tiny_args

    shadow = tmp_path / "shadow" / "transformers"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'transformers'\", name='transformers')\n")
    record = tmp_path / "trainer-failure"
    run = launch(
        tiny_args(tmp_path / "ck", steps=2), ranks=0, run_dir=tmp_path / "run", check=False,
        env={TRAINER_FAILURE_FILE_ENV: str(record), "PYTHONPATH": f"{shadow.parent}:{importable_path()}"},
    )
    assert run.returncode != 0
    failure = read_trainer_failure(record)
    assert failure is not None and failure.final and failure.kind == "trainer-broken", run.stderr[-2000:]
    assert failure.message.startswith("ModuleNotFoundError: No module named 'transformers'"), failure.message


def importable_path() -> str:
    from tests.support.devcluster_helpers import importable_tests_env

    return importable_tests_env()["PYTHONPATH"]
