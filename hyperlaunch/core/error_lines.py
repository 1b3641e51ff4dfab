"""The error vocabulary of a step's output, read by the supervisor for its decision records and
by `status` for the attempts that wrote none: the line that names a crash's root cause, the
first failed task's exit code, and the lines that are a consequence of a failure elsewhere,
never its cause. Python 3.8 at run time: the supervisor reads them on the batch host."""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence

from hyperlaunch.core.srun_lines import SLURM_TOOLS, TASK_EXIT, without_label
from hyperlaunch.core.trainer_failures import TRAINER_ERROR_PREFIX

_ERROR_LINE = re.compile(r"(?:^|\s|\]:\s*)([A-Za-z_][\w.]*(?:Error|Exception)|error|Killed|Segmentation fault|No module named)\b[: ]")
CONSEQUENCE_ERRORS = (
    "ChildFailedError", "SignalException", "RendezvousConnectionError", "RendezvousClosedError",
    "DistNetworkError", "DistBackendError", "DistStoreError",
)
"""Exceptions that are a consequence of a failure elsewhere, never its cause: torchrun's summary
of a failed worker, a rank's reaction to another's end (its store, its rendezvous, its
process group gone)."""
CONSEQUENCE_WORDS = ("Connection closed by peer", "CANCELLED AT")
"""Lines that follow a failure elsewhere: gloo's word for a peer that went away, srun's for the
step it ended."""


def is_consequence(line: str) -> bool:
    """Whether the line only reports another task's failure (CONSEQUENCE_ERRORS, CONSEQUENCE_WORDS)."""
    return any(word in line for word in CONSEQUENCE_ERRORS) or any(word in line for word in CONSEQUENCE_WORDS)


_RANK_EXCEPTION = re.compile(r"\[rank\d+\]:\s*[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b")
_EXCEPTION = re.compile(r"(?:^|[\s:])[A-Za-z_][\w.]*(?:Error|Exception)\b: ")


def root_error_line(lines: Sequence[str]) -> str:
    """The line that names the root cause of a crash: the trainer's own one-line error, else
    the first exception a rank reported (torch prefixes them with [rankN]), else the first
    exception that is not a consequence of another rank's failure, else the last line that
    says error (often srun's, which only tells that a task ended)."""
    def usable(line: str) -> bool:
        return not is_consequence(line) and not line.startswith("###")

    for line in lines:
        if TRAINER_ERROR_PREFIX in line:
            return without_label(line.strip())[:200]
    for pattern in (_RANK_EXCEPTION, _EXCEPTION):
        for line in lines:
            if pattern.search(line) and usable(line):
                return without_label(line.strip())[:200]
    fallback = [line.strip() for line in lines if _ERROR_LINE.search(line) and usable(line)]
    # srun's "task 0: Exited with exit code 1" only tells that a task ended: the program's own
    # last error (argparse's `train.py: error: unrecognized arguments`) says why.
    own = [line for line in fallback if not line.startswith(SLURM_TOOLS)]
    chosen = own or fallback
    return without_label(chosen[-1])[:200] if chosen else ""


def task_exit_code(lines: Sequence[str]) -> str | None:
    """The exit code of the first task that failed: the worker's own, as torchrun's summary gives
    it (`exitcode  : 3`; torchrun itself exits 1 whatever its worker's was, and srun reports
    that), else srun's. A worker a signal ended: `SIGKILL`, unless another exited with a code of
    its own (the others are then stopped by signal: a consequence, not the cause)."""
    codes = [int(match.group(1)) for match in map(_WORKER_EXIT.search, lines) if match and match.group(1) != "0"]
    own = [code for code in codes if code > 0]
    if own or codes:
        return str(own[0]) if own else _signal_name(-codes[0])
    for line in lines:
        match = TASK_EXIT.search(line)
        if match and match.group(1) != "0":
            return match.group(1)
    return None


_WORKER_EXIT = re.compile(r"\bexitcode\s*:\s*(-?\d{1,3})\b")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
