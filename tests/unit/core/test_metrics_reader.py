"""One reader of metrics.jsonl (hyperlaunch.core.metrics_reader) serves `status`, `plot` and
`goodput`: `status J` reads a lineage's file for its loss line, its goodput line and the
progress of each job, and parses it once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core import metrics_reader
from hyperlaunch.core.metrics_records import EventRecord, StepRecord
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.runs import curves
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.runs.training_progress import read_progress


def test_status_plot_and_goodput_parse_a_metrics_file_once_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = job_spec(model="qwen3_tiny", checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"))
    path = tmp_path / "run" / "metrics.jsonl"
    path.parent.mkdir()
    lines = [{"type": "step", "step": step, "loss": 2.0 / step, "job_id": "7"} for step in range(1, 6)]
    lines.append({"type": "event", "event": "resumed", "step": 3, "job_id": "7"})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"type": "step", "st')  # the last one cut by a crash
    parsed: list[str] = []
    real = metrics_reader.parse_metrics_line
    monkeypatch.setattr(metrics_reader, "parse_metrics_line", lambda line: parsed.append(line) or real(line))

    record = JobRecord(job_id="7", spec=spec, submitted_at=0.0)
    progress, steps = read_progress(record)  # status
    records = curves.read_records([path])  # plot, goodput, status J's loss line
    assert (progress.last_step, [s.step for s in steps], progress.resumed_from_steps) == (5, [1, 2, 3, 4, 5], (3,))
    assert [type(r) for r in records] == [StepRecord] * 5 + [EventRecord]
    assert len(parsed) == 7, "each line once"
    with path.open("a") as handle:
        handle.write('ep": 6, "loss": 0.3, "job_id": "7"}\n')
    assert [s.step for s in read_progress(record)[1]] == [1, 2, 3, 4, 5, 6]
    assert len(parsed) == 14, "parsed again once it grew"
    assert metrics_reader.read_metrics(tmp_path / "absent") == ()
