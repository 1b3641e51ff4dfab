"""What the supervisor prints: attempt markers on both logs (so that `hyperlaunch logs` splits
the .out and the .err file into attempts alike), messages on stderr. Written straight to the
file descriptors: a signal handler prints too, and the job's srun writes to the same files."""

from __future__ import annotations

import os

from hyperlaunch.core.protocol import format_attempt_marker
from hyperlaunch.supervisor.lock import utc_now


def _write(fd: int, line: str) -> None:
    data = (line + "\n").encode("utf-8", "replace")
    while data:
        try:
            written = os.write(fd, data)
        except OSError:
            return
        data = data[written:]


def out(line: str) -> None:
    _write(1, line)


def err(line: str) -> None:
    _write(2, line)


class Markers:
    def __init__(self, restart: int, job_id: str) -> None:
        self.restart = restart
        self.job_id = job_id

    def __call__(self, event: str, fields: str) -> None:
        line = format_attempt_marker(event, self.restart, self.job_id, fields, utc_now())
        out(line)
        err(line)
