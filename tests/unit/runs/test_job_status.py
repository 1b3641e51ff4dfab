"""Why a job restarted, from sacct attempts, node events, the script's markers and the
trainer's metrics - all pure, no Slurm. Each test runs twice: with the supervisor's decisions
in the log's markers (a job from before the decision records), and in its decision records."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints
from hyperlaunch.core.trainer_failures import (
    TRAINER_FAILURE_FILE_ENV,
    FailureKind,
    trainer_failure_path,
    write_trainer_failure,
)
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.runs import job_status
from hyperlaunch.runs.job_status import summarize
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.runs.restart_causes import Restart
from hyperlaunch.slurm import accounting as slurm_accounting
from hyperlaunch.slurm import queue as slurm_queue
from hyperlaunch.slurm import runner as slurm_runner
from hyperlaunch.slurm.accounting import Attempt, NodeEvent
from tests.support.decision_logs import told_by_decision_records


@pytest.fixture(autouse=True, params=["markers", "decision records"])
def told_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where `summarize` reads the supervisor's decisions: the log's markers, or its records."""
    if request.param == "decision records":

        def from_records(record: JobRecord, *args: object, **kwargs: object) -> job_status.JobStatus:
            with told_by_decision_records(record):
                return job_status.summarize(record, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(sys.modules[__name__], "summarize", from_records)
    return str(request.param)


@pytest.fixture()
def record(tmp_path: Path) -> JobRecord:
    spec = job_spec(
        model="qwen3_tiny",
        nodes=2,
        checkpoint_dir=str(tmp_path / "ckpt"),
        log_dir=str(tmp_path / "logs"),
        run_dir=str(tmp_path / "run"),
        time="10:00",
        signal_seconds=60,
    )
    (tmp_path / "logs").mkdir()
    return JobRecord(job_id="7", spec=spec, submitted_at=0.0)


def _attempt(state: str, nodes: str = "node[1-2]", start: str = "2026-01-01T00:00:00", end: str = "2026-01-01T00:01:00", elapsed: int = 60, limit: int | None = 600, exit_code: str = "0:0") -> Attempt:
    return Attempt("7", state, nodes, start, end, exit_code, elapsed, limit)


def _log(record: JobRecord, out: str = "", err: str = "") -> None:
    out_path, err_path = record.log_paths
    out_path.write_text(out)
    err_path.write_text(err)


def test_node_failure_names_the_node_that_went_down_during_the_attempt(record: JobRecord) -> None:
    events = [
        NodeEvent("node2", "2026-01-01T00:00:40", "2026-01-01T00:02:00", "DOWN", "Not responding"),
        NodeEvent("node1", "2025-12-31T00:00:00", "2025-12-31T00:01:00", "DOWN", "earlier, unrelated"),
        NodeEvent("node9", "2026-01-01T00:00:40", "", "DOWN", "not in this job"),
    ]
    status = summarize(record, [_attempt("NODE_FAIL"), _attempt("RUNNING", "node[1,3]", end="Unknown")], events)
    assert status.state == "RUNNING"
    assert [r.describe() for r in status.restarts] == ["node failure (node2)"]
    assert status.failed_nodes == ("node2",)
    assert status.failure is None


def test_a_crash_shows_exit_code_and_the_root_error_line(record: JobRecord) -> None:
    _log(
        record,
        out="### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time=t\n"
        "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=crash action=requeue time=t\n",
        err="[rank1]: Traceback (most recent call last):\n[rank1]: RuntimeError: injected failure on rank 1\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
    )
    status = summarize(record, [_attempt("REQUEUED"), _attempt("COMPLETED")], [])
    (restart,) = status.restarts
    assert restart.cause == "crash"
    assert restart.detail == "exit 1: [rank1]: RuntimeError: injected failure on rank 1"


def test_save_signal_near_the_limit_is_a_time_limit_and_early_one_a_preemption(record: JobRecord) -> None:
    _log(
        record,
        out="### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=time-limit action=requeue time=t\n"
        "### hyperlaunch attempt-end restart=1 job=7 exit=1 cause=time-limit action=requeue time=t\n"
        "### hyperlaunch attempt-end restart=2 job=7 exit=75 cause=requeue-requested action=requeue time=t\n",
    )
    attempts = [_attempt("REQUEUED", elapsed=545), _attempt("REQUEUED", elapsed=100), _attempt("REQUEUED"), _attempt("RUNNING")]
    causes = [r.cause for r in summarize(record, attempts, []).restarts]
    assert causes == ["time limit", "preemption", "preemption"]


def test_slurm_states_map_to_causes_and_a_failed_end_is_reported(record: JobRecord) -> None:
    attempts = [_attempt("PREEMPTED"), _attempt("TIMEOUT"), _attempt("REQUEUED"), _attempt("FAILED", exit_code="1:0")]
    status = summarize(record, attempts, [])
    assert [r.cause for r in status.restarts] == ["preemption", "time limit", "requeued"]
    assert status.state == "FAILED"
    assert status.failure is not None and status.failure.cause == "crash" and status.failure.detail.startswith("exit 1")


def test_progress_comes_from_metrics_and_the_pointer(record: JobRecord) -> None:
    run = Path(record.spec.output.run_dir)
    run.mkdir()
    lines = [
        {"type": "event", "event": "resumed", "step": 10},
        {"type": "step", "step": 11, "loss": 2.5, "tokens_per_s": 100.0},
        {"type": "step", "step": 12, "loss": 2.25, "tokens_per_s": 120.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"type": "st')
    ckpt = Path(record.spec.output.checkpoint_dir) / "qwen3_tiny-10steps"
    ckpt.mkdir(parents=True)
    (ckpt / checkpoints.METADATA_FILE).write_text("")
    checkpoints.write_pointer(Path(record.spec.output.checkpoint_dir), "qwen3_tiny", "qwen3_tiny-10steps")
    status = summarize(record, [_attempt("RUNNING")], [])
    p = status.progress
    assert (p.last_step, p.last_loss, p.tokens_per_s, p.checkpoint_step) == (12, 2.25, 120.0, 10)
    assert p.resumed_from_steps == (10,)
    doc = json.loads(json.dumps(status.to_json()))
    assert doc["checkpoint_step"] == 10 and doc["state"] == "RUNNING"


def test_a_job_sacct_does_not_know_yet_is_unknown(record: JobRecord) -> None:
    status = summarize(record, [], [])
    assert status.state == "UNKNOWN" and status.restarts == () and status.progress.last_step is None


def test_restart_limit_fails_the_job_naming_the_last_failure(record: JobRecord) -> None:
    _log(record, out="### hyperlaunch attempt-end restart=2 job=7 exit=1 cause=restart-limit action=exit time=t\n")
    events = [NodeEvent("node2", "2026-01-01T00:00:30", "", "DOWN", "Not responding"), NodeEvent("node3", "2026-01-01T00:00:30", "", "DOWN", "x")]
    attempts = [_attempt("NODE_FAIL", "node[1-2]"), _attempt("NODE_FAIL", "node[1,3]"), _attempt("FAILED", "node[1-2]", exit_code="1:0")]
    status = summarize(record.__class__(job_id="7", spec=record.spec.replace(max_restarts=1), submitted_at=0.0), attempts, events)
    assert status.state == "FAILED"
    assert status.failure is not None
    assert status.failure.describe() == "restart limit (1 restart(s) allowed; last: node failure (node3))"
    assert status.failed_nodes == ("node2", "node3")


def test_each_job_sees_only_its_own_metrics_in_a_shared_run_dir(record: JobRecord) -> None:
    run = Path(record.spec.output.run_dir)
    run.mkdir()
    lines = [
        {"type": "step", "step": 5, "loss": 3.0, "job_id": "6"},
        {"type": "step", "step": 6, "loss": 2.0, "job_id": "7"},
        {"type": "step", "step": 9, "loss": 1.0, "job_id": "8"},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    status = summarize(record, [_attempt("COMPLETED")], [])
    assert status.progress.last_step == 6 and [s.step for s in status.steps] == [6]


def test_a_shared_metrics_file_is_parsed_once_for_all_its_jobs_and_again_once_it_grows(
    record: JobRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `status` of 24 jobs resuming one training parsed the whole file 24 times (8 s here).
    from hyperlaunch.core import metrics_reader

    run = Path(record.spec.output.run_dir)
    run.mkdir()
    lines = [{"type": "step", "step": step, "loss": 1.0, "job_id": str(6 + step % 3)} for step in range(1, 31)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    parsed: list[str] = []
    real = metrics_reader.parse_metrics_line
    monkeypatch.setattr(metrics_reader, "parse_metrics_line", lambda line: parsed.append(line) or real(line))
    jobs = [JobRecord(job_id=str(job), spec=record.spec, submitted_at=0.0) for job in (6, 7, 8)]
    assert [len(summarize(job, [_attempt("COMPLETED")], []).steps) for job in jobs] == [10, 10, 10]
    assert len(parsed) == 30
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps({"type": "step", "step": 31, "loss": 0.5, "job_id": "7"}) + "\n")
    assert summarize(jobs[1], [_attempt("COMPLETED")], []).progress.last_step == 31
    assert len(parsed) == 61


def test_a_final_export_that_failed_is_said_until_one_succeeds(record: JobRecord) -> None:
    from rich.console import Console

    from hyperlaunch.cli._status_detail import detail as _detail

    run = Path(record.spec.output.run_dir)
    run.mkdir()
    failed = {"type": "event", "event": "export_failed", "message": "no room for the export of qwen3_tiny-40steps", "job_id": "7"}
    (run / "metrics.jsonl").write_text(json.dumps(failed) + "\n")
    status = summarize(record, [_attempt("COMPLETED")], [])
    console = Console(width=300, record=True)
    for line in _detail(status):
        console.print(line)
    assert "  export:     not written, the training is saved: no room for the export of qwen3_tiny-40steps" in console.export_text()
    assert status.to_json()["export_error"] == "no room for the export of qwen3_tiny-40steps"
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps({"type": "event", "event": "exported", "message": "m", "job_id": "7"}) + "\n")
    assert summarize(record, [_attempt("COMPLETED")], []).to_json()["export_error"] is None


def test_a_job_shows_the_last_checkpoint_it_completed_not_a_later_jobs_pointer(record: JobRecord) -> None:
    # Job 8 resumed job 7's training in the same folders and moved the pointer on to step 60.
    ckpt, run = Path(record.spec.output.checkpoint_dir), Path(record.spec.output.run_dir)
    for step in (10, 20, 60):
        (ckpt / f"qwen3_tiny-{step}steps").mkdir(parents=True)
        (ckpt / f"qwen3_tiny-{step}steps" / checkpoints.METADATA_FILE).write_bytes(b"")
    checkpoints.write_pointer(ckpt, "qwen3_tiny", "qwen3_tiny-60steps")
    run.mkdir()
    lines = [
        {"type": "event", "event": "checkpoint_completed", "step": step, "path": str(ckpt / f"qwen3_tiny-{step}steps"), "job_id": job}
        for step, job in ((10, "7"), (20, "7"), (60, "8"))
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    status = summarize(record, [_attempt("FAILED", exit_code="1:0")], [])
    assert (status.progress.checkpoint, status.progress.checkpoint_step) == ("qwen3_tiny-20steps", 20)
    later = summarize(JobRecord(job_id="8", spec=record.spec, submitted_at=0.0), [_attempt("COMPLETED")], [])
    assert (later.progress.checkpoint, later.progress.checkpoint_step) == ("qwen3_tiny-60steps", 60)
    # A job that trained and completed none shows the pointer, as before (the checkpoint it
    # resumed from, or would); one that never trained (its trainer could not start) shows none.
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps({"type": "step", "step": 61, "loss": 1.0, "job_id": "9"}) + "\n")
    none_saved = summarize(JobRecord(job_id="9", spec=record.spec, submitted_at=0.0), [_attempt("FAILED")], [])
    assert none_saved.progress.checkpoint_step == 60
    never_ran = summarize(JobRecord(job_id="3", spec=record.spec, submitted_at=0.0), [_attempt("FAILED")], [])
    assert (never_ran.progress.checkpoint, never_ran.progress.checkpoint_step) == (None, None)


def test_a_job_back_in_the_queue_is_active_and_its_last_attempt_counts_as_a_restart(record: JobRecord) -> None:
    # Right after a node failure sacct's newest record reads NODE_FAIL; squeue knows better.
    status = summarize(record, [_attempt("NODE_FAIL")], [], queue_state="PENDING")
    assert status.state == "PENDING" and status.active and status.failure is None
    assert [r.cause for r in status.restarts] == ["node failure"]


def test_the_root_cause_is_the_first_rank_exception_of_that_attempt(record: JobRecord) -> None:
    _log(
        record,
        out="### hyperlaunch attempt-end restart=1 job=7 exit=143 cause=crash action=requeue time=t\n",
        err="### hyperlaunch attempt-start restart=0 job=7 nodes=n host=h time=t\n"
        "1: [rank1]: ValueError: from the first attempt\n"
        "### hyperlaunch attempt-start restart=1 job=7 nodes=n host=h time=t\n"
        "1: [rank1]:     raise RuntimeError(f'injected failure')\n"
        "1: [rank1]: RuntimeError: injected failure at step 8 on rank 1\n"
        "0: [rank0]: RuntimeError: [gloo/pair.cc:553] Connection closed by peer [127.0.0.1]:10164\n"
        "1: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "srun: error: node6: task 1: Exited with exit code 1\n"
        "slurmstepd-node5: error: *** JOB 3 ON node5 CANCELLED AT 2026 DUE TO JOB REQUEUE ***\n",
    )
    status = summarize(record, [_attempt("COMPLETED"), _attempt("REQUEUED"), _attempt("RUNNING")], [])
    crash = status.restarts[1]
    assert crash.describe() == "crash (exit 1: [rank1]: RuntimeError: injected failure at step 8 on rank 1)"


def test_a_node_failure_the_script_saw_names_the_node_from_its_marker(record: JobRecord) -> None:
    _log(record, out="### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=node-failure nodes=node2 action=slurm-requeue time=t\n")
    status = summarize(record, [_attempt("REQUEUED"), _attempt("RUNNING")], [])
    assert status.restarts[0].describe() == "node failure (node2)"


def test_the_status_list_is_plain_aligned_columns(record: JobRecord) -> None:
    from hyperlaunch.cli._status_table import table as _table

    events = [NodeEvent(node="node2", start="2026-01-01T00:00:30", end="Unknown", state="DOWN", reason="Not responding")]
    failed = summarize(record, [_attempt("NODE_FAIL"), _attempt("COMPLETED", "node[1,3]")], events)
    fresh = summarize(record.__class__(job_id="1234", spec=record.spec, submitted_at=0.0), [_attempt("PENDING", "None")], [])
    header, first, second = _table([failed, fresh]).splitlines()
    assert header.split() == ["JOB", "MODEL", "NODES", "STATE", "RESTARTS", "BUDGET", "NODELIST", "CKPT", "STEP", "LOSS", "TOK/S", "ELAPSED"]
    assert "1: node failure (node2)" in first and second.startswith("1234 ")
    for column in ("MODEL", "STATE", "RESTARTS"):
        assert first[header.index(column) - 1] == " " and second[header.index(column) - 1] == " "
    # Many restarts: how many and the last cause, not every cause (`status JOB` lists them).
    import dataclasses

    from hyperlaunch.cli._status_cells import restarts_cell as _restarts_cell

    assert _restarts_cell(dataclasses.replace(failed, restarts=failed.restarts * 14)) == "14, last: node failure (node2)"


def test_a_node_two_attempts_ran_on_fails_in_the_second_and_counts_for_it_alone(record: JobRecord) -> None:
    # Attempt 0 on node[2-3] loses node3; attempt 1 reuses node2 and loses it 30 s after
    # attempt 0 ended, inside the slack that lets a late DOWN event count for attempt 0.
    events = [
        NodeEvent("node3", "2026-01-01T00:00:50", "Unknown", "DOWN", "Not responding"),
        NodeEvent("node2", "2026-01-01T00:01:30", "Unknown", "DOWN", "Not responding"),
    ]
    attempts = [
        _attempt("NODE_FAIL", "node[2-3]"),
        _attempt("NODE_FAIL", "node[2,6]", start="2026-01-01T00:01:10", end="2026-01-01T00:01:40"),
        _attempt("RUNNING", "node[4,6]", start="2026-01-01T00:02:00", end="Unknown"),
    ]
    status = summarize(record, attempts, events)
    assert [(r.cause, r.nodes) for r in status.restarts] == [("node failure", ("node3",)), ("node failure", ("node2",))]


_SRUN_END = (
    "srun: error: node1: task 0: Terminated\n"
    "srun: error: node2: task 1: Exited with exit code 1\n"
)


def _trainer_recorded(record: JobRecord, kind: FailureKind, message: str) -> None:
    """The failure record rank 1 of job 7's first attempt writes."""
    run = Path(record.spec.output.run_dir)
    run.mkdir()
    write_trainer_failure(kind, message, 1, {TRAINER_FAILURE_FILE_ENV: str(trainer_failure_path(run, "7", 0))})



def test_a_job_ended_on_the_same_error_twice_says_so_after_the_line(record: JobRecord) -> None:
    _log(
        record,
        out="### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=trainer-error kind=unexpected repeated=1 round=0 action=exit time=t\n",
        err="### hyperlaunch attempt-start restart=0 job=7 nodes=n host=h time=t\n" + _SRUN_END,
    )
    run = Path(record.spec.output.run_dir)
    run.mkdir()
    where = {TRAINER_FAILURE_FILE_ENV: str(trainer_failure_path(run, "7", 0))}
    write_trainer_failure(FailureKind.UNEXPECTED, "ValueError: bad batch (rank 1)", 1, where, step=8)
    status = summarize(record, [_attempt("FAILED", exit_code="1:0")], [])
    assert status.failure is not None
    assert status.failure.describe() == "trainer error (ValueError: bad batch (rank 1); the same error at step 8 in the round before, so not retried)"

def test_a_trainer_error_shows_the_trainers_line_not_sruns(record: JobRecord) -> None:
    _log(
        record,
        out="### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=trainer-error kind=invalid-data action=exit time=t\n",
        err="### hyperlaunch attempt-start restart=0 job=7 nodes=n host=h time=t\n" + _SRUN_END,
    )
    _trainer_recorded(record, FailureKind.INVALID_DATA, "--data /x/bad.jsonl:2: not valid JSON")
    status = summarize(record, [_attempt("FAILED", exit_code="1:0")], [])
    assert status.failure is not None
    assert status.failure.describe() == "trainer error (--data /x/bad.jsonl:2: not valid JSON)"
    assert json.loads(json.dumps(status.to_json()))["failure"]["kind"] == "invalid-data"


def test_the_list_cuts_a_long_trainer_message_and_the_detail_shows_it_whole(record: JobRecord) -> None:
    from hyperlaunch.cli._status_cells import state_cell as _state_cell

    _log(
        record,
        out="### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=trainer-error kind=disk-full action=exit time=t\n",
        err="### hyperlaunch attempt-start restart=0 job=7 nodes=n host=h time=t\n" + _SRUN_END,
    )
    message = "no room for checkpoint m-600steps: it needs about 6.7 GiB in /fsx/checkpoints, which has 3.1 GiB free (free space there)"
    _trainer_recorded(record, FailureKind.DISK_FULL, message)
    status = summarize(record, [_attempt("FAILED", exit_code="1:0")], [])
    assert _state_cell(status) == "FAILED (trainer error (no room for checkpoint m-600steps: it needs about 6.7 GiB i…))"
    assert _state_cell(status, limit=None) == f"FAILED (trainer error ({message}))"
    assert status.to_json()["failure"]["kind"] == "disk-full"


def test_a_crash_the_trainer_recorded_shows_its_line_and_is_still_a_crash(record: JobRecord) -> None:
    _log(
        record,
        out="### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=crash action=requeue time=t\n",
        err="0: [rank0]: RuntimeError: [gloo/pair.cc:553] Connection closed by peer\n" + _SRUN_END,
    )
    _trainer_recorded(record, FailureKind.UNEXPECTED, "ValueError: boom (rank 1)")
    status = summarize(record, [_attempt("REQUEUED"), _attempt("RUNNING")], [])
    (restart,) = status.restarts
    assert restart.describe() == "crash (exit 1: ValueError: boom (rank 1))"
    assert restart.kind == "unexpected"


@pytest.mark.parametrize(
    ("worker_exit", "detail"),
    [("3", "exit 3"), ("-9", "killed by SIGKILL"), ("-11", "killed by SIGSEGV")],
)
def test_a_script_that_exits_without_a_word_shows_its_own_exit_code(record: JobRecord, worker_exit: str, detail: str) -> None:
    """`sys.exit(3)` showed as `exit 1: srun: error: node1: task 0: Exited with exit code 1`:
    torchrun exits 1 whatever its worker's code, srun reports that, and its line says no more."""
    failure = _crashed(
        record,
        f"0: E1127 09:00:29.610000 7340 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {worker_exit})"
        " local_rank: 0 (pid: 7343) of binary: /venv/bin/python\n"
        f"0:   exitcode  : {worker_exit} (pid: 7343)\n",
    )
    assert failure.detail == detail


def test_a_worker_stopped_because_another_failed_does_not_hide_the_failures_own_code(record: JobRecord) -> None:
    failure = _crashed(record, "0:   exitcode  : -15 (pid: 11)\n1: [rank1]: RuntimeError: boom\n1:   exitcode  : 2 (pid: 12)\n")
    assert failure.detail == "exit 2: [rank1]: RuntimeError: boom"


def test_without_a_record_the_trainers_error_line_beats_sruns(record: JobRecord) -> None:
    # A trainer older than the failure record, or a run dir status cannot read.
    failure = _crashed(record, "0: hyperlaunch.train: error: --data /x/bad.jsonl:2: not valid JSON\n")
    assert failure.detail == "exit 1: hyperlaunch.train: error: --data /x/bad.jsonl:2: not valid JSON"
    assert failure.kind == ""


def _crashed(record: JobRecord, err: str) -> Restart:
    """The failure status reads from an attempt that crashed (no trainer record) with `err`
    on its error log, before srun's lines."""
    _log(record, out="### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=crash action=exit time=t\n", err=err + _SRUN_END)
    status = summarize(record, [_attempt("FAILED", exit_code="1:0")], [])
    assert status.failure is not None
    return status.failure


def _utc_marker_time(local: str) -> str:
    """A marker's time (the script writes `date -u`) for a local sacct time."""
    return datetime.fromisoformat(local).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_resized_record_and_the_one_after_it_are_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # A node given back (a spare takes its place): sacct closes the record of the job's
    # earlier size (RESIZING) and opens one at the new size; the same run goes on.
    sacct = (
        "7|RESIZING|node[1-2]|2026-01-01T00:00:00|2026-01-01T00:00:30|0:0|30|10\n"
        "7|RUNNING|node[1,3]|2026-01-01T00:00:30|Unknown|0:0|20|10\n"
    )
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, sacct, ""))
    (attempt,) = slurm_accounting.job_attempts(["7"])["7"]
    assert (attempt.state, attempt.node_list, attempt.start, attempt.elapsed_s) == ("RUNNING", "node[1,3]", "2026-01-01T00:00:00", 50)


def test_a_requeue_after_giving_a_node_back_is_a_second_attempt_though_sacct_keeps_one_record(record: JobRecord) -> None:
    # What Slurm 22.05 records for a job whose script gave a lost node back and requeued: the
    # record of the smaller size (after RESIZING, merged by job_attempts) goes on for the next
    # run, with the resize's start and node list. The log's start markers tell the runs apart.
    start0, resized, start1, _end1 = "2026-01-01T00:00:00", "2026-01-01T00:00:29", "2026-01-01T00:00:44", "2026-01-01T00:01:22"
    _log(
        record,
        out=f"### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time={_utc_marker_time(start0)}\n"
        f"### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=node-failure nodes=node2 failures=0 round=0 action=requeue time={_utc_marker_time(resized)}\n"
        f"### hyperlaunch attempt-start restart=1 job=7 nodes=node[3-4] host=h time={_utc_marker_time(start1)}\n",
    )
    merged = _attempt("RUNNING", "node1", start=start0, end="Unknown", elapsed=67)
    status = summarize(record, [merged], [], queue_state="RUNNING")
    first, second = status.attempts
    assert (first.state, first.node_list, first.start, first.end, first.elapsed_s) == ("REQUEUED", "node[1-2]", start0, resized, 29)
    assert (second.state, second.node_list, second.start, second.elapsed_s) == ("RUNNING", "node[3-4]", start1, 23)
    assert [r.describe() for r in status.restarts] == ["node failure (node2)"]
    assert status.nodes == "node[3-4]" and status.failed_nodes == ("node2",)


def test_the_run_after_a_requeue_that_gave_a_node_back_runs_while_its_record_still_reads_requeued(
    record: JobRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the dev cluster's Slurm records until that run ends: the resize (RESIZING), then one
    # record the requeue closed (REQUEUED, 0 s, node1 left), not reopened when the job ran again.
    # status showed the running attempt REQUEUED, ending 9 s before it started, 0 s long.
    sacct = (
        "7|RESIZING|node[1-2]|2026-01-01T00:00:00|2026-01-01T00:00:08|0:0|8|UNLIMITED\n"
        "7|REQUEUED|node1|2026-01-01T00:00:08|2026-01-01T00:00:08|0:0|0|UNLIMITED\n"
    )
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, sacct, ""))
    t = _utc_marker_time
    _log(record, out=_node_lost(0, "node2", "2026-01-01T00:00:00", "2026-01-01T00:00:08")
         + f"### hyperlaunch attempt-start restart=1 job=7 nodes=node[3-4] host=h time={t('2026-01-01T00:00:17')}\n")
    now = datetime.fromisoformat("2026-01-01T00:01:17")
    status = summarize(record, slurm_accounting.job_attempts(["7"])["7"], [], queue_state="RUNNING", now=now)
    first, second = status.attempts
    assert (first.state, first.node_list, first.end, first.elapsed_s) == ("REQUEUED", "node[1-2]", "2026-01-01T00:00:08", 8)
    assert (second.state, second.node_list, second.start, second.end, second.elapsed_s) == (
        "RUNNING", "node[3-4]", "2026-01-01T00:00:17", "Unknown", 60,
    )
    assert [r.describe() for r in status.restarts] == ["node failure (node2)"]
    assert status.state == "RUNNING" and status.elapsed_s == 68 and status.nodes == "node[3-4]"
    from rich.console import Console

    from hyperlaunch.cli._status_detail import detail as _detail

    console = Console(width=200, record=True)
    for line in _detail(status):
        console.print(line)
    (row,) = [line.split() for line in console.export_text().splitlines() if line.split()[:2] == ["1", "RUNNING"]]
    assert row[3:] == ["2026-01-01T00:00:17", "-", "0:01:00", "-"], "no sacct 'Unknown' for its end"
    # Back in the queue before that run: the run it was requeued from ended, for a node failure,
    # and the job is on no node (it showed no restart and the lost node in NODELIST).
    _log(record, out=_node_lost(0, "node2", "2026-01-01T00:00:00", "2026-01-01T00:00:08"))
    pending = summarize(record, slurm_accounting.job_attempts(["7"])["7"], [], queue_state="PENDING", now=now)
    assert [a.state for a in pending.attempts] == ["REQUEUED"] and pending.elapsed_s == 8
    assert [r.describe() for r in pending.restarts] == ["node failure (node2)"] and pending.failure is None
    assert pending.state == "PENDING" and pending.nodes == ""


def test_start_markers_of_an_earlier_job_with_the_same_id_add_no_attempts(record: JobRecord) -> None:
    _log(record, out=f"### hyperlaunch attempt-start restart=1 job=7 nodes=node9 host=h time={_utc_marker_time('2025-06-01T00:00:00')}\n")
    status = summarize(record, [_attempt("RUNNING", end="Unknown")], [], queue_state="RUNNING")
    assert len(status.attempts) == 1 and status.nodes == "node[1-2]"


def test_the_loss_sparkline_is_at_most_40_cells_from_lowest_to_highest() -> None:
    from hyperlaunch.cli._status_detail import sparkline

    falling = sparkline([1000.0 - i for i in range(1000)])
    assert len(falling) == 40 and falling[0] == "█" and falling[-1] == "▁"
    assert list(falling) == sorted(falling, reverse=True)
    assert sparkline([2.0, 2.0, 2.0]) == "▄▄▄" and sparkline([]) == ""


def test_the_detail_says_a_run_without_checkpoints_keeps_none(record: JobRecord) -> None:
    import dataclasses

    from hyperlaunch.cli._status_detail import detail as _detail

    def checkpoint_line(rec: JobRecord) -> str:
        status = summarize(rec, [_attempt("COMPLETED")], [])
        return next(str(line) for line in _detail(status) if str(line).startswith("  checkpoint:"))

    ckpt = Path(record.spec.output.checkpoint_dir)
    (ckpt / "qwen3_tiny-40steps").mkdir(parents=True)
    (ckpt / "qwen3_tiny-40steps" / checkpoints.METADATA_FILE).write_bytes(b"")
    checkpoints.write_pointer(ckpt, "qwen3_tiny", "qwen3_tiny-40steps")  # another run's
    assert checkpoint_line(record) == f"  checkpoint: qwen3_tiny-40steps in {record.spec.output.checkpoint_dir}"
    bench = dataclasses.replace(record, spec=record.spec.replace(trainer_args=("--no-checkpoints",)))
    assert checkpoint_line(bench) == "  checkpoint: none kept (--no-checkpoints)"
    assert summarize(bench, [_attempt("COMPLETED")], []).to_json()["checkpoint"] is None


def _node_lost(restart: int, node: str, start: str, end: str) -> str:
    """What the script logs for an attempt the supervisor requeued after losing `node`."""
    return (
        f"### hyperlaunch attempt-start restart={restart} job=7 nodes=node[1-2] host=h time={_utc_marker_time(start)}\n"
        f"### hyperlaunch attempt-end restart={restart} job=7 exit=1 cause=node-failure nodes={node} failures=0 round=0 action=requeue time={_utc_marker_time(end)}\n"
    )


def test_a_restart_count_slurm_skipped_names_each_attempt_by_the_count_it_ran_under(record: JobRecord) -> None:
    # The second node loss was counted twice (the script's requeue and Slurm's own): the third
    # attempt ran as restart 3. Each sacct row is matched to its run by its start marker.
    windows = [("00:00:00", "00:01:00"), ("00:01:10", "00:02:00"), ("00:02:10", "00:03:00"), ("00:03:10", "Unknown")]
    times = [(f"2026-01-01T{a}", f"2026-01-01T{b}" if b != "Unknown" else b) for a, b in windows]
    _log(
        record,
        out=_node_lost(0, "node2", *times[0]) + _node_lost(1, "node3", *times[1]) + _node_lost(3, "node4", *times[2])
        + f"### hyperlaunch attempt-start restart=4 job=7 nodes=node[1-2] host=h time={_utc_marker_time(times[3][0])}\n",
    )
    attempts = [_attempt("REQUEUED", start=a, end=b) for a, b in times[:3]] + [_attempt("RUNNING", start=times[3][0], end="Unknown")]
    status = summarize(record, attempts, [], queue_state="RUNNING")
    assert [a.restart for a in status.attempts] == [0, 1, 3, 4]
    assert [(r.attempt, r.describe()) for r in status.restarts] == [
        (0, "node failure (node2)"), (1, "node failure (node3)"), (3, "node failure (node4)"),
    ]
    assert status.failed_nodes == ("node2", "node3", "node4")
    assert [a["restart"] for a in status.to_json()["attempts"]] == [0, 1, 3, 4]

    from rich.console import Console

    from hyperlaunch.cli._status_detail import detail as _detail

    console = Console(width=200, record=True)
    for line in _detail(status):
        console.print(line)
    rows = [line.split() for line in console.export_text().splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    assert [(row[0], row[-1]) for row in rows] == [("0", "(node2)"), ("1", "(node3)"), ("3", "(node4)"), ("4", "-")]


def test_records_slurm_starts_at_each_resize_still_take_their_runs_markers_in_order(record: JobRecord, monkeypatch: pytest.MonkeyPatch) -> None:
    # What Slurm 22.05 recorded for three lost nodes, each given back before the requeue: after
    # the first resize, each record starts when its run was resized (not when it started), and
    # the last one goes on for the next run.
    sacct = (
        "7|RESIZING|node[1-2]|2026-01-01T00:00:00|2026-01-01T00:00:09|0:0|9|UNLIMITED\n"
        "7|REQUEUED|node1|2026-01-01T00:00:09|2026-01-01T00:00:09|0:0|0|UNLIMITED\n"
        "7|REQUEUED|node3|2026-01-01T00:00:28|2026-01-01T00:00:28|0:0|0|UNLIMITED\n"
        "7|COMPLETED|node5|2026-01-01T00:00:51|2026-01-01T00:01:09|0:0|18|UNLIMITED\n"
    )
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, sacct, ""))
    runs = [("00:00:00", "00:00:09", "node[1-2]", "node2"), ("00:00:17", "00:00:28", "node[3-4]", "node4"), ("00:00:37", "00:00:51", "node[5-6]", "node6")]
    lines = [
        f"### hyperlaunch attempt-start restart={n} job=7 nodes={nodes} host=h time={_utc_marker_time('2026-01-01T' + a)}\n"
        f"### hyperlaunch attempt-end restart={n} job=7 exit=1 cause=node-failure nodes={lost} failures=0 round=0 action=requeue time={_utc_marker_time('2026-01-01T' + b)}\n"
        for n, (a, b, nodes, lost) in enumerate(runs)
    ]
    lines.append(f"### hyperlaunch attempt-start restart=3 job=7 nodes=node[7-8] host=h time={_utc_marker_time('2026-01-01T00:00:57')}\n")
    _log(record, out="".join(lines))
    status = summarize(record, slurm_accounting.job_attempts(["7"])["7"], [])
    assert [(a.restart, a.state) for a in status.attempts] == [(0, "REQUEUED"), (1, "REQUEUED"), (2, "REQUEUED"), (3, "COMPLETED")]
    # Each run as it ran: from its start marker, on the nodes it started on, until it ended.
    assert [(a.node_list, a.start[-8:], a.end[-8:], a.elapsed_s) for a in status.attempts] == [
        ("node[1-2]", "00:00:00", "00:00:09", 9),
        ("node[3-4]", "00:00:17", "00:00:28", 11),
        ("node[5-6]", "00:00:37", "00:00:51", 14),
        ("node[7-8]", "00:00:57", "00:01:09", 12),
    ]
    assert status.nodes == "node[7-8]" and status.elapsed_s == 46
    assert [r.describe() for r in status.restarts] == ["node failure (node2)", "node failure (node4)", "node failure (node6)"]
    assert status.failure is None and status.state == "COMPLETED"


