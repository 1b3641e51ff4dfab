"""Shared test settings. Nothing a test does may reach the user's own files: the whole
session (module- and session-scoped fixtures included, and every process they start) runs
with HOME and HYPERLAUNCH_HOME under pytest's temporary directory, and each test gets a
hyperlaunch home of its own on top. The controlling process checks at the end that nothing
was written under the real home. (The integration tests' dev cluster is theirs:
tests/integration/conftest.py brings it up and down.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytest_plugins = ["tests.support.moto_aws"]  # the `aws` fixture: a local moto server

REAL_HOME = Path(os.path.expanduser("~")).resolve()
"""The home of whoever runs the tests, read before the session replaces HOME."""
_STARTED = time.time()


def real_home_writes(home: Path, since: float, *, limit: int = 5) -> list[Path]:
    """What the session wrote under `home`: ~/.hyperlaunch entirely, the rest of the home
    two levels deep (caches that tools keep are not hyperlaunch's doing)."""
    found: list[Path] = []
    ours = home / ".hyperlaunch"
    candidates = list(ours.rglob("*")) if ours.is_dir() else []
    candidates += [p for p in home.glob("*") if p.name not in (".cache", ".config")]
    for path in candidates:
        try:
            if path.lstat().st_mtime >= since:
                found.append(path)
        except OSError:
            continue
        if len(found) >= limit:
            break
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    factory = session.config._tmp_path_factory  # type: ignore[attr-defined]
    base = factory.getbasetemp()
    home = base / "home"
    home.mkdir(exist_ok=True)
    os.environ["HOME"] = str(home)
    os.environ["HYPERLAUNCH_HOME"] = str(base / "hyperlaunch-home")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("hlhome")
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(home))
    return home


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller checks once every worker is done
    written = real_home_writes(REAL_HOME, _STARTED)
    if written:
        print(f"\nFAILED: the test session wrote under the real home {REAL_HOME}: {', '.join(map(str, written))}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
