"""Installing the dev cluster's packages: one install per machine at a time; a second `up`
waits for the first and then finds nothing left to install."""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

import pytest

from hyperlaunch.devcluster import install


def test_a_second_install_waits_for_the_first_and_installs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "INSTALL_LOCK", tmp_path / "install.lock")
    missing = [["slurmd"]]
    monkeypatch.setattr(install, "missing_packages", lambda: list(missing[0]))
    ran: list[list[str]] = []
    monkeypatch.setattr(install.subprocess, "run", lambda args, **_: ran.append(args))
    said: list[str] = []
    with open(tmp_path / "install.lock", "w") as first:
        fcntl.flock(first, fcntl.LOCK_EX)  # the first install is under way
        waiter = threading.Thread(target=install.ensure_installed, args=(said.append,))
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive() and said == ["another dev-cluster install is running; waiting for it to finish"]
        missing[0] = []  # the first install finished
    waiter.join(5)
    assert not waiter.is_alive() and ran == []
