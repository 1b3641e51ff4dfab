"""`submit --tracker`: the settings' rules, the run ids a submit chooses and `resume` keeps, W&B's
settings and secrets reaching the job by name. Through the real CLI, with a fake sbatch."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.job.plan import build_spec
from hyperlaunch.runs import jobs, tracker_runs
from hyperlaunch.runs.launch import plan_resume
from tests.support.cli_runner import CliResult, run_cli

SECRET = "wandb-s3cret-never-written"


def _render(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliResult:
    monkeypatch.chdir(tmp_path)
    return run_cli(["render", "-m", "qwen3_tiny", *args], monkeypatch)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tracker", "comet"], "--tracker 'comet' is not a tracker; choose from: tensorboard, mlflow, wandb"),
        (["--tracker", "wandb", "--tracker", "wandb"], "--tracker names wandb, wandb: give each tracker once"),
        (["--tracker", "mlflow"], "--tracker mlflow needs the tracking server: --mlflow-uri http://HOST:5000 (or MLFLOW_TRACKING_URI)"),
        (["--tensorboard-dir", "/tmp/tb"], "--tensorboard-dir is for --tracker tensorboard, which is not on"),
        (["--mlflow-uri", "http://h:5000"], "--mlflow-uri is for --tracker mlflow, which is not on"),
        (["--tracker", "wandb", "--env", "WANDB_RUN_ID=x"], "--env WANDB_RUN_ID is refused with --tracker wandb: hyperlaunch sets it to the training's one run"),
        (["--tracker", "mlflow", "--mlflow-uri", "http://h:5000", "--env", "MLFLOW_RUN_ID=x"], "--env MLFLOW_RUN_ID is refused with --tracker mlflow"),
    ],
)
@pytest.mark.slow
def test_bad_tracker_settings_are_one_line_errors(args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = _render(args, tmp_path, monkeypatch)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_the_trackers_own_settings_come_from_where_they_keep_them(tmp_path: Path) -> None:
    environ = {"MLFLOW_TRACKING_URI": "http://10.1.1.1:5000", "WANDB_PROJECT": "llm", "WANDB_MODE": "offline"}
    spec = build_spec({"model": "qwen3_tiny", "tracker": ["tensorboard", "mlflow", "wandb"]}, cwd=tmp_path, environ=environ)
    assert spec.output.mlflow_uri == "http://10.1.1.1:5000"
    assert spec.output.tensorboard_dir == os.path.join(spec.output.run_dir, "tensorboard")
    assert ("WANDB_PROJECT", None) in spec.job.env and ("WANDB_MODE", None) in spec.job.env, "forwarded by name, not written"
    assert spec.derived.tracker_run_id is None, "chosen at submit, not when planned"
    alone = build_spec({"model": "qwen3_tiny", "tracker": ["tensorboard"], "tensorboard_dir": "tb"}, cwd=tmp_path, environ={})
    assert alone.output.tensorboard_dir == str(tmp_path / "tb") and alone.job.env == ()


@pytest.mark.slow
def test_the_config_file_names_trackers_as_a_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hyperlaunch.toml").write_text('tracker = ["tensorboard", "wandb"]\n')
    result = _render([], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "export HYPERLAUNCH_TRACKERS='tensorboard,wandb'" in result.stdout
    assert "HYPERLAUNCH_TRACKER_RUN_ID" not in result.stdout, "render chooses no run"


def test_a_run_id_is_chosen_once_and_resume_keeps_it(tmp_path: Path) -> None:
    spec = build_spec({"model": "qwen3_tiny", "tracker": ["tensorboard", "wandb"]}, cwd=tmp_path, environ={})
    with tracker_runs.chosen(spec) as first, tracker_runs.chosen(spec) as second:
        assert re.fullmatch(r"[0-9a-f]{12}", first.derived.tracker_run_id or "")
        assert first.derived.tracker_run_id != second.derived.tracker_run_id, "each submit a new training"
    with tracker_runs.chosen(first) as again:
        assert again is first, "a spec with its run keeps it"
    untracked = build_spec({"model": "qwen3_tiny"}, cwd=tmp_path, environ={})
    with tracker_runs.chosen(untracked) as same:
        assert same is untracked
    checkpoint = Path(first.output.checkpoint_dir) / "qwen3_tiny-10steps"
    checkpoint.mkdir(parents=True)
    (checkpoint / ".metadata").write_bytes(b"x")
    record = jobs.JobRecord(job_id="7", spec=first, submitted_at=time.time())
    assert plan_resume(record).derived.tracker_run_id == first.derived.tracker_run_id


def test_an_mlflow_server_that_does_not_answer_is_one_line_at_submit(tmp_path: Path) -> None:
    spec = build_spec({"model": "qwen3_tiny", "tracker": ["mlflow"], "mlflow_uri": "http://127.0.0.1:9"}, cwd=tmp_path, environ={})
    started = time.monotonic()
    with pytest.raises(InvalidInput, match=r"--tracker mlflow: the tracking server http://127.0.0.1:9 did not create the run"), tracker_runs.chosen(spec):
        pass
    assert time.monotonic() - started < 60, "no minutes of retries"


def _submit_mlflow(uri: str, tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch) -> CliResult:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    (tmp_path / "slurm.conf").touch()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    return run_cli(["submit", "-m", "qwen3_tiny", "--tracker", "mlflow", "--mlflow-uri", uri, "--json"], monkeypatch)


@pytest.mark.slow
def test_an_mlflow_file_store_mlflow_refuses_is_one_line_and_nothing_is_submitted(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow 3 refuses a file: store unless MLFLOW_ALLOW_FILE_STORE=true (real mlflow, no server)."""
    pytest.importorskip("mlflow")
    stub = _fake_sbatch(tmp_path_factory.mktemp("stub"))
    uri = (tmp_path / "mlruns").as_uri()
    result = _submit_mlflow(uri, tmp_path, stub, monkeypatch)
    assert result.exit_code == InvalidInput.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"hyperlaunch: error: --tracker mlflow: MLflow did not create the run at {uri}: The filesystem tracking backend"), line
    assert "maintenance mode" in line and "MLFLOW_ALLOW_FILE_STORE=true" in line and "--env MLFLOW_ALLOW_FILE_STORE" in line
    assert "http://HOST:5000" in line and "internal error" not in line
    assert result.stdout == "" and not (stub / "argv").exists(), "nothing submitted"


