"""Errors in a training step's output that no restart fixes: a script Python cannot parse, a
module that is not there, a name the code never defined, arguments argparse refuses, a script
file that cannot be opened. A user's script records no failure for these (it never got that
far, or does not use hyperlaunch.runtime), so the supervisor restarted it like any crash:
--restarts-in-allocation rounds in each of --max-restarts + 1 attempts, twelve launches by
default, each requeue waiting in the queue again. It now reads the round's own output (its
stderr file, which srun writes the tasks' stderr into) and ends the job at the first such round,
as a failure record would.

Only where the output leaves no doubt: each task's output (srun --label's `N: ` prefix, torch's
`[rankN]: `) is read on its own, and its last uncaught error decides for it. The round is
unfixable when at least one task's last error is, and every other task's is too or only a
reaction to another's end (a peer gone). Anything else is a crash like before: a task that ended
on another error, a death by signal or the OOM killer (no exception to read), an import of a
compiled library (`libcuda.so.1: cannot open shared object file`: the node's driver, or a
build racing another rank), an exception Python reports while shutting down."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence

from hyperlaunch.core.error_lines import is_consequence
from hyperlaunch.core.srun_lines import SLURM_TOOLS, TASK_ENDED, TASK_EXIT, TASK_LABEL
from hyperlaunch.core.trainer_failures import LIBRARY_IMPORT

UNFIXABLE_EXCEPTIONS = ("SyntaxError", "IndentationError", "TabError", "ModuleNotFoundError", "ImportError", "NameError")
"""Python's exceptions for code that cannot run as written, whatever node runs it."""

_RANK = re.compile(r"^\[[\w.-]+\]: ?")
"""torch's `[rank1]: ` on an exception's lines, torchrun --tee's `[default0]:`."""
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception))(?::\s.*)?$")
_DEATH = re.compile(
    r"exitcode\s*:\s*-(?!15\b)\d+|Signal (?!15\b)\d+ \(SIG|\bKilled\b|Out Of Memory|oom[_-]kill|Segmentation fault|"
    r"terminate called|Fatal Python error|core dumped|Bus error|\bAborted\b"
)
"""A process that died without an exception to read: the round is a crash. Not SIGTERM (-15):
torchrun stops a node's other workers with it once one has failed."""
_PYTHON_REFUSED = re.compile(r"^\S*python[\d.]*: (?:can't open file .*\[Errno 2\]|No module named \S+|Error while finding module specification for )")
"""The interpreter's own refusals: `python3: can't open file 'x.py': [Errno 2] ...` (the script is
not where the job looks), `python3: No module named pkg.mod` (`-m` names no module)."""
_USAGE = re.compile(r"^usage: (\S+)")
HF_UNUSED_ARGUMENTS = "Some specified arguments are not used by the HfArgumentParser"
"""transformers' HfArgumentParser on a flag it does not know (a ValueError, argparse's own
refusal in other scripts): a typo in the script's arguments, or in a `{resume?...}` form's."""

TAIL_BYTES = 64 * 1024
"""How much of a round's output is read, from its end."""


def unfixable_error(lines: Sequence[str]) -> tuple[str, int | None]:
    """The line naming an error no restart fixes and the task (srun's label) that printed it,
    None where unlabelled; ('', None) when the round failed any other way."""
    if any(_DEATH.search(line) for line in lines):
        return "", None
    found: tuple[str, int | None] = ("", None)
    for task, stream in _streams(lines).items():
        last = _last_error(stream)
        if not last or is_consequence(last):
            continue
        if not _is_unfixable(last):
            return "", None
        if not found[0]:
            found = (last[:300], task)
    return found


def _streams(lines: Sequence[str]) -> dict[int | None, list[str]]:
    """Each task's lines, its labels taken off, in order."""
    streams: dict[int | None, list[str]] = {}
    for raw in lines:
        label = TASK_LABEL.match(raw)
        text = raw[label.end():] if label else raw
        text = _RANK.sub("", text, count=1).rstrip()
        streams.setdefault(int(label.group(1)) if label else None, []).append(text)
    return streams


def _last_error(stream: list[str]) -> str:
    """The task's last error: an uncaught exception (not one reported while Python shuts down,
    `Exception ignored in:`), the interpreter's refusal, or argparse's `PROG: error:` after its
    usage; '' for none."""
    last, ignored, usage = "", False, ""
    for line in stream:
        if line.startswith("Exception ignored"):
            ignored = True
        elif _EXCEPTION.match(line):
            if not ignored:
                last = line
            ignored = False
        elif _PYTHON_REFUSED.match(line):
            last = line
        elif _USAGE.match(line):
            usage = _USAGE.match(line).group(1)  # type: ignore[union-attr]
        elif usage and line.startswith(f"{usage}: error: ") and not line.startswith(SLURM_TOOLS):
            last = line
    return last


def _is_unfixable(line: str) -> bool:
    match = _EXCEPTION.match(line)
    if not match:
        return True  # the interpreter's refusal, or argparse's
    name = match.group(1).rpartition(".")[2]
    if name == "ValueError" and HF_UNUSED_ARGUMENTS in line:
        return True
    return name in UNFIXABLE_EXCEPTIONS and not (name == "ImportError" and LIBRARY_IMPORT.search(line))


class RoundOutput:
    """The part of a file descriptor's file (the supervisor's stderr) written since `mark()`:
    the round's. Nothing where it is no regular file (a pipe, a terminal)."""

    def __init__(self, fd: int = 2) -> None:
        self.fd = fd
        self.start: int | None = None
        self.scanned = 0
        self.task_failed_seen = False

    def mark(self) -> None:
        self.start = _regular_size(self.fd)
        self.scanned = self.start or 0
        self.task_failed_seen = False

    def lines(self) -> list[str]:
        if self.start is None:
            return []
        data, begin = self._read(self.start)
        lines = data.decode("utf-8", "replace").splitlines()
        return lines[1:] if begin > self.start and lines else lines  # the first one is cut

    def task_failed(self) -> bool:
        """Whether srun has said, since `mark()`, that a task of the round ended on an error or a
        signal, while the round's other tasks may still run: a script's rank that lost its peer
        (gloo's `Connection reset`) records no failure, and srun waits for the dead node's task
        until Slurm marks the node down. Reads only what came since the last call."""
        if self.start is None or self.task_failed_seen:
            return self.task_failed_seen
        asked = self.scanned
        data, begin = self._read(asked)
        whole = data[: data.rfind(b"\n") + 1]  # a line srun is still writing is read next time
        self.scanned = begin + len(whole)
        lines = whole.decode("utf-8", "replace").splitlines()
        if begin > asked and lines:
            lines = lines[1:]  # the first one is cut
        self.task_failed_seen = any(_task_failed(line) for line in lines)
        return self.task_failed_seen

    def _read(self, start: int) -> tuple[bytes, int]:
        """The file from `start` (at most its last TAIL_BYTES) and where that read began."""
        try:
            reader = os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY)
        except OSError:
            return b"", start
        try:
            end = os.fstat(reader).st_size
            begin = max(start, end - TAIL_BYTES)
            return os.pread(reader, max(end - begin, 0), begin), begin
        except OSError:
            return b"", start
        finally:
            os.close(reader)


def _task_failed(line: str) -> bool:
    """srun's line for a task that ended with a code other than 0, or by a signal."""
    if not TASK_ENDED.match(line):
        return False
    code = TASK_EXIT.search(line)
    return code is None or code.group(1) != "0"


def _regular_size(fd: int) -> int | None:
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
