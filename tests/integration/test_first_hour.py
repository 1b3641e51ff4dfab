"""A new user's first hour on the dev cluster, typed as a user types it: the installed
`hyperlaunch` console script, from a scratch folder, a model preset and nothing else.

The scratch folder holds a `hyperlaunch/` package without the trainer, as a source checkout
(or an older copy of it) does: jobs run in the folder they were submitted from, and must
still start the installed trainer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.devcluster_helpers import DevCluster, wait_until

pytestmark = pytest.mark.integration

CONSOLE_SCRIPT = Path(sys.executable).parent / "hyperlaunch"


def scratch_folder_with_a_shadowing_package(tmp_path: Path) -> Path:
    folder = tmp_path / "checkout"
    (folder / "hyperlaunch").mkdir(parents=True)
    (folder / "hyperlaunch" / "__init__.py").write_text('__version__ = "0.0.0"  # no train/ here\n')
    return folder


def typed(cluster: DevCluster, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`hyperlaunch ARGS` as a user types it in `cwd`, against the dev cluster."""
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, env=cluster.env, cwd=cwd, timeout=600, check=False
    )


def status(cluster: DevCluster, cwd: Path, job: str) -> dict:
    result = typed(cluster, cwd, "status", job, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_preset_alone_trains_to_completion_on_one_attempt(dev_cluster: DevCluster, tmp_path: Path) -> None:
    cwd = scratch_folder_with_a_shadowing_package(tmp_path)
    result = typed(dev_cluster, cwd, "submit", "--nodes", "2", "--model", "qwen3_tiny", "--json")
    assert result.returncode == 0, result.stderr
    assert "--max-steps" in result.stderr and "preset qwen3_tiny" in result.stderr  # the settings printout
    job = json.loads(result.stdout)["job_id"]
    wait_until(lambda: status(dev_cluster, cwd, job)["state"] not in ("PENDING", "RUNNING", "REQUEUED"), 300, f"job {job} to end")
    doc = status(dev_cluster, cwd, job)
    assert doc["state"] == "COMPLETED", (doc, (cwd / "logs").glob("*"))
    assert len(dev_cluster.sacct_attempts(job)) == 1 and doc["restarts"] == []
    assert doc["last_step"] == doc["checkpoint_step"] == 40  # the preset's max steps, saved
    assert (cwd / "checkpoints" / "qwen3_tiny-final" / "config.json").is_file()


def test_a_trainer_typo_is_refused_at_submit_and_nothing_reaches_slurm(dev_cluster: DevCluster, tmp_path: Path) -> None:
    result = typed(dev_cluster, tmp_path, "submit", "--nodes", "2", "--model", "qwen3_tiny", "--job-name", "typo-check", "--", "--no-such-flag")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("hyperlaunch: error:")]
    assert len(errors) == 1 and "--no-such-flag" in errors[0] and "Traceback" not in result.stderr
    assert dev_cluster.run("sacct", "-n", "-X", "--name", "typo-check", "-o", "JobID").strip() == ""
    assert json.loads(typed(dev_cluster, tmp_path, "status", "--json").stdout)["jobs"] == []


@pytest.mark.solo
def test_the_missions_exact_command_trains_qwen3_0_6b(dev_cluster: DevCluster, tmp_path: Path) -> None:
    """`hyperlaunch submit --nodes 2 --model qwen3_0_6b`, nothing else: the real 0.6B model on
    two CPU nodes of this machine. It needs most of the machine's memory, so it runs alone
    (make test runs the solo tests after the others) and is cancelled after its first step."""
    cwd = scratch_folder_with_a_shadowing_package(tmp_path)
    result = typed(dev_cluster, cwd, "submit", "--nodes", "2", "--model", "qwen3_0_6b", "--json")
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)["job_id"]
    try:
        def stepped() -> bool:
            doc = status(dev_cluster, cwd, job)
            assert doc["state"] in ("PENDING", "RUNNING"), doc
            return doc["last_step"] is not None

        wait_until(stepped, 600, f"job {job}'s first logged step", interval=5)
        doc = status(dev_cluster, cwd, job)
        assert doc["restarts"] == [] and len(dev_cluster.sacct_attempts(job)) == 1
        assert doc["last_loss"] is not None and doc["last_loss"] > 0
    finally:
        typed(dev_cluster, cwd, "cancel", job)
