"""A progress bar of bytes with bytes/s on stderr, for terminals only (logs get the summary)."""

from __future__ import annotations

import sys
from typing import Any


class ByteBar:
    def __init__(self, what: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn(what), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
            console=Console(stderr=True), transient=True,
        )
        self._task: Any = None

    def update(self, done: int, total: int) -> None:
        if self._task is None:
            self._progress.start()
            self._task = self._progress.add_task("bytes", total=total)
        self._progress.update(self._task, completed=done)

    def stop(self) -> None:
        self._progress.stop()


def byte_bar(what: str, quiet: bool = False) -> ByteBar | None:
    """A bar on a terminal's stderr; None when stderr is a file or pipe, or `quiet` (--json)."""
    return ByteBar(what) if sys.stderr.isatty() and not quiet else None
