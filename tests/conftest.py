"""Shared test settings: every test gets its own hyperlaunch home so nothing touches the
user's; the session's dev cluster is brought down once, by the controlling process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.devcluster_helpers import hyperlaunch, session_cluster_root


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("hlhome")
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(home))
    return home


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller stops the cluster after every worker is done
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    root = session_cluster_root(factory.getbasetemp())
    if (root / "cluster.json").exists():
        hyperlaunch("dev-cluster", "down", "--dir", str(root), timeout=120)