def test_a_run_that_died_before_writing_its_marker_leaves_the_next_marker_to_the_next_run(record: JobRecord) -> None:
    t = _utc_marker_time
    _log(
        record,
        out=f"### hyperlaunch attempt-start restart=1 job=7 nodes=node[3-4] host=h time={t('2026-01-01T01:00:02')}\n"
        f"### hyperlaunch attempt-end restart=1 job=7 exit=1 cause=crash failures=1 round=0 action=requeue time={t('2026-01-01T02:00:00')}\n"
        f"### hyperlaunch attempt-start restart=2 job=7 nodes=node[5-6] host=h time={t('2026-01-01T03:00:01')}\n",
    )
    attempts = [
        _attempt("NODE_FAIL", "node[1-2]", start="2026-01-01T00:00:00", end="2026-01-01T00:00:05"),
        _attempt("REQUEUED", "node[3-4]", start="2026-01-01T01:00:00", end="2026-01-01T02:00:00"),
        _attempt("RUNNING", "node[5-6]", start="2026-01-01T03:00:00", end="Unknown"),
    ]
    status = summarize(record, attempts, [], queue_state="RUNNING")
    assert [(a.restart, a.node_list) for a in status.attempts] == [(0, "node[1-2]"), (1, "node[3-4]"), (2, "node[5-6]")]
    assert [r.cause for r in status.restarts] == ["node failure", "crash"]


