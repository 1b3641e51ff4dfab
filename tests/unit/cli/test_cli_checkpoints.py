"""`hyperlaunch checkpoints` on real checkpoint folders laid out by the hyperlaunch.core.checkpoints
rules: `.metadata` marks completeness, `<model>-latest` names the resume point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyperlaunch.cli import app
from hyperlaunch.core.disk_space import format_size
from hyperlaunch.job.settings import resolve_checkpoint_dir
from tests.support.checkpoint_folders import make_checkpoint, point

runner = CliRunner()



@pytest.fixture()
def ckpt_dir(tmp_path: Path) -> Path:
    root = tmp_path / "ckpts"
    make_checkpoint(root, "qwen3_tiny", 10)
    make_checkpoint(root, "qwen3_tiny", 20, payload=2048)
    make_checkpoint(root, "qwen3_tiny", 30, complete=False)
    point(root, "qwen3_tiny", "qwen3_tiny-20steps")
    make_checkpoint(root, "llama_tiny", 5)
    point(root, "llama_tiny", "llama_tiny-5steps")
    return root


def _json(*args: str) -> tuple[dict[str, object], str]:
    result = runner.invoke(app, ["checkpoints", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_json_lists_step_size_completeness_and_latest(ckpt_dir: Path) -> None:
    document, stderr = _json("--checkpoint-dir", str(ckpt_dir), "--model", "qwen3_tiny")
    assert document["checkpoint_dir"] == str(ckpt_dir)
    (model,) = document["models"]  # type: ignore[misc]
    assert model["latest"] == "qwen3_tiny-20steps" and model["warnings"] == []
    rows = [(c["step"], c["complete"], c["latest"], c["size_bytes"]) for c in model["checkpoints"]]
    assert rows == [(10, True, False, 110), (20, True, True, 2058), (30, False, False, 100)]
    assert stderr == ""


def test_every_model_is_listed_without_model_flag(ckpt_dir: Path) -> None:
    document, _ = _json("--checkpoint-dir", str(ckpt_dir))
    assert [m["model"] for m in document["models"]] == ["llama_tiny", "qwen3_tiny"]  # type: ignore[index]


def test_table_marks_latest_and_incomplete(ckpt_dir: Path) -> None:
    result = runner.invoke(app, ["checkpoints", "--checkpoint-dir", str(ckpt_dir)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    row20 = next(line for line in lines if "qwen3_tiny-20steps" in line)
    row30 = next(line for line in lines if "qwen3_tiny-30steps" in line)
    assert "latest" in row20 and "2.0 KiB" in row20 and "yes" in row20
    assert "latest" not in row30 and " no " in row30
    assert "a script's own that was never committed" in " ".join(result.stdout.split()), "the caption says what no means"


@pytest.mark.parametrize(
    ("target", "expected"),
    [("qwen3_tiny-30steps", "incomplete"), ("qwen3_tiny-99steps", "does not exist")],
)
def test_pointer_to_a_missing_or_incomplete_checkpoint_warns_on_stderr(ckpt_dir: Path, target: str, expected: str) -> None:
    point(ckpt_dir, "qwen3_tiny", target)
    document, stderr = _json("--checkpoint-dir", str(ckpt_dir), "--model", "qwen3_tiny")
    (model,) = document["models"]  # type: ignore[misc]
    assert model["latest"] == target
    assert expected in model["warnings"][0] and expected in stderr and "warning" in stderr


def test_garbage_pointer_is_a_warning_not_a_crash(ckpt_dir: Path) -> None:
    point(ckpt_dir, "qwen3_tiny", "llama_tiny-5steps")
    document, stderr = _json("--checkpoint-dir", str(ckpt_dir), "--model", "qwen3_tiny")
    (model,) = document["models"]  # type: ignore[misc]
    assert model["latest"] is None and len(model["checkpoints"]) == 3
    assert "of model 'llama_tiny', not 'qwen3_tiny'" in stderr


def test_missing_folder_and_unknown_model_say_so(tmp_path: Path, ckpt_dir: Path) -> None:
    document, stderr = _json("--checkpoint-dir", str(tmp_path / "nowhere"))
    assert document["models"] == [] and "does not exist" in stderr
    document, stderr = _json("--checkpoint-dir", str(ckpt_dir), "--model", "other")
    assert document["models"][0]["checkpoints"] == []  # type: ignore[index]
    assert "no checkpoints of other" in stderr and "llama_tiny, qwen3_tiny" in stderr


def test_default_folder_follows_hyperlaunch_toml_like_submit(tmp_path: Path) -> None:
    assert resolve_checkpoint_dir(cwd=tmp_path, environ={}) == tmp_path / "checkpoints"
    (tmp_path / "hyperlaunch.toml").write_text('checkpoint-dir = "ck"\n[profile.hp]\ncheckpoint_dir = "/fsx/ck"\n')
    assert resolve_checkpoint_dir(cwd=tmp_path, environ={}) == tmp_path / "ck"
    assert resolve_checkpoint_dir(cwd=tmp_path, environ={}, profile="hp") == Path("/fsx/ck")
    env = {"HYPERLAUNCH_CHECKPOINT_DIR": "/env/ck"}
    assert resolve_checkpoint_dir(cwd=tmp_path, environ=env) == Path("/env/ck")
    assert resolve_checkpoint_dir("flag", cwd=tmp_path, environ=env) == tmp_path / "flag"


@pytest.mark.slow
def test_cli_default_folder_is_resolved_from_the_current_directory(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "ck", "qwen3_tiny", 3)
    (tmp_path / "hyperlaunch.toml").write_text('checkpoint_dir = "ck"\n')
    result = subprocess.run(
        [sys.executable, "-m", "hyperlaunch", "checkpoints", "--json"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["checkpoint_dir"] == str(tmp_path / "ck")
    assert document["models"][0]["checkpoints"][0]["step"] == 3


@pytest.mark.slow
def test_bad_profile_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hyperlaunch", "checkpoints", "--profile", "nope"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "profile 'nope'" in result.stderr


def test_format_size_uses_binary_units() -> None:
    assert format_size(0) == "0 B"
    assert format_size(2048) == "2.0 KiB"
    assert format_size(3 * 1024**3) == "3.0 GiB"
    assert format_size(5 * 1024**4) == "5.0 TiB"
