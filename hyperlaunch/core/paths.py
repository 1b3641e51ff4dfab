"""Where hyperlaunch keeps its own files: one home directory per user, overridable."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hyperlaunch.core.errors import ConfigError

JOB_FILES_FOLDER = ".hyperlaunch"
"""The run folder's subfolder for what `submit` ships with a job: the supervisor's bundle, a
script job's code snapshots."""


WORK_FOLDER = "work"
"""The run folder's subfolder a script job runs in (hyperlaunch.supervisor.work_dir): its relative
writes land there, the code snapshot mirrored in for its relative reads."""


def job_files_dir(run_dir: str) -> str:
    """`<run_dir>/.hyperlaunch`."""
    return os.path.join(run_dir.rstrip("/") or "/", JOB_FILES_FOLDER)


def hyperlaunch_home() -> Path:
    """$HYPERLAUNCH_HOME, else ~/.hyperlaunch. Job records, user config and the dev cluster live here.

    ConfigError when it cannot be a folder (it, or the nearest part of it that exists, is a
    file): said once here, rather than as whichever read or mkdir under it meets it first."""
    override = os.environ.get("HYPERLAUNCH_HOME")
    home = Path(override).expanduser() if override else Path.home() / ".hyperlaunch"
    _check_can_be_folder(home, "HYPERLAUNCH_HOME" if override else "the hyperlaunch home")
    return home


def _check_can_be_folder(home: Path, what: str) -> None:
    for candidate in (home, *home.parents):
        try:
            mode = candidate.stat().st_mode
        except FileNotFoundError:
            continue  # created when first needed
        except (OSError, ValueError) as err:
            raise ConfigError(f"{what} {str(home)[:200]} cannot be used: {getattr(err, 'strerror', None) or err}") from None
        if not stat.S_ISDIR(mode):
            where = "is a file" if candidate == home else f"is under {candidate}, a file"
            raise ConfigError(f"{what} {str(home)[:200]} {where}, not a folder", hint="point HYPERLAUNCH_HOME at a folder")
        return


def is_dir(path: str | Path) -> bool:
    """Path.is_dir, but a name the file system cannot hold (over 255 bytes, a NUL) is no
    folder rather than an error: the validation that follows says what is wrong with it."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def is_file(path: str | Path) -> bool:
    """Path.is_file, with is_dir's tolerance of names no file can have."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False