def test_the_first_runs_own_marker_survives_a_batch_host_clock_a_little_behind(record: JobRecord) -> None:
    t = _utc_marker_time
    _log(
        record,
        out=f"### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time={t('2025-12-31T23:59:50')}\n"
        f"### hyperlaunch attempt-start restart=1 job=7 nodes=node[1-2] host=h time={t('2026-01-01T00:01:50')}\n",
    )
    attempts = [_attempt("REQUEUED"), _attempt("RUNNING", start="2026-01-01T00:02:00", end="Unknown")]
    assert [a.restart for a in summarize(record, attempts, [], queue_state="RUNNING").attempts] == [0, 1]


def test_the_budget_counts_by_restart_count_as_the_supervisor_does(record: JobRecord) -> None:
    from hyperlaunch.core.protocol import progress_path

    t = _utc_marker_time
    _log(record, out="".join(
        f"### hyperlaunch attempt-start restart={n} job=7 nodes=node[1-2] host=h time={t(f'2026-01-01T00:0{i}:01')}\n"
        for i, n in enumerate((0, 1, 3))
    ))
    attempts = [
        _attempt("REQUEUED", start="2026-01-01T00:00:00", end="2026-01-01T00:00:50"),
        _attempt("REQUEUED", start="2026-01-01T00:01:00", end="2026-01-01T00:01:50"),
        _attempt("RUNNING", start="2026-01-01T00:02:00", end="Unknown"),
    ]
    run_dir = Path(record.spec.output.run_dir)
    run_dir.mkdir(parents=True)
    progress_path(run_dir, "7", 3).write_text("")  # the running attempt saved: the budget is whole again
    status = summarize(record, attempts, [], queue_state="RUNNING")
    assert status.budget is not None and (status.budget.windows, status.budget.failures) == (3, 0)


