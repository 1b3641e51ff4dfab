"""Errors in a training step's output that no restart can fix: a script Python cannot parse, a
module that is not there, arguments argparse refuses, a script file that cannot be opened. A
user's script records no failure for these (it never got that far, or does not use
hyperlaunch.runtime), so the supervisor restarted it like any crash: --restarts-in-allocation
rounds in each of --max-restarts + 1 attempts, twelve launches by default, each requeue waiting
in the queue again. It now reads the round's own output (its stderr file, which srun writes the
tasks' stderr into) and ends the job at the first such round, as a failure record would.

Only where every primary error of the round is one of these: a round that also failed some other
way (an exception raised while handling a missing optional import, a rank that lost its peer)
is a crash like any other."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence

UNFIXABLE_EXCEPTIONS = ("SyntaxError", "IndentationError", "TabError", "ModuleNotFoundError", "ImportError", "NameError")
"""Python's exceptions for code that cannot run as written, whatever node runs it."""

# What launchers put before a task's line: srun --label (`0: `), torchrun --tee (`[default0]:`),
# torch's own rank prefix (`[rank1]:`).
_PREFIX = r"^(?:\d+:\s*)?(?:\[[\w.-]+\]:\s*)?"
_LAUNCHER_PREFIX = re.compile(_PREFIX)
_EXCEPTION = re.compile(_PREFIX + r"([A-Za-z_][\w.]*(?:Error|Exception))(?::\s.*)?$")
_SECONDARY = ("ChildFailedError", "SignalException", "RendezvousConnectionError", "DistNetworkError")
"""torchrun's summary of a failed worker, and a rank's reaction to another's end: never a cause."""
_ARGPARSE_USAGE = re.compile(_PREFIX + r"usage: ")
_ARGPARSE_ERROR = re.compile(_PREFIX + r"\S+: error: .+")
_PYTHON_REFUSED = re.compile(
    _PREFIX + r"\S*python[\d.]*: (?:can't open file .*\[Errno 2\]|No module named \S+|Error while finding module specification for )"
)
"""The interpreter's own refusals: `python3: can't open file 'x.py': [Errno 2] ...` (the script is
not where the job looks), `python3: No module named pkg.mod` (`-m` names no module)."""

TAIL_BYTES = 64 * 1024
"""How much of a round's output is read, from its end."""


def unfixable_error(lines: Sequence[str]) -> str:
    """The line naming an error no restart fixes, without the launcher's prefix; '' when the
    round failed any other way."""
    found = ""
    for raw in lines:
        line = raw.strip()
        match = _EXCEPTION.match(line)
        if match:
            name = match.group(1).rpartition(".")[2]
            if name in _SECONDARY:
                continue
            if name not in UNFIXABLE_EXCEPTIONS:
                return ""
            found = found or line
        elif _PYTHON_REFUSED.match(line):
            found = found or line
    if not found and any(_ARGPARSE_USAGE.match(line.strip()) for line in lines):
        found = next((line.strip() for line in lines if _ARGPARSE_ERROR.match(line.strip())), "")
    return _LAUNCHER_PREFIX.sub("", found, count=1)[:300]


class RoundOutput:
    """The part of a file descriptor's file (the supervisor's stderr) written since `mark()`:
    the round's. Nothing where it is no regular file (a pipe, a terminal)."""

    def __init__(self, fd: int = 2) -> None:
        self.fd = fd
        self.start: int | None = None

    def mark(self) -> None:
        self.start = _regular_size(self.fd)

    def lines(self) -> list[str]:
        if self.start is None:
            return []
        try:
            reader = os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY)
        except OSError:
            return []
        try:
            end = os.fstat(reader).st_size
            begin = max(self.start, end - TAIL_BYTES)
            data = os.pread(reader, max(end - begin, 0), begin)
        except OSError:
            return []
        finally:
            os.close(reader)
        lines = data.decode("utf-8", "replace").splitlines()
        return lines[1:] if begin > self.start and lines else lines  # the first one is cut


def _regular_size(fd: int) -> int | None:
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
