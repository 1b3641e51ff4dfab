"""Long runs on the dev cluster (issue 15): a run longer than its time limit goes on through
as many windows as it needs, whatever --max-restarts says, as long as each window saves; and
`resume` never starts a second copy of a job that still runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.devcluster_helpers import DevCluster, importable_tests_env, wait_until
from tests.support.fault_helpers import FAULTY_CLI, MODEL, TRAINER_ARGS, Job, submit

pytestmark = pytest.mark.integration


def test_a_run_of_three_time_windows_completes_with_one_restart_allowed(dev_cluster: DevCluster, tmp_path: Path) -> None:
    # Slurm's time limits have minute granularity: 2 minutes, the save signal 45 s before the
    # limit (Slurm may send it up to 30 s early), so a window trains at most 75 s: 37 steps of
    # at least 2 s, and the one in flight. 80 steps need three windows or more; only the signal
    # saves (no periodic checkpoints), so each window ends in a save. The old count (every
    # requeue against --max-restarts) failed this job at the end of its second window.
    steps = 80
    job = submit(
        dev_cluster, tmp_path, "--time", "2", "--signal-seconds", "45", "--max-restarts", "1",
        "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=2", max_steps=steps, checkpoint_every=1000,
    )
    final = job.wait_final(timeout=1500)
    assert final["state"] == "COMPLETED", final
    assert len(final["attempts"]) >= 3 and final["windows"] == len(final["attempts"]), final["attempts"]
    assert [r["cause"] for r in final["restarts"]] == ["time limit"] * (len(final["attempts"]) - 1), final["restarts"]
    assert (final["max_restarts"], final["failures_counted"], final["restart_budget_left"]) == (1, 0, 1)
    assert final["last_step"] == steps
    saved = [e["step"] for e in job.events("exit") if e.get("requeue")]
    resumed = [e["step"] for e in job.events("resumed")]
    assert len(saved) == len(final["restarts"]) and resumed == saved, (saved, resumed)
    log = (tmp_path / "logs" / f"{MODEL}_{job.job_id}.out").read_text()
    requeues = re.findall(r"attempt-end .*cause=time-limit failures=(\d+) round=0 action=requeue", log)
    assert requeues == ["0"] * len(saved), "every window saved, so none used the budget"


def _submit_result(cluster: DevCluster, workdir: Path, *flags: str) -> tuple[int, str, str]:
    result = cluster.hyperlaunch(
        "submit", "--model", MODEL, "--nodes", "2", "--exclusive", "--json", *flags, "--", *TRAINER_ARGS,
        cwd=workdir, extra_env=importable_tests_env(), module=FAULTY_CLI,
    )
    return result.returncode, result.stdout, result.stderr


def test_resume_of_a_running_job_refuses_or_waits_for_its_end(dev_cluster: DevCluster, tmp_path: Path) -> None:
    # The running job pauses while `pause` exists: it must still run when the waiting job is
    # submitted, whatever the time the CLI calls between take (CI once saw it end before).
    pause = tmp_path / "pause"
    running = submit(
        dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.5", "--env", f"HYPERLAUNCH_TEST_PAUSE_FILE={pause}",
        max_steps=60, checkpoint_every=5,
    )
    wait_until(lambda: (running.pointer_step() or 0) >= 5, 240, "the first checkpoint", interval=0.5)
    pause.touch()
    assert running.status()["state"] == "RUNNING"

    refused = dev_cluster.hyperlaunch("resume", running.job_id, cwd=tmp_path, extra_env=importable_tests_env())
    assert refused.returncode == 11, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert f"job {running.job_id} is RUNNING" in line and "--after-end" in line
    # Nor may a new job train into the same folder and model beside it.
    code, _out, err = _submit_result(dev_cluster, tmp_path, "--max-steps", "10")
    assert code == 11 and f"job {running.job_id} (RUNNING)" in err, err

    waiting = dev_cluster.hyperlaunch(
        "resume", running.job_id, "--after-end", "--max-steps", "80", "--json", cwd=tmp_path, extra_env=importable_tests_env()
    )
    assert waiting.returncode == 0, waiting.stderr
    after = Job(dev_cluster, tmp_path, json.loads(waiting.stdout)["job_id"])
    assert dev_cluster.job_field(after.job_id, "%T %r") == "PENDING Dependency"
    assert running.status()["state"] == "RUNNING"
    pause.unlink()

    first = running.wait_final()
    assert first["state"] == "COMPLETED", first
    done = after.wait_final()
    assert done["state"] == "COMPLETED", done
    assert done["last_step"] == 80
    # The checkpoint was chosen when the new job started: the first job's last, not the one
    # -latest named at submit time.
    resumed = [e["step"] for e in after.events("resumed") if e.get("job_id") == after.job_id]
    assert resumed == [60], resumed
    assert done["attempts"][0]["start"] >= first["attempts"][-1]["end"]
    assert not any(p.name.startswith(".hyperlaunch-lock-") for p in running.ckpt_dir.iterdir()), "each job released its lock"
