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

from hyperlaunch.core.trainer_failures import trainer_failure_path
from hyperlaunch.runs.goodput import PARTS, Ledger, Span, marker_time, paint, sacct_time, seconds_by_part
from hyperlaunch.runs.goodput_sources import failure_times
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
