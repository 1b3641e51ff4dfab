"""The CLI surface: help from any directory, one-line errors, no heavy imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperlaunch", *args], capture_output=True, text=True, cwd=cwd, env=env, check=False
    )


def test_help_works_from_any_directory(tmp_path: Path) -> None:
    result = _cli("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "dev-cluster" in result.stdout and "Exit codes" in result.stdout
    sub = _cli("dev-cluster", "--help", cwd=tmp_path)
    assert sub.returncode == 0
    for command in ("up", "down", "status", "kill-node", "revive-node"):
        assert command in sub.stdout


def test_not_root_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    code = (
        "import os, sys; os.geteuid = lambda: 1000; sys.argv = ['hyperlaunch', 'dev-cluster', 'up', '--dir', sys.argv[1]];"
        "from hyperlaunch.cli import main; main()"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c")], capture_output=True, text=True, check=False)
    assert result.returncode == 5
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[-1]] and "must run as root" in lines[-1] and "sudo" in lines[-1]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "c").exists()


def test_bad_node_count_is_one_line(tmp_path: Path) -> None:
    result = _cli("dev-cluster", "up", "--nodes", "0", "--dir", str(tmp_path / "c"))
    assert result.returncode == 2
    assert "--nodes must be between 1 and 64" in result.stderr
    assert not (tmp_path / "c").exists()


def test_kill_node_without_a_cluster_says_so(tmp_path: Path) -> None:
    result = _cli("dev-cluster", "kill-node", "node1", "--dir", str(tmp_path))
    assert result.returncode == 5
    assert "no dev cluster is running" in result.stderr and "Traceback" not in result.stderr


def test_debug_variable_shows_the_traceback(tmp_path: Path) -> None:
    env = dict(os.environ, HYPERLAUNCH_DEBUG="1")
    result = _cli("dev-cluster", "kill-node", "node1", "--dir", str(tmp_path), env=env)
    assert "Traceback" in result.stderr


def test_help_does_not_import_torch_or_transformers() -> None:
    code = "import sys; sys.argv=['hyperlaunch','--help']\ntry:\n from hyperlaunch.cli import main; main()\nexcept SystemExit: pass\nprint('HEAVY', sorted(m for m in ('torch','transformers') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "HEAVY []" in result.stdout


def test_usage_errors_exit_2_with_clicks_message_and_no_traceback() -> None:
    for args, message in (
        (("rendr",), "No such command 'rendr'"),
        (("render", "--nodes", "x"), "'x' is not a valid int"),
        (("status", "--bogus"), "No such option: --bogus"),
    ):
        result = _cli(*args)
        assert result.returncode == 2, args
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_one_command_runs_as_it_does_inside_the_whole_cli(tmp_path: Path) -> None:
    """main() builds only the command it runs; its output must be the whole CLI's."""
    from typer.testing import CliRunner

    from hyperlaunch.cli import app

    args = ["render", "--nodes", "2", "--model", "qwen3_tiny", "--checkpoint-dir", "/fsx/ckpt"]
    whole = CliRunner().invoke(app, args, env={"HYPERLAUNCH_HOME": str(tmp_path)})
    alone = _cli(*args, env={**os.environ, "HYPERLAUNCH_HOME": str(tmp_path)})
    assert whole.exit_code == 0 and alone.returncode == 0, alone.stderr
    assert alone.stdout == whole.stdout
    assert "hyperlaunch render [OPTIONS]" in _cli("render", "--help").stdout.splitlines()[0]


def test_help_imports_neither_rich_nor_the_command_internals() -> None:
    code = "import sys; sys.argv=['hyperlaunch','--help']\ntry:\n from hyperlaunch.cli import main; main()\nexcept SystemExit: pass\nprint('LOADED', sorted(m for m in ('rich.table','rich.console','jinja2','hyperlaunch.devcluster.cluster','hyperlaunch.job.plan') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "LOADED []" in result.stdout
