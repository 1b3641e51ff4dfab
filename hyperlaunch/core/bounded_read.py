"""Reading a small file someone else's process writes (a pointer, a record, a log) without
trusting what is there: opened without blocking and read only when it is a regular file
(a FIFO cannot hang the reader, a device or a link to /dev/zero cannot fill its memory),
and at most a bound. Torch-free; the CLI and the trainer share it."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotRegularFile(OSError):
    """Something other than a regular file is where a file should be."""

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(f"{path} is not a regular file")
        self.is_dir = stat.S_ISDIR(mode)


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of `path`, at most `limit`+1 of them (so a caller can tell it is too long).
    FileNotFoundError when there is none, NotRegularFile for a folder, FIFO or device, any
    other OSError as the system says it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        return _read(fd, None if limit is None else limit + 1)
    finally:
        os.close(fd)


def _read(fd: int, most: int | None) -> bytes:
    """At most `most` bytes from `fd` (None: to its end)."""
    chunks, size = [], 0
    while most is None or size < most:
        chunk = os.read(fd, 1 << 20 if most is None else most - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_regular_tail(path: Path, size: int) -> bytes:
    """The last `size` bytes of `path` (a log someone is writing), read as read_regular reads:
    only from a regular file, never blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(path, info.st_mode)
        os.lseek(fd, max(0, info.st_size - size), os.SEEK_SET)
        return _read(fd, size)
    finally:
        os.close(fd)
