"""Files that can carry a user's secrets (`--env` values, the submitting environment) are
private to the user: 0600 files in 0700 folders, whatever the umask. A shared login node has
other users, and a rendered script or job record holds `--env HF_TOKEN=...` verbatim."""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """`path` as a folder only its owner can enter: created 0700, or tightened to 0700 when it
    exists, is ours and is open to others (an older hyperlaunch created it with the umask)."""
    path = Path(path)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, DIR_MODE)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only. An existing regular file of ours is
    made 0600 too before anything is written; a pipe or terminal (`-o /dev/stdout`) is left as is."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
        handle.write(text)
