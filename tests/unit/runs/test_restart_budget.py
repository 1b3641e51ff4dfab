"""The restart budget (issue 15): --max-restarts bounds the attempts in a row that made no
progress (no checkpoint completed in them, the trainer's progress records), not the requeues.
The job's supervisor decides, run by the harness with stub Slurm commands; `status` counts with
the same functions (hyperlaunch.core.protocol: failures_in_a_row, budget_spent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core import protocol as p
from hyperlaunch.core import trainer_failures as tf
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs.job_status import summarize
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.runs.restart_causes import Restart
from hyperlaunch.script.render import render_sbatch
from hyperlaunch.slurm.accounting import Attempt
from tests.support.sbatch_harness import JOB_ID, Run, run_script


def _spec(tmp_path: Path, max_restarts: int) -> JobSpec:
    return job_spec(
        model="qwen3_tiny", torchrun="torchrun", max_restarts=max_restarts,
        checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"),
    )


def _progress(tmp_path: Path, *attempts: int) -> None:
    """Earlier attempts of the job that completed a checkpoint."""
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    for attempt in attempts:
        p.write_progress(tmp_path / "run", JOB_ID, attempt, 10 * (attempt + 1))


def _run(tmp_path: Path, max_restarts: int, restart: int, *, progress: bool, exit_code: int = 1, usr2: bool = False) -> Run:
    (tmp_path / "run").mkdir(exist_ok=True)
    env = {"SLURM_RESTART_COUNT": str(restart), "HL_TEST_EXIT": str(exit_code)}
    if progress:
        env["HL_TEST_PROGRESS"] = str(tmp_path / "run")
    return run_script(render_sbatch(_spec(tmp_path, max_restarts)), tmp_path, env=env, send_usr2=usr2)


def _end(run: Run) -> dict[str, str]:
    ends = [m for m in map(p.parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] == "end"]
    assert ends, run.stdout + run.stderr
    return ends[-1]


@pytest.mark.slow
def test_a_time_limit_requeue_after_a_save_does_not_use_the_budget(tmp_path: Path) -> None:
    # The sixth window of a job allowed one restart: every window saved before its time limit.
    _progress(tmp_path, 0, 1, 2, 3, 4)
    run = _run(tmp_path, max_restarts=1, restart=5, progress=True, usr2=True)
    assert run.requeued and run.returncode == 0, run.stderr
    end = _end(run)
    assert (end["cause"], end["failures"], end["action"]) == ("time-limit", "0", "requeue")


@pytest.mark.slow
def test_a_preemption_after_a_save_does_not_use_the_budget_either(tmp_path: Path) -> None:
    _progress(tmp_path, 0, 1, 2)
    run = _run(tmp_path, max_restarts=0, restart=3, progress=True, exit_code=p.REQUEUE_EXIT_CODE)
    end = _end(run)
    assert run.requeued and (end["cause"], end["failures"], end["action"]) == ("requeue-requested", "0", "requeue")


@pytest.mark.slow
def test_attempts_without_progress_use_the_budget_and_the_one_past_it_ends_the_job(tmp_path: Path) -> None:
    # Two crashes without a new checkpoint before this one, two allowed: this third one ends it.
    run = _run(tmp_path, max_restarts=2, restart=2, progress=False)
    assert not run.requeued and run.returncode == 1
    end = _end(run)
    assert (end["cause"], end["failures"], end["action"]) == ("crash", "3", "exit")
    assert "3 attempts in a row made no progress" in run.stderr and "--max-restarts allows 2" in run.stderr


@pytest.mark.slow
def test_a_stop_signal_without_a_save_is_a_failure_too(tmp_path: Path) -> None:
    run = _run(tmp_path, max_restarts=0, restart=0, progress=False, usr2=True)
    end = _end(run)
    assert not run.requeued and (end["cause"], end["failures"], end["action"]) == ("time-limit", "1", "exit")


@pytest.mark.slow
def test_progress_resets_the_budget(tmp_path: Path) -> None:
    # Attempts 0-2 crashed without saving, attempt 3 saved before it crashed: the budget is whole again.
    _progress(tmp_path, 3)
    run = _run(tmp_path, max_restarts=1, restart=4, progress=False)
    end = _end(run)
    assert run.requeued and (end["cause"], end["failures"], end["action"]) == ("crash", "1", "requeue")
    # Had attempt 3 saved nothing (attempt 2 did), this crash would be the second in a row: the end.
    other = tmp_path / "other"
    other.mkdir()
    _progress(other, 2)
    again = _run(other, max_restarts=1, restart=4, progress=False)
    assert not again.requeued and _end(again)["failures"] == "2"


@pytest.mark.slow
def test_an_attempt_after_slurms_own_requeues_counts_only_those_without_progress(tmp_path: Path) -> None:
    # Slurm requeued the job itself after node failures (no end of script ran): attempts 1 and
    # 2 lost their node before any checkpoint, attempt 0 had saved.
    _progress(tmp_path, 0)
    allowed = _run(tmp_path, max_restarts=2, restart=3, progress=False, exit_code=0)
    assert allowed.trainer is not None and allowed.returncode == 0, "two failures in a row, two allowed: it runs"
    spent = tmp_path / "spent"
    spent.mkdir()
    run = _run(spent, max_restarts=2, restart=3, progress=False, exit_code=0)
    assert run.trainer is None and run.returncode == 1 and not run.requeued
    end = _end(run)
    assert (end["cause"], end["failures"]) == ("restart-limit", "3")
    assert "restart limit reached: 3 attempts in a row made no progress" in run.stderr


@pytest.mark.slow
def test_the_ceiling_bounds_requeues_whatever_progress_they_made(tmp_path: Path) -> None:
    _progress(tmp_path, p.RESTART_CEILING - 1)
    run = _run(tmp_path, max_restarts=3, restart=p.RESTART_CEILING, progress=True, exit_code=p.REQUEUE_EXIT_CODE)
    assert not run.requeued and _end(run)["action"] == "exit"
    assert f"reached the ceiling of {p.RESTART_CEILING}" in run.stderr
    past = tmp_path / "past"
    past.mkdir()
    _progress(past, p.RESTART_CEILING)
    beyond = _run(past, max_restarts=3, restart=p.RESTART_CEILING + 1, progress=True, exit_code=0)
    assert beyond.trainer is None and _end(beyond)["cause"] == "restart-limit"


@pytest.mark.slow
def test_a_progress_record_left_by_an_earlier_job_of_the_same_id_counts_for_nothing(tmp_path: Path) -> None:
    _progress(tmp_path, 0)  # this attempt's own number: an earlier cluster's job 4321
    run = _run(tmp_path, max_restarts=0, restart=0, progress=False)
    assert not run.requeued and _end(run)["failures"] == "1"


def test_status_shows_windows_failures_and_the_budget_left(tmp_path: Path) -> None:
    from hyperlaunch.cli._status_table import table as _table

    _progress(tmp_path, 0, 1)
    record = JobRecord(job_id=JOB_ID, spec=_spec(tmp_path, 2), submitted_at=0.0)
    attempts = [Attempt(JOB_ID, "REQUEUED", "n1", "t", "t", "0:0")] * 3 + [Attempt(JOB_ID, "RUNNING", "n1", "t", "Unknown", "0:0")]
    status = summarize(record, attempts, [], queue_state="RUNNING")
    doc = status.to_json()
    assert (doc["windows"], doc["failures_counted"], doc["max_restarts"], doc["restart_budget_left"]) == (4, 1, 2, 1)
    header, row = _table([status]).splitlines()
    assert row[header.index("BUDGET"):].split()[0] == "1/2"
    # The attempt under way has saved: the budget is whole again.
    p.write_progress(tmp_path / "run", JOB_ID, 3, 40)
    assert summarize(record, attempts, [], queue_state="RUNNING").to_json()["restart_budget_left"] == 2


def _third_attempt_failure(tmp_path: Path, end_fields: str, earlier: Attempt) -> Restart | None:
    """How status explains a job (--max-restarts 1) whose third attempt ended with `end_fields`
    after two that ended as `earlier`."""
    record = JobRecord(job_id=JOB_ID, spec=_spec(tmp_path, 1), submitted_at=0.0)
    Path(record.spec.output.log_dir).mkdir(parents=True)
    record.log_paths[0].write_text(p.format_attempt_marker("end", 2, JOB_ID, end_fields, "t") + "\n")
    attempts = [earlier] * 2 + [Attempt(JOB_ID, "FAILED", "n[1-2]", "t", "t", "1:0")]
    return summarize(record, attempts, []).failure


def test_a_restart_limit_says_how_many_attempts_made_no_progress(tmp_path: Path) -> None:
    earlier = Attempt(JOB_ID, "NODE_FAIL", "n1", "t", "t", "0:0")
    failure = _third_attempt_failure(tmp_path, "exit=1 cause=restart-limit failures=2 action=exit", earlier)
    assert failure is not None
    assert failure.describe().startswith("restart limit (2 attempts in a row without a new checkpoint, 1 allowed; last: node failure")


def test_restarts_inside_the_allocation_are_listed_with_their_cause_and_round(tmp_path: Path) -> None:
    record = JobRecord(job_id=JOB_ID, spec=_spec(tmp_path, 3), submitted_at=0.0)
    Path(record.spec.output.log_dir).mkdir(parents=True)
    run_dir = Path(record.spec.output.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tf.trainer_failure_path(run_dir, JOB_ID, 0, 1).write_text(tf.format_trainer_failure(tf.FailureKind.HANG, "hang: no step for 42 s after step 17", 1))
    lines = [
        p.format_attempt_marker("start", 0, JOB_ID, "nodes=n[1-3] host=n1 spares=n3", "t"),
        p.format_attempt_marker("restart", 0, JOB_ID, "round=1 cause=node-failure exit=1 nodes=n2 spare=n3 action=restart-in-allocation", "t"),
        p.format_attempt_marker("restart", 0, JOB_ID, "round=2 cause=hang exit=1 in_row=1 action=restart-in-allocation", "t"),
        p.format_attempt_marker("end", 0, JOB_ID, "exit=0 cause=completed round=2 action=exit", "t"),
    ]
    record.log_paths[0].write_text("\n".join(lines) + "\n")
    status = summarize(record, [Attempt(JOB_ID, "COMPLETED", "n[1,3]", "t", "t", "0:0")], [])
    spare, hang = status.in_allocation
    assert (spare.cause, spare.round, spare.nodes, spare.detail) == ("node failure", 1, ("n2",), "n2 -> spare n3")
    assert (hang.cause, hang.round, hang.kind) == ("hang", 2, "hang") and "after step 17" in hang.detail
    assert status.failed_nodes == ("n2",), "resume --exclude-failed keeps off a node lost inside the allocation"
    assert status.to_json()["restarts_in_allocation"][0]["round"] == 1 and status.failure is None


def test_a_round_that_crashed_names_its_first_failed_tasks_code_and_error_not_srun_status(tmp_path: Path) -> None:
    # A script's rank 0 raised; srun stopped rank 1 (143) and exits with the highest code.
    record = JobRecord(job_id=JOB_ID, spec=_spec(tmp_path, 3), submitted_at=0.0)
    Path(record.spec.output.log_dir).mkdir(parents=True)
    restart = p.format_attempt_marker("restart", 0, JOB_ID, "round=1 cause=crash exit=143 in_row=1 action=restart-in-allocation", "t")
    restart2 = p.format_attempt_marker("restart", 0, JOB_ID, "round=2 cause=crash exit=143 in_row=2 action=restart-in-allocation", "t")
    start = p.format_attempt_marker("start", 0, JOB_ID, "nodes=n[1-2] host=n1", "t")
    record.log_paths[0].write_text("\n".join([start, restart, restart2]) + "\n")
    record.log_paths[1].write_text("\n".join([
        start,
        "0: Traceback (most recent call last):", "0: ValueError: batch 7 has no tokens",
        "srun: error: n1: task 0: Exited with exit code 1", "srun: error: n2: task 1: Exited with exit code 143",
        restart,
        "1: RuntimeError: Connection reset by peer", "srun: error: n2: task 1: Exited with exit code 3",
        restart2,
    ]) + "\n")
    status = summarize(record, [Attempt(JOB_ID, "RUNNING", "n[1-2]", "t", "Unknown", "0:0")], [], queue_state="RUNNING")
    first, second = status.in_allocation
    assert (first.cause, first.round, first.detail) == ("crash", 1, "exit 1: ValueError: batch 7 has no tokens")
    assert (second.cause, second.round, second.detail) == ("crash", 2, "exit 3: RuntimeError: Connection reset by peer")


def test_a_lost_node_with_the_budget_spent_ends_the_job_as_a_restart_limit(tmp_path: Path) -> None:
    earlier = Attempt(JOB_ID, "REQUEUED", "n1", "t", "t", "0:0")
    failure = _third_attempt_failure(tmp_path, "exit=1 cause=node-failure nodes=n2 failures=2 round=0 action=exit", earlier)
    assert failure is not None and failure.cause == "restart limit"
    assert failure.detail == "2 attempts in a row without a new checkpoint, 1 allowed; last: node failure (n2)"
