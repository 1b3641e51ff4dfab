"""W&B offline across attempts (WANDB_MODE=offline, as a cluster without internet writes it):
each process writes its own offline run folder, all under the training's one run id, read back
with W&B's own reader of its transaction log (`wandb leet inspect --json`). Offline nothing can
be rewound: the restarted attempt records the steps it redoes in the run's config and summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hyperlaunch.core import trackers as names
from tests.support.tracker_attempts import FIRST, SECOND, attempt, job_env, loss

pytest.importorskip("wandb")


def _records(folder: Path, env: dict[str, str], *, summary: bool = False) -> Any:
    args = ["--summary", "--json"] if summary else ["--json"]
    result = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", *args, str(folder)], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(result.stdout) if summary else [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _history(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for record in records:
        if record.get("type") == "history":
            item = record["history"]["item"]
            rows.setdefault(int(item["_step"]), {}).update(item)
    return rows


@pytest.mark.slow
def test_two_attempts_write_offline_runs_of_one_id_and_the_second_records_what_it_redid(tmp_path: Path) -> None:
    env = job_env(
        tmp_path, "wandb", WANDB_MODE="offline", WANDB_DIR=str(tmp_path / "wandb"), WANDB_SILENT="true",
        WANDB_RUN_ID="lineage1", WANDB_RESUME="allow", WANDB_PROJECT="demo",
    )
    attempt(env, FIRST)
    attempt(env, SECOND, restart=1, cause="crash")

    first, second = sorted((tmp_path / "wandb" / "wandb").glob("offline-run-*"))
    assert first.name.endswith("-lineage1") and second.name.endswith("-lineage1")
    runs = [_records(folder, env) for folder in (first, second)]
    assert [next(r["run"]["run_id"] for r in records if r["type"] == "run") for records in runs] == ["lineage1", "lineage1"]

    history = [_history(records) for records in runs]
    assert sorted(history[0]) == list(range(1, 9)) and sorted(history[1]) == list(range(5, 11))
    assert [history[1][step]["train/loss"] for step in range(5, 11)] == pytest.approx([loss(step) for step in range(5, 11)])
    assert "after crash" in history[1][5]["events/restart"]

    summary = _records(second, env, summary=True)
    assert summary["run_id"] == "lineage1" and summary["state"] == "finished"
    assert summary["config"]["hyperlaunch.stale_steps.4242.1.0"] == "5-8"
    assert summary["summary"]["hyperlaunch/stale_from_step"] == 5
    assert summary["summary"]["hyperlaunch/checkpoint_step"] == 8
    assert _records(first, env, summary=True)["state"] == "failed"  # the crashed attempt
    locations = json.loads((tmp_path / "run" / names.LOCATIONS_FILE).read_text())
    assert locations == {"wandb": str(second)}


class _Config(dict):  # type: ignore[type-arg]
    def update(self, values: Any, allow_val_change: bool = False) -> None:  # type: ignore[override]
        super().update(values)


class _FakeRun:
    def __init__(self) -> None:
        self.config = _Config()
        self.summary: dict[str, Any] = {}
        self.url = "https://wandb.example/runs/lineage1"
        self.offline = False


class _FakeWandb:
    """W&B's init as an online server answers it (no network here): rewinding refused or not."""

    def __init__(self, refuse_rewind: bool) -> None:
        self.refuse_rewind = refuse_rewind
        self.calls: list[tuple[dict[str, Any], str | None]] = []

    def init(self, **kwargs: Any) -> _FakeRun:
        self.calls.append((kwargs, os.environ.get(names.WANDB_RESUME_ENV)))
        if "resume_from" in kwargs and self.refuse_rewind:
            raise RuntimeError("rewind is not enabled for this entity")
        return _FakeRun()


@pytest.mark.parametrize("refuse_rewind", [False, True])
def test_online_a_restart_that_redoes_logged_steps_rewinds_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], refuse_rewind: bool
) -> None:
    from hyperlaunch.trackers.lineage import Trackers
    from hyperlaunch.trackers.wandb_run import WandbRun

    fake = _FakeWandb(refuse_rewind)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv(names.WANDB_RESUME_ENV, "allow")
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"type": "step", "step": s, "loss": 1.0}) + "\n" for s in range(1, 9)))
    run = WandbRun("lineage1", tmp_path)
    tracked = Trackers(tmp_path, [run], {})
    tracked.record({"type": "step", "step": 5, "loss": 0.5, "job_id": "4242", "restart": 1, "round": 0})

    first_call, resume_env = fake.calls[0]
    assert first_call["resume_from"] == "lineage1?_step=4" and resume_env is None  # W&B refuses both at once
    assert os.environ[names.WANDB_RESUME_ENV] == "allow"  # given back
    if refuse_rewind:
        assert fake.calls[1][0]["resume"] == "allow" and fake.calls[1][0]["id"] == "lineage1"
        assert run._run.config == {"hyperlaunch.stale_steps.4242.1.0": "5-8"}
        assert "could not rewind" in capsys.readouterr().err
    else:
        assert len(fake.calls) == 1 and run.rewound and run._run.config == {}
    assert json.loads((tmp_path / names.LOCATIONS_FILE).read_text()) == {"wandb": "https://wandb.example/runs/lineage1"}
