"""The trackers' shared part (hyperlaunch.trackers, hyperlaunch.trackers.lineage): preflight,
a failing tracker switched off while training goes on, records turned into scalars, and one
training as two attempts (tests.support.tracker_attempts), which the per-tracker tests read back
with each tracker's own reader."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hyperlaunch import trackers
from hyperlaunch.core import trackers as names
from hyperlaunch.core.metrics_reader import last_logged_step
from hyperlaunch.core.trackers import Ending
from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV
from hyperlaunch.trackers.lineage import Start, Trackers, step_scalars
from tests.support.tracker_attempts import job_env

ROOT = Path(__file__).resolve().parents[3]


# -- the shared part, in process -----------------------------------------------------------


def test_preflight_names_the_missing_library_and_the_extra_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    message = trackers.preflight({names.TRACKERS_ENV: "tensorboard,nosuch"})
    assert message is None  # unknown names are not trackers (the CLI refuses them at submit)

    monkeypatch.setitem(sys.modules, "wandb", None)  # importlib finds none, as where it is not installed
    message = trackers.preflight({names.TRACKERS_ENV: "tensorboard,wandb"})
    assert message is not None and "\n" not in message
    assert 'pip install "hyperlaunch[trackers]"' in message and "wandb" in message and "tensorboard" not in message


@pytest.mark.slow
def test_a_script_job_fails_for_good_at_its_first_call_when_a_tracker_library_is_missing(tmp_path: Path) -> None:
    failure_file = tmp_path / "failure"
    env = job_env(tmp_path, "wandb", **{TRAINER_FAILURE_FILE_ENV: str(failure_file)})
    # sys.modules[name] = None: importlib finds no such module, as where it is not installed.
    code = "import sys\nsys.modules['wandb'] = None\nfrom hyperlaunch import runtime\nruntime.resume_path()\nprint('went on')\n"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1 and "went on" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and 'pip install "hyperlaunch[trackers]"' in lines[0] and "wandb" in lines[0], result.stderr
    assert failure_file.read_text().startswith("final script-error"), failure_file.read_text()


class _Recorder:
    """A tracker that keeps what it got, and raises where told to."""

    def __init__(self, name: str, fail_at: int | None = None) -> None:
        self.name = name
        self.fail_at = fail_at
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.events: list[tuple[int, str, str]] = []
        self.start: Start | None = None
        self.closed: Ending | None = None

    def open(self, start: Start, params: Mapping[str, Any]) -> str:
        self.start = start
        return f"/where/{self.name}"

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        if step == self.fail_at:
            raise ConnectionError("server went away")
        self.logged.append((step, dict(values)))

    def event(self, step: int, event: str, text: str) -> None:
        self.events.append((step, event, text))

    def params(self, values: Mapping[str, Any]) -> None:
        pass

    def committed(self, step: int) -> None:
        pass

    def close(self, ending: Ending) -> None:
        self.closed = ending


def test_a_tracker_that_raises_is_switched_off_with_one_warning_and_the_others_go_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken, fine = _Recorder("mlflow", fail_at=3), _Recorder("tensorboard")
    tracked = Trackers(tmp_path, [broken, fine], {names.RESTART_CAUSE_ENV: "hang"})
    tracked.record({"type": "event", "event": "resumed", "message": "resumed from step 1", "step": 1})
    for step in range(2, 7):
        tracked.record({"type": "step", "step": step, "loss": 1.0 / step, "job_id": "7", "restart": 0, "round": 1})
    tracked.close(Ending.FINISHED)

    assert [step for step, _ in fine.logged] == [2, 3, 4, 5, 6] and fine.closed is Ending.FINISHED
    assert [step for step, _ in broken.logged] == [2] and broken.closed is None
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "mlflow" in warnings[0] and "ConnectionError" in warnings[0]
    # The restart (round 1, cause hang) at the first step, then the event that came before it.
    assert [(step, event) for step, event, _ in fine.events] == [(2, "restart"), (2, "resumed")]
    assert "after hang" in fine.events[0][2] and "round 1" in fine.events[0][2]
    assert json.loads((tmp_path / names.LOCATIONS_FILE).read_text()) == {"mlflow": "/where/mlflow", "tensorboard": "/where/tensorboard"}


def test_the_first_step_opens_the_run_and_knows_what_the_lineage_logged_before(tmp_path: Path) -> None:
    lines = [{"type": "step", "step": s, "loss": 1.0} for s in range(1, 9)] + [{"type": "event", "event": "exit"}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"type": "st')
    assert last_logged_step(tmp_path, chunk=16) == 8 == last_logged_step(tmp_path)
    recorder = _Recorder("wandb")
    tracked = Trackers(tmp_path, [recorder], {})
    tracked.record({"type": "step", "step": 5, "loss": 2.0})
    assert recorder.start is not None and recorder.start.stale_steps == (5, 8) and not recorder.start.restarted
    assert last_logged_step(tmp_path / "nothing") is None


def test_step_records_become_train_scalars_and_a_scripts_own_keys_too() -> None:
    record = {
        "type": "step", "step": 3, "loss": 2.5, "lr": 1e-3, "grad_norm": 0.5, "mfu": None, "peak_memory_bytes": 2**31,
        "peak_memory_bytes_per_rank": [1, 2], "job_id": "9", "restart": 0, "round": 0, "time": 1.0, "world_size": 8,
        "accuracy": 0.75, "note": "text", "flag": True,
    }
    assert step_scalars(record) == {
        "train/loss": 2.5, "train/lr": 1e-3, "train/grad_norm": 0.5, "train/peak_memory_gib": 2.0, "train/accuracy": 0.75,
    }


def test_a_job_without_trackers_builds_none() -> None:
    assert trackers.for_environ(Path("."), {}) is None
    assert trackers.for_environ(Path("."), {names.TRACKERS_ENV: "nosuch"}) is None


def test_an_event_without_a_step_goes_with_the_last_step_logged(tmp_path: Path) -> None:
    recorder = _Recorder("tensorboard")
    tracked = Trackers(tmp_path, [recorder], {})
    for step in (3, 4):
        tracked.record({"type": "step", "step": step, "loss": 1.0})
    tracked.record({"type": "event", "event": "exported", "message": "exported to /x"})
    tracked.record({"type": "event", "event": "checkpoint_saving", "step": 4})  # left out
    tracked.record({"type": "event", "event": "validation", "step": 4, "val_loss": 0.5, "message": "val"})
    assert recorder.events == [(4, "exported", "exported to /x")]
    assert recorder.logged[-1] == (4, {"val/loss": 0.5})