def test_a_pending_job_says_why_slurm_holds_it(record: JobRecord, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from hyperlaunch.cli._status_cells import state_cell as _state_cell
    from hyperlaunch.cli._status_detail import detail as _detail

    squeue = "7|7|PENDING|PartitionNodeLimit\n8|8|RUNNING|None\n9|9|PENDING|ReqNodeNotAvail, UnavailableNodes:node3\n"
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, squeue, ""))
    queued = slurm_queue.my_queue()
    assert queued["7"] == slurm_queue.Queued("PENDING", "PartitionNodeLimit") and queued["8"].reason == ""
    assert queued["9"].reason == "ReqNodeNotAvail, UnavailableNodes:node3"
    assert slurm_queue.my_queue_states()["9"] == "PENDING"
    status = dataclasses.replace(summarize(record, [], [], queue_state="PENDING"), pending_reason="PartitionNodeLimit")
    assert _state_cell(status) == "PENDING (PartitionNodeLimit)"
    assert "  pending:    PartitionNodeLimit (it asks more nodes than the partition has or allows: --nodes plus --spare-nodes)" in [
        str(line) for line in _detail(status)
    ]
    assert status.to_json()["pending_reason"] == "PartitionNodeLimit"


def test_a_jobs_recorded_slurm_conf_that_is_gone_is_not_forced_on_its_queries(tmp_path: Path) -> None:
    # A dev cluster's, removed since: forcing it would fail the whole list ("SLURM_CONF=... is
    # no file") for a user who never set SLURM_CONF.
    from hyperlaunch.runs.status_queries import env_with_conf

    kept = tmp_path / "slurm.conf"
    kept.write_text("")
    assert env_with_conf({"PATH": "/bin"}, str(kept))["SLURM_CONF"] == str(kept)
    assert "SLURM_CONF" not in env_with_conf({"PATH": "/bin"}, str(tmp_path / "gone" / "slurm.conf"))


