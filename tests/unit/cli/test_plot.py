"""`hyperlaunch plot` and the curve `status J` shows, through the real CLI with Slurm faked at
hyperlaunch.slurm.runner.run: a training of two jobs (12, and 13 resuming it) whose first
job restarted in its allocation and through the queue, and re-ran steps each time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hyperlaunch.core import trackers
from hyperlaunch.core.metrics_records import METRICS_FILE
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs import jobs
from hyperlaunch.slurm import runner as slurm_runner
from tests.support.cli_runner import one_error_line, run_cli

_SACCT = (
    "12|REQUEUED|node[1-2]|2026-01-01T00:00:00|2026-01-01T01:00:00|0:0|3600|600\n"
    "12|TIMEOUT|node[1,3]|2026-01-01T02:00:00|2026-01-01T03:00:00|0:0|3600|60\n"
    "13|COMPLETED|node[1-2]|2026-01-01T04:00:00|2026-01-01T05:00:00|0:0|3600|600\n"
)


@pytest.fixture(autouse=True)
def _fake_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, _SACCT if args[0] == "sacct" else "", ""))


def _spec(tmp_path: Path, **more: object) -> JobSpec:
    fields: dict[str, object] = {"model": "qwen3_tiny", "checkpoint_dir": str(tmp_path / "ckpt"), "log_dir": str(tmp_path / "logs"), "run_dir": str(tmp_path / "run")}
    return job_spec(**{**fields, **more})  # type: ignore[arg-type]


def _step(step: int, loss: float, job: str, restart: int = 0, round_: int = 0) -> dict[str, object]:
    return {"type": "step", "step": step, "loss": loss, "tokens_per_s": 1000.0 + step, "time": 1.7e9 + 60 * step + 1000 * restart,
            "job_id": job, "restart": restart, "round": round_}


@pytest.fixture()
def training(tmp_path: Path) -> Path:
    """Job 12: round 0 crashes after step 3, round 1 re-runs from step 3 and loses node2 after
    step 5; attempt 1 re-runs from step 5 and hits the time limit; job 13 resumes from step 6."""
    spec = _spec(tmp_path)
    first = jobs.JobRecord(job_id="12", spec=spec, submitted_at=1.0)
    jobs.save(first, "#!/bin/bash\n")
    jobs.save(jobs.JobRecord(job_id="13", spec=spec, submitted_at=2.0, resumed_from="12"), "#!/bin/bash\n")
    jobs.save(jobs.JobRecord(job_id="14", spec=spec, submitted_at=3.0), "#!/bin/bash\n")  # another training, same run dir
    first.log_paths[0].parent.mkdir(parents=True)
    first.log_paths[0].write_text(
        "### hyperlaunch attempt-restart restart=0 round=1 cause=crash exit=1 job=12 time=t\n"
        "### hyperlaunch attempt-end restart=0 job=12 exit=1 cause=node-failure nodes=node2 action=slurm-requeue time=t\n"
    )
    lines = [
        _step(1, 4.0, "12"), _step(2, 3.5, "12"), _step(3, 3.4, "12"), _step(4, 9.0, "12"),
        _step(3, 3.0, "12", round_=1), _step(4, 2.8, "12", round_=1), _step(5, 2.6, "12", round_=1), _step(6, 2.5, "12", round_=1),
        _step(6, 2.4, "12", restart=1), _step(7, 2.3, "12", restart=1),
        {"type": "event", "event": "validation", "step": 6, "val_loss": 2.45, "time": 1.7e9 + 1400, "job_id": "12", "restart": 1, "round": 0},
        _step(7, 2.2, "13"), _step(8, 2.0, "13"),
        _step(50, 0.1, "14"),
    ]
    run_dir = Path(spec.output.run_dir)
    run_dir.mkdir()
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tmp_path


def test_json_has_the_kept_curve_of_the_lineage_and_markers_with_the_causes_status_gives(training: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli(["plot", "13", "--json"], monkeypatch)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["jobs"] == ["12", "13"]
    assert [(p["step"], p["value"]) for p in document["loss"]] == [(1, 4.0), (2, 3.5), (3, 3.0), (4, 2.8), (5, 2.6), (6, 2.4), (7, 2.2), (8, 2.0)]
    assert [(p["step"], p["value"]) for p in document["val_loss"]] == [(6, 2.45)]
    assert [(m["kind"], m["job_id"], m["step"]) for m in document["markers"]] == [
        ("restart in allocation", "12", 3), ("restart", "12", 6), ("resume", "13", 7)
    ]
    listed = run_cli(["status"], monkeypatch).stdout
    (row,) = [line for line in listed.splitlines() if line.startswith("12 ")]
    causes = [m["cause"] for m in document["markers"] if m["job_id"] == "12"]
    assert f"{len(causes)}, last: {causes[-1]}" in row
    assert causes == ["crash in allocation (exit 1)", "node failure (node2)"]
    assert document["markers"][2]["cause"] == "resume of job 12 after time limit"


@pytest.mark.slow
def test_o_writes_a_real_png_and_nothing_beside_it(training: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.image import imread

    target = training / "out" / "loss.png"
    target.parent.mkdir()
    result = run_cli(["plot", "13", "-o", str(target)], monkeypatch)
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = imread(str(target)).shape
    assert (width, height) == (1400, 900)
    assert [p.name for p in target.parent.iterdir()] == ["loss.png"]


def test_the_terminal_chart_is_plain_text_in_a_pipe_with_the_markers_listed(training: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli(["plot", "13"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "\033[" not in result.stdout and "loss (. validation) by step" in result.stdout
    assert "jobs 12 -> 13" in result.stdout
    assert "[2] restart at step 6 (job 12, attempt 0, round 0): node failure (node2)" in result.stdout


def test_errors_are_one_line_and_leave_nothing_half_written(training: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one_error_line(run_cli(["plot", "99"], monkeypatch), 7, "no recorded job 99")
    spec = _spec(training, run_dir=str(training / "fresh"))
    jobs.save(jobs.JobRecord(job_id="15", spec=spec, submitted_at=4.0), "#!/bin/bash\n")
    one_error_line(run_cli(["plot", "15"], monkeypatch), 7, "job 15 has logged no steps yet", f"(metrics: {training / 'fresh' / METRICS_FILE})")
    one_error_line(run_cli(["plot", "13", "-o", str(training / "missing" / "loss.png")], monkeypatch), 2, "cannot write", "loss.png")
    folder = training / "taken.png"
    folder.mkdir()
    one_error_line(run_cli(["plot", "13", "-o", str(folder)], monkeypatch), 2, "cannot write")
    assert list(training.glob(".taken.png*")) == [] and list(folder.iterdir()) == []
    one_error_line(run_cli(["plot", "13", "-o", str(training / "loss.txt")], monkeypatch), 2, "ending in .png")


def test_a_missing_plot_library_names_the_extra(training: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "plotext", None)
    one_error_line(run_cli(["plot", "13"], monkeypatch), 2, "plotext", 'pip install "hyperlaunch[plot]"')
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    one_error_line(run_cli(["plot", "13", "-o", str(training / "x.png")], monkeypatch), 2, "matplotlib", 'pip install "hyperlaunch[plot]"')
    assert not (training / "x.png").exists()


def test_help_teaches_by_example(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli(["plot", "--help"], monkeypatch)
    assert result.exit_code == 0 and "hyperlaunch plot 42 -o loss.png" in result.stdout


def test_status_of_one_job_shows_the_kept_loss_as_a_sparkline(training: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    detail = run_cli(["status", "13"], monkeypatch)
    assert detail.exit_code == 0, detail.output
    (line,) = [line for line in detail.stdout.splitlines() if line.startswith("  loss:")]
    assert line.endswith(" 4.00 → 2.00 (steps 1-8)")
    assert line.split()[1] == "█▆▅▄▃▂▂▁"  # (loss - 2) / 2 in eighths
    spec = _spec(training, run_dir=str(training / "fresh"))
    jobs.save(jobs.JobRecord(job_id="15", spec=spec, submitted_at=4.0), "#!/bin/bash\n")
    assert "  loss:" not in run_cli(["status", "15"], monkeypatch).stdout


def test_status_shows_where_each_trackers_run_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(
        tmp_path, tracker=("tensorboard", "mlflow", "wandb"), mlflow_uri="http://mlflow:5000",
        tracker_run_id="abc123", mlflow_run_id="r9", mlflow_experiment_id="4",
    )
    jobs.save(jobs.JobRecord(job_id="12", spec=spec, submitted_at=1.0), "#!/bin/bash\n")
    text = run_cli(["status", "12"], monkeypatch).stdout
    folder = str(tmp_path / "run" / "tensorboard")
    assert f"  tensorboard: {folder} (tensorboard --logdir {folder})" in text
    assert "  mlflow:     http://mlflow:5000/#/experiments/4/runs/r9" in text
    assert "  wandb:      run id abc123\n" in text
    # Steps trained and still no W&B location: its run did not open (no key on the nodes).
    Path(spec.output.run_dir).mkdir(parents=True, exist_ok=True)
    (Path(spec.output.run_dir) / METRICS_FILE).write_text(json.dumps(_step(1, 3.0, "12")) + "\n")
    text = run_cli(["status", "12"], monkeypatch).stdout
    assert "  wandb:      run id abc123, not opened: the reason is in 'hyperlaunch logs 12'" in text
    trackers.write_location(tmp_path / "run", trackers.WANDB, "https://wandb.ai/me/proj/runs/abc123")
    document = json.loads(run_cli(["status", "12", "--json"], monkeypatch).stdout)
    assert document["trackers"]["wandb"] == {"where": "https://wandb.ai/me/proj/runs/abc123", "run_id": "abc123"}
    assert document["trackers"]["tensorboard"]["command"] == f"tensorboard --logdir {folder}"
    assert document["trackers"]["mlflow"]["where"] == "http://mlflow:5000/#/experiments/4/runs/r9"


def test_the_wall_time_axes_read_short_even_for_a_run_under_a_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    spec = _spec(tmp_path)
    jobs.save(jobs.JobRecord(job_id="12", spec=spec, submitted_at=1.0), "#!/bin/bash\n")
    Path(spec.output.run_dir).mkdir()
    steps = [{**_step(step, 4.0 - step / 10, "12"), "time": 1.7e9 + 0.08 * step} for step in range(1, 11)]
    (Path(spec.output.run_dir) / METRICS_FILE).write_text("".join(json.dumps(line) + "\n" for line in steps))
    drawn: list[Figure] = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), save(self, *a, **k))[1])
    assert run_cli(["plot", "12", "-o", str(tmp_path / "loss.png")], monkeypatch).exit_code == 0
    labels = [tick.get_text() for axes in drawn[0].axes if axes.get_xlabel() == "wall time" for tick in axes.get_xticklabels()]
    assert labels and all(len(label) <= 5 for label in labels), labels  # not `20:00.400000`
