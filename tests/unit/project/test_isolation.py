"""The test session never touches the user's home: module-scoped fixtures (which run before
any function-scoped one) and the processes tests start see a temporary HOME and
HYPERLAUNCH_HOME, and the end-of-session check finds writes under a home."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyperlaunch.core.paths import hyperlaunch_home
from tests.conftest import REAL_HOME, real_home_writes


@pytest.fixture(scope="module")
def homes_seen_by_a_module_fixture() -> tuple[Path, Path]:
    return Path.home(), hyperlaunch_home()


def test_module_fixtures_see_a_temporary_home(homes_seen_by_a_module_fixture: tuple[Path, Path]) -> None:
    home, hl_home = homes_seen_by_a_module_fixture
    for path in (home, hl_home):
        assert not path.resolve().is_relative_to(REAL_HOME), path


@pytest.mark.slow
def test_child_processes_inherit_the_temporary_home() -> None:
    code = "import pathlib, os; print(pathlib.Path.home()); print(os.environ['HYPERLAUNCH_HOME'])"
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert all(not Path(line).resolve().is_relative_to(REAL_HOME) for line in lines), lines


def test_the_end_of_session_check_finds_writes(tmp_path: Path) -> None:
    since = time.time() - 1
    assert real_home_writes(tmp_path, since) == []
    (tmp_path / ".hyperlaunch" / "jobs" / "12").mkdir(parents=True)
    (tmp_path / ".hyperlaunch" / "jobs" / "12" / "record.json").write_text("{}")
    assert tmp_path / ".hyperlaunch" / "jobs" / "12" / "record.json" in real_home_writes(tmp_path, since)
    old = time.time() + 3600
    for path in (tmp_path / ".hyperlaunch").rglob("*"):
        os.utime(path, (old, old))
    assert real_home_writes(tmp_path, old + 1) == []
