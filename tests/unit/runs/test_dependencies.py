"""`--after JOB[:ok|:any]`: sbatch's --dependency from the job's waits (resume --after-end's
too), Slurm told to cancel a job whose afterok can no longer be met, one-line refusals, and
status naming what a job waits for or why it never runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hyperlaunch.job.plan import plan_job
from hyperlaunch.job.spec import dependencies
from hyperlaunch.runs.dependency_states import Dependency
from hyperlaunch.runs.job_status import JobStatus
from hyperlaunch.runs.restart_causes import Restart
from hyperlaunch.script.render import render_sbatch
from hyperlaunch.slurm.accounting import Attempt
from hyperlaunch.slurm.dependencies import dependency_value, parse_after
from tests.support.cli_runner import one_error_line, run_cli


def _spec(tmp_path: Path, **flags: object):
    return plan_job({"model": "qwen3_tiny", **flags}, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml").spec


def test_the_dependency_line_groups_the_waits_by_kind(tmp_path: Path) -> None:
    spec = _spec(tmp_path, after=["12", "13:any", "14_2:ok", "12:ok"])
    assert dependencies(spec) == (("12", "ok"), ("13", "any"), ("14_2", "ok"))
    script = render_sbatch(spec)
    assert "#SBATCH --dependency=afterok:12:14_2,afterany:13\n" in script
    assert "#SBATCH --kill-on-invalid-dep=yes\n" in script
    resumed = _spec(tmp_path, after=["20:any"]).replace(after_job="19")
    script = render_sbatch(resumed)
    assert "#SBATCH --dependency=afterany:20:19\n" in script and "kill-on-invalid-dep" not in script
    assert dependency_value(()) is None and "--dependency" not in render_sbatch(_spec(tmp_path))


@pytest.mark.slow
def test_a_malformed_after_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("12:maybe", "abc", "12;rm"):
        one_error_line(run_cli(["render", "-m", "qwen3_tiny", "--after", bad], monkeypatch), 2, "--after", "JOB:ok or JOB:any")
    one_error_line(run_cli(["export", "--name", "m", "--after", "12"], monkeypatch), 2, "are for --slurm")
    assert parse_after(["7", "8:any"]) == (("7", "ok"), ("8", "any"))


def _status(waits: tuple[Dependency, ...], state: str = "PENDING") -> JobStatus:
    from hyperlaunch.runs.training_progress import Progress

    record = type("Record", (), {"spec": None, "job_id": "30"})()
    return JobStatus(record=record, state=state, attempts=(), restarts=(), progress=Progress(), waits_for=waits)  # type: ignore[arg-type]


def test_status_says_what_a_job_waits_for_and_why_it_will_never_run() -> None:
    from hyperlaunch.cli._status_cells import state_cell as _state_cell

    waiting = _status((Dependency("12", "ok", "RUNNING"), Dependency("13", "any", "FAILED")))
    assert waiting.never_runs is None and _state_cell(waiting) == "PENDING (after 12, 13)"
    blocked = _status((Dependency("12", "ok", "TIMEOUT"),), state="CANCELLED")
    assert blocked.never_runs == "job 12 ended TIMEOUT; this one waited for it to complete (--after 12:ok)"
    assert _state_cell(blocked) == "CANCELLED (never runs: job 12 TIMEOUT)"
    # sacct's record of a job cancelled before it started reads as a failure of its own: the
    # job it waited for is still the reason shown.
    cancelled = dataclasses.replace(blocked, failure=Restart(attempt=0, cause="cancelled"))
    assert _state_cell(cancelled) == "CANCELLED (never runs: job 12 TIMEOUT)"
    assert _status((Dependency("12", "ok", "COMPLETED"),)).never_runs is None
    # Submitted after job 12 had failed: Slurm cancels it at once, and sacct gives it its submit
    # time as start and end, but no nodes.
    at_once = Attempt("30", "CANCELLED", "None assigned", "2026-01-01T00:00:09", "2026-01-01T00:00:09", "0:0")
    assert dataclasses.replace(blocked, attempts=(at_once,)).never_runs is not None
    ran = Attempt("30", "CANCELLED", "node1", "2026-01-01T00:00:09", "2026-01-01T00:00:19", "0:0")
    assert dataclasses.replace(blocked, attempts=(ran,)).never_runs is None


def test_a_job_cancelled_before_it_started_has_used_none_of_its_budget(tmp_path: Path) -> None:
    from hyperlaunch.runs.job_status import RestartBudget, restart_budget
    from hyperlaunch.runs.jobs import JobRecord
    from hyperlaunch.slurm.accounting import Attempt

    record = JobRecord(job_id="30", spec=_spec(tmp_path, after=["12"]), submitted_at=0.0)
    never = Attempt("30", "CANCELLED", "None assigned", "None", "2026-01-01T00:00:08", "0:0")
    assert restart_budget(record, [never], last_running=False) == RestartBudget(windows=0, failures=0, allowed=3)
    ran = Attempt("30", "FAILED", "node1", "2026-01-01T00:00:01", "2026-01-01T00:00:08", "1:0")
    assert restart_budget(record, [ran], last_running=False).failures == 1


def test_a_waited_array_is_completed_only_once_every_task_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from hyperlaunch.slurm import accounting as slurm_accounting
    from hyperlaunch.slurm import runner as slurm_runner

    sacct = (
        "41_0|45|COMPLETED\n41_1|46|FAILED\n41_2|41|COMPLETED\n12|12|FAILED\n43_0|43|COMPLETED\n43_[1-2%2]|43|PENDING\n"
        "44_0|47|COMPLETED\n44_1|44|COMPLETED\n"
    )
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, sacct, ""))
    assert slurm_accounting.job_states(["41", "41_2", "12", "43", "44", "99"]) == {
        "41": "FAILED", "41_2": "COMPLETED", "12": "FAILED", "43": "PENDING", "44": "COMPLETED",
    }
    assert slurm_accounting.array_state(["COMPLETED", "CANCELLED", "RUNNING"]) == "RUNNING" and slurm_accounting.job_states([]) == {}
    # A task named by its own (raw) id, as Slurm accepts it: 46 is task 41_1. An array's id is
    # also one of its tasks' raw ids (41 is 41_2's): the array's state, not that task's.
    assert slurm_accounting.job_states(["46", "41", "45_1"]) == {"46": "FAILED", "41": "FAILED"}


def test_slurms_queries_run_without_the_users_output_shaping_variables() -> None:
    from hyperlaunch.core.slurm_states import command_environment as command_env

    shell = {"PATH": "/bin", "SQUEUE_STATES": "RUNNING", "SCANCEL_STATE": "PENDING", "SACCT_FEDERATION": "1",
             "SLURM_TIME_FORMAT": "relative", "SBATCH_ACCOUNT": "team", "SLURM_CONF": "/c"}
    squeue = command_env("squeue", shell)
    assert squeue is not None and "SQUEUE_STATES" not in squeue and squeue["SLURM_TIME_FORMAT"] == "standard"
    assert squeue["SCANCEL_STATE"] == "PENDING" and squeue["SLURM_CONF"] == "/c"  # another command's, and the cluster, stay
    scancel = command_env("scancel", shell)
    assert scancel is not None and "SCANCEL_STATE" not in scancel
    assert command_env("sbatch", shell) == shell  # the user's job defaults, and the job's environment