def test_status_of_a_job_says_its_budget_in_words(record: JobRecord) -> None:
    from hyperlaunch.cli._status_detail import detail as _detail
    from hyperlaunch.core.protocol import progress_path

    t = _utc_marker_time
    _log(record, out="".join(
        f"### hyperlaunch attempt-start restart={n} job=7 nodes=node[1-2] host=h time={t(f'2026-01-01T00:0{n}:01')}\n" for n in (0, 1)
    ))
    attempts = [
        _attempt("REQUEUED", start="2026-01-01T00:00:00", end="2026-01-01T00:00:50"),
        _attempt("RUNNING", start="2026-01-01T00:01:00", end="Unknown"),
    ]

    def budget_line() -> str:
        status = summarize(record, attempts, [], queue_state="RUNNING")
        return next(line for line in _detail(status) if isinstance(line, str) and line.startswith("  restarts:"))

    assert budget_line() == "  restarts:   budget left 2 of 3 (--max-restarts); 2 attempt(s) ran, the last 1 without a new checkpoint"
    run_dir = Path(record.spec.output.run_dir)
    run_dir.mkdir(parents=True)
    progress_path(run_dir, "7", 1).write_text("")
    assert budget_line() == "  restarts:   budget left 3 of 3 (--max-restarts); 2 attempt(s) ran"

    # Requeued and waiting in the queue: the second attempt has not run.
    attempts[1] = _attempt("PENDING", nodes="None assigned", start="Unknown", end="Unknown")
    assert budget_line().endswith("; 1 attempt(s) ran")


