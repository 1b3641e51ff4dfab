"""hyperlaunch.core.protocol.SAVE_SIGNAL (Slurm's warning before the time limit) and
SIGTERM (preemption, scancel) ask the run to stop cleanly: finish the current step, save, exit
with hyperlaunch.core.protocol.REQUEUE_EXIT_CODE."""

from __future__ import annotations

import signal
from types import FrameType

from hyperlaunch.core.protocol import SAVE_SIGNAL

STOP_SIGNALS = (signal.Signals["SIG" + SAVE_SIGNAL], signal.SIGTERM)


class StopRequest:
    """Set from the signal handler; read between steps. The ranks agree on it in an all-reduce
    each step (Trainer._stop_agreed), because a signal may reach one rank a little before
    the others."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        # Only record it: the handler runs between bytecodes, possibly inside a collective.
        self.signal_name = signal.Signals(signum).name


def ignore_stop_signals() -> None:
    """The run is over (trained, saved or failed): a stop signal from now on has nothing left
    to stop. Ignored, not handled: while Python shuts down it puts the default action back for
    every signal it handles, and USR2's default kills the process, so a save signal that
    arrives just after the last step would turn a finished run into a failed step (and one
    more attempt). An ignored signal stays ignored through the shutdown."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
