"""The one output object: results on stdout, notes and warnings on stderr; the dev cluster
reaches the Slurm environment only through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyperlaunch.cli import app
from hyperlaunch.cli._output import out
from hyperlaunch.slurm import env as slurm_env


def test_json_goes_to_stdout_and_notes_and_warnings_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    out.note("using something")
    out.json({"a": [1, 2]})
    out.warn("careful")
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"a": [1, 2]}
    assert captured.err == "hyperlaunch: using something\nhyperlaunch: warning: careful\n"


@pytest.mark.slow
def test_the_slurm_environment_module_does_not_import_the_dev_cluster() -> None:
    code = "import sys, hyperlaunch.slurm.env, hyperlaunch.slurm.runner, hyperlaunch.slurm.nodes, hyperlaunch.slurm.submission, hyperlaunch.slurm.queue, hyperlaunch.slurm.accounting, hyperlaunch.slurm.arrays, hyperlaunch.runs.launch; print([m for m in sys.modules if 'devcluster' in m])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_a_local_cluster_is_used_only_without_other_config_and_said(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(slurm_env, "SYSTEM_CONF", tmp_path / "none")
    notes: list[str] = []
    env = slurm_env.slurm_environment(local_cluster=lambda: "/dev/cluster.conf", notify=notes.append)
    assert env["SLURM_CONF"] == "/dev/cluster.conf" and notes == ["using the dev cluster (SLURM_CONF=/dev/cluster.conf)"]
    monkeypatch.setenv("SLURM_CONF", "/mine")
    assert slurm_env.slurm_environment(local_cluster=lambda: "/dev/cluster.conf")["SLURM_CONF"] == "/mine"


@pytest.mark.slow
def test_dev_cluster_status_without_a_cluster_exits_with_the_documented_code(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "hyperlaunch", "dev-cluster", "status", "--dir", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 5, result.stderr
    assert result.stderr.startswith("hyperlaunch: error: no dev cluster running in") and "Traceback" not in result.stderr
    assert result.stdout == "", "one line, not a second one saying the same on stdout"
    as_json = CliRunner().invoke(app, ["dev-cluster", "status", "--json", "--dir", str(tmp_path)])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["running"] is False
