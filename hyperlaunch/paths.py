"""Where hyperlaunch keeps its own files: one home directory per user, overridable."""

from __future__ import annotations

import os
from pathlib import Path


def hyperlaunch_home() -> Path:
    """$HYPERLAUNCH_HOME, else ~/.hyperlaunch. Job records, user config and the dev cluster live here."""
    override = os.environ.get("HYPERLAUNCH_HOME")
    return Path(override).expanduser() if override else Path.home() / ".hyperlaunch"
