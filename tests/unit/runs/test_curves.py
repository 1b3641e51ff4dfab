"""The kept curve of a training and where it restarted: pure, from metrics records and the
statuses `status` computes (no Slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core.errors import JobNotFound
from hyperlaunch.core.metrics_records import parse_metrics_line
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs import curves
from hyperlaunch.runs.job_status import summarize
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.slurm.accounting import Attempt


def _spec(tmp_path: Path) -> JobSpec:
    return job_spec(model="qwen3_tiny", checkpoint_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"))


def _step(step: int, loss: float, job: str | None = "7", restart: int = 0, round_: int = 0, time: float = 0.0, **more: object) -> dict[str, object]:
    tags = {"job_id": job, "restart": restart, "round": round_} if job else {}
    return {"type": "step", "step": step, "loss": loss, "time": time or 1000.0 + step, **tags, **more}


def _records(*lines: dict[str, object]) -> list:
    return [parse_metrics_line(json.dumps(line)) for line in lines]


def test_a_step_logged_twice_keeps_the_value_written_last_and_other_jobs_are_left_out() -> None:
    records = _records(
        _step(1, 3.0, tokens_per_s=100.0),
        _step(2, 2.9, tokens_per_s=110.0),
        _step(3, 2.8),  # logged past the checkpoint of step 2, then the attempt failed
        _step(3, 2.5, restart=1, tokens_per_s=120.0),
        _step(4, 9.9, job="99"),  # another training in the same run dir
        {"type": "event", "event": "validation", "step": 2, "val_loss": 3.1, "time": 5.0, "job_id": "7"},
        {"type": "event", "event": "validation", "step": 2, "val_loss": 2.7, "time": 6.0, "job_id": "8"},
        {"type": "event", "event": "validation", "step": 4, "val_loss": "n/a", "job_id": "8"},
        _step(4, 2.4, job="8"),
    )
    kept = curves.kept_curves(records, ["7", "8"])
    assert [(p.step, p.value) for p in kept.loss] == [(1, 3.0), (2, 2.9), (3, 2.5), (4, 2.4)]
    assert [(p.step, p.value) for p in kept.tokens_per_s] == [(1, 100.0), (2, 110.0), (3, 120.0)]
    assert [(p.step, p.value, p.time) for p in kept.val_loss] == [(2, 2.7, 6.0)]


def test_a_file_without_job_tags_is_all_one_training() -> None:
    records = _records(_step(1, 3.0, job=None), _step(1, 2.0, job=None))
    assert [p.value for p in curves.kept_curves(records, ["7"]).loss] == [2.0]


@pytest.fixture()
def record(tmp_path: Path) -> JobRecord:
    (tmp_path / "logs").mkdir()
    return JobRecord(job_id="7", spec=_spec(tmp_path), submitted_at=0.0)


def _attempt(state: str) -> Attempt:
    return Attempt("7", state, "node[1-2]", "2026-01-01T00:00:00", "2026-01-01T00:01:00", "0:0", 60, 600)


def test_markers_sit_at_the_first_step_after_each_restart_with_the_cause_status_gives(record: JobRecord) -> None:
    # Attempt 0: round 0 crashes, round 1 runs on the same nodes; then a node fails and
    # Slurm requeues the job: attempt 1 starts from the checkpoint of step 2.
    record.log_paths[0].write_text(
        "### hyperlaunch attempt-restart restart=0 round=1 cause=crash exit=1 job=7 time=t\n"
        "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=node-failure nodes=node2 action=slurm-requeue time=t\n"
    )
    status = summarize(record, [_attempt("REQUEUED"), _attempt("RUNNING")], [])
    records = _records(
        _step(1, 3.0),
        _step(2, 2.9, round_=1, time=2000.0),
        _step(3, 2.8, round_=1),
        _step(3, 2.6, restart=1, time=3000.0),
    )
    found = curves.training_curves(records, [status])
    assert [(m.kind, m.step, m.time, m.attempt, m.round) for m in found.markers] == [
        ("restart in allocation", 2, 2000.0, 0, 1),
        ("restart", 3, 3000.0, 0, 0),
    ]
    assert [m.cause for m in found.markers] == [r.describe() for r in curves.ordered_restarts(status)]
    assert [m.cause for m in found.markers] == ["crash in allocation (exit 1)", "node failure (node2)"]


def test_a_resume_is_marked_where_the_resuming_job_first_logged(record: JobRecord, tmp_path: Path) -> None:
    first = summarize(record, [_attempt("TIMEOUT")], [])
    resumed = JobRecord(job_id="8", spec=record.spec, submitted_at=1.0, resumed_from="7")
    second = summarize(resumed, [], [])
    records = _records(_step(1, 3.0), _step(2, 2.9), _step(2, 2.7, job="8", time=5000.0))
    found = curves.training_curves(records, [first, second])
    (marker,) = found.markers
    assert (marker.kind, marker.job_id, marker.step, marker.time) == ("resume", "8", 2, 5000.0)
    assert marker.cause == "resume of job 7 after time limit"
    assert found.job_ids == ("7", "8") and [p.value for p in found.loss] == [3.0, 2.7]


def test_a_restart_not_logged_yet_has_no_place() -> None:
    marker = curves._marker("restart", "crash", "7", 0, 0, None)
    assert (marker.step, marker.time) == (None, None)


def test_lineage_follows_resumed_from_and_keeps_the_id_of_a_lost_record(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    known = {
        "5": JobRecord(job_id="5", spec=spec, submitted_at=0.0, resumed_from="4"),
        "6": JobRecord(job_id="6", spec=spec, submitted_at=1.0, resumed_from="5"),
    }

    def load(job_id: str) -> JobRecord:
        if job_id not in known:
            raise JobNotFound(f"no recorded job {job_id}")
        return known[job_id]

    found = curves.lineage(known["6"], load)
    assert found.job_ids == ("4", "5", "6") and found.lost == "4"
    assert found.metrics_paths == (Path(spec.output.run_dir) / "metrics.jsonl",)
    looped = JobRecord(job_id="5", spec=spec, submitted_at=0.0, resumed_from="6")
    known["5"] = looped
    assert curves.lineage(known["6"], load).job_ids == ("5", "6")


def test_a_wall_time_line_breaks_where_the_training_started_again() -> None:
    points = [curves.Point(step, 0.0, 1.0) for step in (1, 2, 5, 6, 9)]
    marks = [curves._marker("restart", "crash", "7", 0, 0, parse_metrics_line(json.dumps(_step(step, 1.0)))) for step in (4, 5, 9)]
    assert curves.breaks(points, marks) == [2, 4]
    assert curves.breaks(points, [curves._marker("restart", "crash", "7", 0, 0, None)]) == []


def test_a_restart_slurm_counted_twice_is_marked_at_the_next_attempts_first_step(record: JobRecord) -> None:
    # The node loss ended attempt 0 and was counted twice: the next attempt ran as restart 2.
    record.log_paths[0].write_text(
        "### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time=t\n"
        "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=node-failure nodes=node2 action=requeue time=t\n"
        "### hyperlaunch attempt-start restart=2 job=7 nodes=node[1,3] host=h time=t\n"
    )
    status = summarize(record, [_attempt("REQUEUED"), _attempt("RUNNING")], [])
    records = _records(_step(1, 3.0), _step(2, 2.9), _step(3, 2.6, restart=2, time=3000.0))
    (marker,) = curves.training_curves(records, [status]).markers
    assert (marker.kind, marker.step, marker.time, marker.attempt, marker.cause) == ("restart", 3, 3000.0, 0, "node failure (node2)")
