"""The CLI surface: help from any directory, one-line errors, no heavy imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hyperlaunch
from hyperlaunch.core.errors import EXIT_CODES
from tests.support.cli_runner import one_error_line, run_cli


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperlaunch", *args], capture_output=True, text=True, cwd=cwd, env=env, check=False
    )


@pytest.mark.slow
def test_help_works_from_any_directory(tmp_path: Path) -> None:
    result = _cli("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "dev-cluster" in result.stdout and "hyperlaunch help exit-codes" in result.stdout
    sub = _cli("dev-cluster", "--help", cwd=tmp_path)
    assert sub.returncode == 0
    for command in ("up", "down", "status", "kill-node", "revive-node"):
        assert command in sub.stdout


@pytest.mark.slow
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


@pytest.mark.slow
def test_bad_node_count_is_one_line(tmp_path: Path) -> None:
    result = _cli("dev-cluster", "up", "--nodes", "0", "--dir", str(tmp_path / "c"))
    assert result.returncode == 2
    assert "--nodes must be between 1 and 64" in result.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def test_kill_node_without_a_cluster_says_so(tmp_path: Path) -> None:
    result = _cli("dev-cluster", "kill-node", "node1", "--dir", str(tmp_path))
    assert result.returncode == 5
    assert "no dev cluster is running" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_debug_variable_shows_the_traceback(tmp_path: Path) -> None:
    env = dict(os.environ, HYPERLAUNCH_DEBUG="1")
    result = _cli("dev-cluster", "kill-node", "node1", "--dir", str(tmp_path), env=env)
    assert "Traceback" in result.stderr


@pytest.mark.slow
def test_help_does_not_import_torch_or_transformers() -> None:
    code = "import sys; sys.argv=['hyperlaunch','--help']\ntry:\n from hyperlaunch.cli import main; main()\nexcept SystemExit: pass\nprint('HEAVY', sorted(m for m in ('torch','transformers') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "HEAVY []" in result.stdout


@pytest.mark.slow
def test_exit_codes_are_documented_in_a_help_topic_the_top_level_help_points_to() -> None:
    top = _cli("--help")
    options_at = top.stdout.index("Options:")
    pointer = [line for line in top.stdout[:options_at].splitlines() if "Exit codes" in line]
    assert pointer == ["  Exit codes: `hyperlaunch help exit-codes` says what each one means."]
    assert "invalid input" not in top.stdout  # the table itself is no longer in the way
    topic = _cli("help", "exit-codes")
    assert topic.returncode == 0, topic.stderr
    documented = {int(line.split()[0]): line.split(maxsplit=1)[1] for line in topic.stdout.splitlines()}
    assert documented == EXIT_CODES
    listed = _cli("help")
    assert listed.returncode == 0 and "exit-codes" in listed.stdout


@pytest.mark.parametrize("flag", ["--version", "-V"])
@pytest.mark.slow
def test_version_is_printed_without_building_a_command(flag: str) -> None:
    code = (
        f"import sys; sys.argv=['hyperlaunch', {flag!r}]; from hyperlaunch.cli import main; main();"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith('hyperlaunch.cli.') and m != 'hyperlaunch.cli._errors'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"hyperlaunch {hyperlaunch.__version__}", "LOADED []"]
    assert _cli(flag).stdout == f"hyperlaunch {hyperlaunch.__version__}\n"


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (["sumbit"], ["'sumbit'", "did you mean 'submit'?"]),
        (["stauts", "123"], ["'stauts'", "'status'"]),
        (["help", "exit-code"], ["'exit-code'", "did you mean 'exit-codes'?"]),
        (["dev-cluster", "upp"], ["'upp'", "did you mean 'up'?"]),
        (["dev-cluster", "nope"], ["'hyperlaunch dev-cluster --help' lists the commands"]),
        (["zzzzzz"], ["no command 'zzzzzz'", "'hyperlaunch --help' lists the commands"]),
    ],
)
def test_a_mistyped_command_is_one_line_naming_the_closest(
    args: list[str], parts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one_error_line(run_cli(args, monkeypatch), 2, *parts)


@pytest.mark.slow
def test_usage_errors_exit_2_with_clicks_message_and_no_traceback() -> None:
    for args, message in (
        (("rendr",), "no command 'rendr'; did you mean 'render'?"),
        (("render", "--nodes", "x"), "'x' is not a valid int"),
        (("status", "--bogus"), "No such option: --bogus"),
    ):
        result = _cli(*args)
        assert result.returncode == 2, args
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.slow
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


@pytest.mark.slow
def test_help_imports_neither_rich_nor_the_command_internals() -> None:
    code = "import sys; sys.argv=['hyperlaunch','--help']\ntry:\n from hyperlaunch.cli import main; main()\nexcept SystemExit: pass\nprint('LOADED', sorted(m for m in ('rich.table','rich.console','jinja2','hyperlaunch.devcluster.cluster','hyperlaunch.job.plan') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "LOADED []" in result.stdout


@pytest.mark.slow
def test_help_lists_every_command_as_the_whole_cli_does_and_builds_none() -> None:
    """`hyperlaunch --help` reads each command's docstring, not its 45 job options: the same
    list as the CLI with every command built, and nothing of the job layer loaded."""
    loaded = "\nprint('LOADED', sorted(m for m in sys.modules if m.startswith('hyperlaunch.job')))"
    lazy = "import sys; sys.argv=['hyperlaunch','--help']\ntry:\n from hyperlaunch.cli import main; main()\nexcept SystemExit: pass" + loaded
    whole = "import sys\nfrom hyperlaunch.cli import build_app\ntry:\n build_app()(['--help'], prog_name='hyperlaunch')\nexcept SystemExit: pass" + loaded
    env = {**os.environ, "COLUMNS": "100"}
    listed, built = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env).stdout for code in (lazy, whole))
    assert listed.endswith("LOADED []\n")
    assert listed.split("LOADED")[0] == built.split("LOADED")[0] and "prepare-data  Tokenize INPUT..." in listed
