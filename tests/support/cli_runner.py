"""Run the real CLI entry point (`hyperlaunch.cli.main`, with its one-line error mapping and
exit codes) in this process, capturing what it prints."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch) -> CliResult:
    from hyperlaunch.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "argv", ["hyperlaunch", *args])
    code = 0
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main()
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return CliResult(code, stdout.getvalue(), stderr.getvalue())


def one_error_line(result: CliResult, code: int, *parts: str) -> str:
    """The CLI failed with `code` and said so in one line, naming each of `parts`, no traceback."""
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hyperlaunch: error: "), result.stderr
    assert "internal error" not in lines[0] and "Traceback" not in result.stderr
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def stub_slurm(folder: Path, scripts: Mapping[str, str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Executable stand-ins for Slurm's commands (name -> script) in `folder`, first on PATH,
    with STUB naming the folder (where they keep their state), SLURM_CONF naming an empty file
    (a cluster is "configured": no dev cluster is looked up), run from `cwd`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in scripts.items():
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("STUB", str(folder))
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    (cwd / "slurm.conf").touch()
    monkeypatch.setenv("SLURM_CONF", str(cwd / "slurm.conf"))
    monkeypatch.chdir(cwd)
    return folder