def test_a_job_ended_by_a_failure_no_restart_fixes_shows_no_budget(record: JobRecord) -> None:
    """`budget left 2 of 3` under a script error read as if a restart were still to come."""
    from hyperlaunch.cli._status_detail import detail as _detail
    from hyperlaunch.core.trainer_failures import FailureKind, format_trainer_failure, trainer_failure_path

    t = _utc_marker_time
    _log(record, out=(
        f"### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time={t('2026-01-01T00:00:01')}\n"
        f"### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=trainer-error kind=script-broken round=0 action=exit"
        f" time={t('2026-01-01T00:00:04')}\n"
    ))
    run_dir = Path(record.spec.output.run_dir)
    run_dir.mkdir(parents=True)
    record_path = trainer_failure_path(run_dir, "7", 0)
    record_path.write_text(format_trainer_failure(FailureKind.SCRIPT_BROKEN, "ModuleNotFoundError: No module named 'mypkg'", None))
    status = summarize(record, [_attempt("FAILED", start="2026-01-01T00:00:00", end="2026-01-01T00:00:05")], [])
    lines = [line for line in _detail(status) if isinstance(line, str)]
    assert "  restarts:   none: a script error ends the job whatever --max-restarts allows; 1 attempt(s) ran" in lines, lines
    assert status.failure is not None and status.failure.describe() == "script error (ModuleNotFoundError: No module named 'mypkg')"
    from hyperlaunch.cli._status_cells import budget_cell as _budget_cell

    assert _budget_cell(status) == "-", "the table agrees with the detail"


