"""`hyperlaunch render`: prints what render_sbatch gives for the same layered settings, fails
in one line, and starts without importing torch or transformers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyperlaunch.cli import app
from hyperlaunch.job.plan import build_spec
from hyperlaunch.script.render import render_sbatch

HEAVY = ("torch", "transformers")


@pytest.mark.slow
def test_render_prints_the_script_for_the_flags(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["render", "-m", "qwen3_tiny", "-N", "2", "--env", "A=b c", "--no-hyperpod", "--", "--lr", "3e-4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    expected = render_sbatch(
        build_spec(
            {"model": "qwen3_tiny", "nodes": 2, "env": ["A=b c"], "hyperpod": "off", "trainer_args": ["--lr", "3e-4"]},
            cwd=tmp_path,
        )
    )
    assert result.stdout == expected
    assert result.stdout.endswith("  --lr 3e-4\n")


@pytest.mark.slow
def test_render_writes_to_a_file_with_output(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["render", "-m", "qwen3_tiny", "-o", str(tmp_path / "job.sbatch")])
    assert result.exit_code == 0
    assert (tmp_path / "job.sbatch").read_text().startswith("#!/bin/bash\n")


def _run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # Runs the real entry point and reports which heavy modules got imported along the way.
    code = (
        "import sys\n"
        "from hyperlaunch.cli import main\n"
        f"sys.argv = ['hyperlaunch', *{list(args)!r}]\n"
        "try:\n    main()\n"
        f"finally:\n    print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_help_and_render_import_neither_torch_nor_transformers_and_start_fast(tmp_path: Path) -> None:
    for args in (("--help",), ("render", "--model", "qwen3_tiny", "--nodes", "2")):
        started = time.monotonic()
        result = _run_cli(*args, cwd=tmp_path)
        elapsed = time.monotonic() - started
        assert result.returncode == 0, result.stderr
        assert "HEAVY=\n" in result.stderr, result.stderr
        # torch alone takes seconds to import; the CLI path takes a fraction of one. The bound
        # is loose because test machines are shared.
        assert elapsed < 5, f"{args} took {elapsed:.1f}s"


@pytest.mark.slow
def test_invalid_input_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    for args in (("render", "-m", "nope"), ("render", "-m", "qwen3_tiny", "-N", "0"), ("render", "-m", "qwen3_tiny", "--instance-type", "x9")):
        result = _run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2
        errors = [line for line in result.stderr.splitlines() if not line.startswith("HEAVY=")]
        assert len(errors) == 1 and errors[0].startswith("hyperlaunch: error: ")


@pytest.mark.slow
def test_a_bad_hyperlaunch_toml_is_exit_code_3(tmp_path: Path) -> None:
    (tmp_path / "hyperlaunch.toml").write_text("nodez = 2\n")
    result = _run_cli("render", "-m", "qwen3_tiny", cwd=tmp_path)
    assert result.returncode == 3 and "unknown key 'nodez'" in result.stderr


@pytest.mark.slow
def test_the_mission_commands_script_is_short_enough_to_read(tmp_path: Path, monkeypatch) -> None:
    """Issue 23: under 80 lines, what the job is at a glance; the logic lives in the supervisor."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    result = CliRunner().invoke(app, ["render", "--nodes", "2", "--model", "qwen3_0_6b"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) < 80
    assert "\n  --model qwen3_0_6b \\\n" in result.stdout and "exec python3 " in result.stdout


@pytest.mark.slow
def test_a_file_where_a_folder_goes_is_refused_by_render_as_by_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.cli_runner import one_error_line, run_cli

    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    for flag in ("--log-dir", "--run-dir", "--checkpoint-dir"):
        one_error_line(run_cli(["render", "-m", "qwen3_tiny", flag, str(taken)], monkeypatch), 2, f"{flag} {taken}: a file is there")
    assert taken.read_text() == "mine\n"


@pytest.mark.slow
def test_render_lists_what_the_configuration_set_and_where_never_an_env_value(tmp_path: Path) -> None:
    (tmp_path / "hyperlaunch.toml").write_text(
        'partition = "debug"\ntime = "2h"\nenv = ["SECRET=abc"]\ntrainer_args = "--lr 3e-4"\n'
        'tracker = ["mlflow"]\nmlflow_uri = "http://me:pw@127.0.0.1:5000"\n[profile.p]\nnodes = 2\n'
    )
    result = _run_cli("render", "-m", "qwen3_tiny", "--profile", "p", "--time", "1h", "--env", "MINE=1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    block = result.stderr.split("hyperlaunch: from your configuration:\n", 1)[1].splitlines()
    config = str(tmp_path / "hyperlaunch.toml")
    assert [line.split() for line in block[:6]] == [
        ["--env", "SECRET", config], ["--mlflow-uri", "http://***@127.0.0.1:5000", config], ["--nodes", "2", config, "[profile.p]"],
        ["--partition", "debug", config], ["--tracker", "mlflow", config], ["after", "--", "--lr", "3e-4", config],
    ], result.stderr
    # The command line's own settings stay unlisted; no env value, no URI password.
    assert "abc" not in result.stderr and "pw@" not in result.stderr and "--time" not in "\n".join(block[:6]) and "MINE" not in "\n".join(block)