@pytest.mark.slow
def test_an_mlflow_uri_mlflow_does_not_take_is_one_line_and_nothing_is_submitted(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite: where MLflow has no SQLAlchemy (mlflow-skinny, what the trackers extra installs):
    MLflow then knows no sqlite store (real mlflow, its store registry as skinny's is)."""
    pytest.importorskip("mlflow")
    from mlflow.tracking._tracking_service import utils as mlflow_stores

    stub = _fake_sbatch(tmp_path_factory.mktemp("stub"))
    stores = mlflow_stores._tracking_store_registry._registry
    monkeypatch.setattr(mlflow_stores._tracking_store_registry, "_registry", {k: v for k, v in stores.items() if k != "sqlite"})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = _submit_mlflow(uri, tmp_path, stub, monkeypatch)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert f"--tracker mlflow: MLflow did not create the run at {uri}: " in line and f"unsupported URI '{uri}'" in line, line
    assert "http://HOST:5000" in line and "MLFLOW_ALLOW_FILE_STORE" not in line
    assert result.stdout == "" and not (stub / "argv").exists(), "nothing submitted"

    monkeypatch.setattr(mlflow_stores._tracking_store_registry, "_registry", stores)  # with SQLAlchemy, as `pip install mlflow`
    result = _submit_mlflow(uri, tmp_path, stub, monkeypatch)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["mlflow_run_id"] and (tmp_path / "mlflow.db").is_file()


def _fake_sbatch(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "sbatch"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {directory}/argv\necho "Submitted batch job 6161"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return directory


@pytest.mark.slow
def test_submit_records_the_run_and_the_wandb_key_goes_by_name_only(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = _fake_sbatch(tmp_path_factory.mktemp("stub"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    (tmp_path / "slurm.conf").touch()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("WANDB_PROJECT", "llm")
    monkeypatch.delenv("SBATCH_EXPORT", raising=False)
    result = run_cli(["submit", "-m", "qwen3_tiny", "--tracker", "wandb", "--tracker", "tensorboard", "--env", "WANDB_API_KEY", "--json"], monkeypatch)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    run_id = answer["tracker_run_id"]
    assert answer["trackers"] == ["wandb", "tensorboard"] and re.fullmatch(r"[0-9a-f]{12}", run_id)
    assert (stub / "argv").read_text().splitlines()[0] == "--export=ALL,WANDB_API_KEY,WANDB_PROJECT"
    script = jobs.script_of("6161")
    assert f"\nexport WANDB_RUN_ID={run_id}\n" in script and "\nexport WANDB_API_KEY\n" in script
    assert jobs.load("6161").spec.derived.tracker_run_id == run_id
    home = Path(os.environ["HYPERLAUNCH_HOME"])
    holding = [p for root in (home, tmp_path) for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert holding == [] and SECRET not in result.output
