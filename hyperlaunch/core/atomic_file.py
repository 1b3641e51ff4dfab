"""One way to replace a file whole or not at all, for every file other processes read while
it may be rewritten: checkpoint pointers, prepared-data manifests and shards, enroot's
credentials, the HyperPod answer cache."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

TEMP_SUFFIX = ".tmp"
"""Temp files are `.<name>.<random>.tmp` beside the file: hidden (every reader of these
folders skips dot names), and recognisable to whoever cleans up after a killed writer."""


def write_atomically(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """`data` into `path` through a hidden temp file beside it, fsynced and renamed over it: a
    reader sees the old file or the new one, never part of one. `mode`: the file's permission
    bits whatever the umask (0o600 for a private file); None creates it like any file of the
    user's (0666 less the umask). OSError on failure, with no temp file left behind."""
    tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}{TEMP_SUFFIX}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable; not every file system allows it, which is no error."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
