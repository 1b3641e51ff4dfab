"""The goodput ledger's arithmetic (hyperlaunch.runs.goodput): every moment of the wall time
given one part, the first of PARTS where parts overlap, the rest unaccounted, so the parts add
up to the wall time; marker and sacct times read as the supervisor and Slurm write them; the
failure records' times found by their names. The whole ledger against a real training is
tests/integration/test_goodput.py's."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from hyperlaunch.core.metrics_records import EventRecord, MetricsRecord, StepRecord
from hyperlaunch.core.trainer_failures import trainer_failure_path
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.runs.goodput import PARTS, Ledger, Span, build, marker_time, paint, sacct_time, seconds_by_part
from hyperlaunch.runs.goodput_sources import failure_times
from hyperlaunch.runs.job_status import JobStatus, summarize
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.slurm.accounting import Attempt
from tests.support.cli_runner import one_error_line, run_cli


def test_each_moment_gets_the_first_part_that_claims_it_and_the_parts_add_up() -> None:
    spans = [
        Span(0, 10, "queue"), Span(10, 14, "start-up"), Span(14, 20, "recomputed"), Span(18, 30, "productive"),
        Span(30, 31, "detection"), Span(29, 35, "hang"), Span(40, 45, "start-up"), Span(-5, 2, "between jobs"),
    ]
    painted = paint(spans, 0, 50)
    assert [(s.start, s.end, s.part) for s in painted] == [
        (0, 10, "queue"), (10, 14, "start-up"), (14, 18, "recomputed"), (18, 30, "productive"), (30, 35, "hang"),
        (35, 40, "unaccounted"), (40, 45, "start-up"), (45, 50, "unaccounted"),
    ]
    seconds = seconds_by_part(painted)
    assert sum(seconds.values()) == 50 and list(seconds) == list(PARTS)
    assert seconds_by_part(painted, 12, 20) == {**dict.fromkeys(PARTS, 0.0), "start-up": 2, "recomputed": 4, "productive": 2}


def test_spans_outside_the_wall_time_or_empty_count_for_nothing() -> None:
    assert paint([Span(-10, -5, "queue"), Span(3, 3, "hang"), Span(60, 70, "productive")], 0, 50) == [Span(0, 50, "unaccounted")]
    assert paint([], 5, 5) == []


def test_the_summary_line_and_device_hours() -> None:
    ledger = Ledger(job_ids=("7",), start=0.0, end=3600.0, seconds={"productive": 2700.0, "recomputed": 900.0}, devices=16, device_unit="GPU")
    assert ledger.goodput == 0.75 and ledger.lost_s == 900
    assert ledger.summary() == "goodput: 75.0 % (lost 4.00 GPU-h: 0 restarts)"
    assert ledger.to_json()["parts"]["recomputed"] == {"seconds": 900.0, "device_hours": 4.0, "share": 0.25}


def test_marker_and_sacct_times() -> None:
    assert marker_time("2026-11-28T02:55:02Z") == datetime.fromisoformat("2026-11-28T02:55:02+00:00").timestamp()
    assert sacct_time("2026-11-28T03:05:37") == datetime(2026, 11, 28, 3, 5, 37).timestamp()  # the cluster's local time
    for bad in ("", "Unknown", "t", "2026-11-28T02:55:02"):
        assert marker_time(bad) is None
    assert sacct_time("Unknown") is None


def test_failure_records_are_found_by_their_names(tmp_path: Path) -> None:
    for job, attempt, round_ in (("7", 0, 0), ("7", 0, 2), ("7", 1, 0), ("8", 0, 0), ("12_3", 0, 1)):
        path = trainer_failure_path(tmp_path, job, attempt, round_)
        path.write_text("retry unexpected\nm\n")
        os.utime(path, (1000.0 + attempt * 10 + round_, 1000.0 + attempt * 10 + round_))
    (tmp_path / "trainer-failure-7.0.tmp").write_text("a rank's temporary file")
    found = failure_times([tmp_path, tmp_path / "absent"], ["7", "12_3"])
    assert found == {("7", 0, 0): 1000.0, ("7", 0, 2): 1002.0, ("7", 1, 0): 1010.0, ("12_3", 0, 1): 1001.0}


@pytest.mark.parametrize("name", ["goodput.txt", "goodput"])
def test_an_image_name_without_a_known_format_is_one_line(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli(["goodput", "7", "-o", str(tmp_path / name)], monkeypatch)
    one_error_line(result, 2, f"-o {tmp_path / name}", "name an image file ending in .png, .svg, .pdf")
    assert not (tmp_path / name).exists()


def _job(tmp_path: Path, out: str, attempts: list[Attempt], submitted: float) -> JobStatus:
    spec = job_spec(model="qwen3_tiny", nodes=2, checkpoint_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"))
    (tmp_path / "logs").mkdir(exist_ok=True)
    record = JobRecord(job_id="7", spec=spec, submitted_at=submitted)
    record.log_paths[0].write_text(out)
    record.log_paths[1].write_text("")
    return summarize(record, attempts, [])


def _at(clock: str) -> float:
    """A time of 2026-01-01 (UTC) as Unix time."""
    return marker_time(f"2026-01-01T{clock}Z") or 0.0


def _local(seconds: float) -> str:
    """Unix time as sacct writes it, in the local time."""
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%dT%H:%M:%S")


def _step(step: int, end: float, restart: int, round_: int, took: float = 1.0) -> StepRecord:
    return StepRecord(step=step, loss=1.0, step_time_s=took, time=end, job_id="7", restart=restart, round=round_)


def _crash_then_a_lost_node(tmp_path: Path) -> tuple[str, JobStatus, list[MetricsRecord]]:
    """Submitted at 00:00:00, started at :10; steps 1-4 (1 s each, from :20), a crash in step 5
    (its record at :25), the supervisor's new round at :27, steps 3-6 from :30 and a save; a node
    lost after step 6, the attempt's end at :36, the requeue started at :50; steps 5-8 from :55;
    the end at :60. (stdout log, status, metrics records)."""
    out = "\n".join([
        "### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time=2026-01-01T00:00:10Z",
        "### hyperlaunch attempt-restart restart=0 job=7 round=1 cause=crash exit=1 in_row=1 action=restart-in-allocation time=2026-01-01T00:00:27Z",
        "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=node-failure nodes=node2 round=1 action=requeue time=2026-01-01T00:00:36Z",
        "### hyperlaunch attempt-start restart=1 job=7 nodes=node[1,3] host=h time=2026-01-01T00:00:50Z",
        "### hyperlaunch attempt-end restart=1 job=7 exit=0 cause=completed round=0 action=exit time=2026-01-01T00:01:00Z",
    ]) + "\n"
    attempts = [
        Attempt("7", "REQUEUED", "node[1-2]", _local(_at("00:00:10")), _local(_at("00:00:37")), "1:0", 27, 600),
        Attempt("7", "COMPLETED", "node[1,3]", _local(_at("00:00:50")), _local(_at("00:01:00")), "0:0", 10, 600),
    ]
    status = _job(tmp_path, out, attempts, submitted=_at("00:00:00"))
    steps = [_step(n, _at("00:00:20") + n, 0, 0) for n in range(1, 5)]
    steps += [_step(n, _at("00:00:30") + n - 2, 0, 1) for n in range(3, 7)]
    steps += [_step(n, _at("00:00:55") + n - 4, 1, 0) for n in range(5, 9)]
    saved = [EventRecord("checkpoint_saving", time=_at("00:00:34") + 0.2, job_id="7", restart=0, round=1),
             EventRecord("checkpoint_completed", time=_at("00:00:34") + 0.7, job_id="7", restart=0, round=1)]
    return out, status, [*steps, *saved]


def test_a_crash_in_the_allocation_and_a_requeue_each_cost_what_the_timeline_says(tmp_path: Path) -> None:
    out, status, records = _crash_then_a_lost_node(tmp_path)
    ledger = build(records, [status], {"7": out.splitlines()}, {("7", 0, 0): _at("00:00:25")}, 2, "node", now=_at("00:02:00"))

    assert (ledger.start, ledger.end) == (_at("00:00:00"), _at("00:01:00"))
    assert sum(ledger.seconds.values()) == pytest.approx(60)
    expected = {
        "queue": 10, "start-up": 10 + 3 + 5, "productive": 8, "recomputed": 2 + 1 + 2, "detection": 2 + 1.5,
        "checkpoint": 0.5, "requeue wait": 14, "unaccounted": 1,  # after the last step, before the job's end
    }
    for part, seconds in expected.items():
        assert ledger.seconds[part] == pytest.approx(seconds), (part, ledger.seconds)
    crash, lost = ledger.restarts
    assert (crash.cause.split(" (")[0], crash.round, crash.steps_recomputed) == ("crash in allocation", 1, 2)
    assert crash.seconds == pytest.approx({"recomputed": 1, "detection": 2, "start-up": 3})
    assert (lost.cause, lost.attempt, lost.steps_recomputed) == ("node failure (node2)", 0, 2)
    assert lost.seconds == pytest.approx({"checkpoint": 0.5, "detection": 1.5, "requeue wait": 14, "start-up": 5})
    assert ledger.summary() == "goodput: 13.3 % (lost 0.03 node-h: 2 restarts)"


def test_the_supervisors_decision_records_time_its_actions_below_the_second(tmp_path: Path) -> None:
    """The training of the test above, where the supervisor also wrote its decision records: its
    new round started at :27.4 and it asked for the requeue at :36.3, which the markers round
    down to the second; the ledger takes the records' times for attempt 0."""
    from hyperlaunch.core.decision_records import END, RESTART, DecisionRecord

    out, status, records = _crash_then_a_lost_node(tmp_path)
    decisions = [
        DecisionRecord(event=RESTART, restart=0, cause="crash", action="restart-in-allocation", time="2026-01-01T00:00:27Z",
                       exit=1, round=0, next_round=1, next_round_started=_at("00:00:27") + 0.4),
        DecisionRecord(event=END, restart=0, cause="node-failure", action="requeue", time="2026-01-01T00:00:36Z", exit=1,
                       round=1, nodes_out=("node2",), requeue_asked=_at("00:00:36") + 0.3),
    ]
    ledger = build(
        records, [status], {"7": out.splitlines()}, {("7", 0, 0): _at("00:00:25")}, 2, "node", now=_at("00:02:00"),
        decisions={"7": decisions},
    )
    assert sum(ledger.seconds.values()) == pytest.approx(60)
    crash, lost = ledger.restarts
    assert crash.seconds == pytest.approx({"recomputed": 1, "detection": 2.4, "start-up": 2.6})
    assert lost.seconds == pytest.approx({"checkpoint": 0.5, "detection": 1.8, "requeue wait": 13.7, "start-up": 5})


def test_a_scripts_steps_without_step_times_run_from_the_step_before(tmp_path: Path) -> None:
    out = "### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time=2026-01-01T00:00:00Z\n"
    attempts = [Attempt("7", "COMPLETED", "node[1-2]", _local(_at("00:00:00")), _local(_at("00:00:10")), "0:0", 10, 600)]
    status = _job(tmp_path, out, attempts, submitted=_at("00:00:00"))
    steps = [_step(n, _at("00:00:02") + 2 * n, 0, 0, took=0.0) for n in range(4)]  # :02, :04, :06, :08
    ledger = build(steps, [status], {"7": out.splitlines()}, {}, 2, "node", now=_at("00:01:00"))
    assert ledger.seconds["start-up"] == pytest.approx(2) and ledger.seconds["productive"] == pytest.approx(6)
