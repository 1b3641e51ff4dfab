"""Shared test settings: every test gets its own hyperlaunch home so nothing touches the user's."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("hlhome")
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(home))
    return home