def test_a_script_that_stops_at_its_own_error_shows_that_line_not_sruns(record: JobRecord) -> None:
    from hyperlaunch.core.error_lines import root_error_line

    srun = "srun: error: node1: task 0: Exited with exit code 2"
    usage = ["usage: train.py [-h] [--steps STEPS]", "train.py: error: unrecognized arguments: --stepz 10", srun]
    assert root_error_line(usage) == "train.py: error: unrecognized arguments: --stepz 10"
    assert root_error_line(["/usr/bin/python3: No module named mypkg.trian", srun]) == "/usr/bin/python3: No module named mypkg.trian"
    assert root_error_line(["step 1", srun]) == srun  # nothing of its own: srun's line still says it ended


def test_an_ended_crash_loop_after_a_lost_node_shows_each_attempt_as_its_supervisor_ended_it(record: JobRecord) -> None:
    """The records this Slurm left for a job that gave a lost node back, then crashed three times
    (issue 46): one record closes FAILED but starts with the first run, another stays PENDING
    with no end. status read them as the first attempt FAILED and the last PENDING, ended."""
    sacct = (
        "7|FAILED|node[1,3]|2026-01-01T00:00:00|2026-01-01T00:01:33|15:0|86|10\n"
        "7|PENDING|node[1,3]|2026-01-01T00:00:51|Unknown|0:0|120|10\n"
    )
    t = _utc_marker_time
    marks = [("00:00:00", "00:00:18", "requeue", "node-failure"), ("00:00:26", "00:00:43", "requeue", "crash"),
             ("00:00:52", "00:01:08", "requeue", "crash"), ("00:01:16", "00:01:33", "exit", "crash")]
    _log(record, out="".join(
        f"### hyperlaunch attempt-start restart={n} job=7 nodes={'node[1-2]' if n == 0 else 'node[1,3]'} host=h time={t('2026-01-01T' + start)}\n"
        f"### hyperlaunch attempt-end restart={n} job=7 exit=1 cause={cause} action={action} time={t('2026-01-01T' + end)}\n"
        for n, (start, end, action, cause) in enumerate(marks)
    ))
    rows = []
    for line in sacct.splitlines():
        job, state, nodes, start, end, code, elapsed, limit = line.split("|")
        rows.append(Attempt(job, state, nodes, start, end, code, int(elapsed), int(limit) * 60))
    status = summarize(record, rows, [], queue_state=None)
    assert [(a.state, a.end, a.elapsed_s) for a in status.attempts] == [
        ("REQUEUED", "2026-01-01T00:00:18", 18), ("REQUEUED", "2026-01-01T00:00:43", 17),
        ("REQUEUED", "2026-01-01T00:01:08", 16), ("FAILED", "2026-01-01T00:01:33", 17),
    ]
    assert status.state == "FAILED" and status.elapsed_s == 68
