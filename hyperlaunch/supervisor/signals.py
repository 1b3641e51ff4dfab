"""The signals that reach the supervisor: Slurm's save warning before the time limit (--signal=B:...),
passed on to the running training step, and the stop signals (scancel's TERM), which end the
attempt unless it is ending already."""

from __future__ import annotations

import signal

from hyperlaunch.core.protocol import SAVE_SIGNAL
from hyperlaunch.supervisor.output import out
from hyperlaunch.supervisor.step import TrainingStep

SAVE_SIGNUM = getattr(signal, "SIG" + SAVE_SIGNAL)
STOP_SIGNUMS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Terminated(Exception):
    """A stop signal (scancel's TERM) reached the supervisor."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.status = 128 + signum


class Signals:
    """What the signals told this attempt, and whether a stop signal still interrupts it."""

    def __init__(self, step: TrainingStep) -> None:
        self.step = step
        """The step the save signal is passed on to, while it runs."""
        self.save_requested = False
        """The save signal came: every trainer saves a checkpoint and exits, then the job is requeued."""
        self.ending = False
        """The attempt ends on its own (a requeue under way, or its end): a stop signal no longer
        interrupts it (Terminated)."""

    def install(self) -> None:
        signal.signal(SAVE_SIGNUM, self._on_save_signal)
        for signum in STOP_SIGNUMS:
            signal.signal(signum, self._on_stop_signal)

    def _on_save_signal(self, signum: int, frame: object) -> None:
        # Slurm sends it to the batch step (--signal=B:...) before the time limit: every trainer
        # saves a checkpoint and exits, then the job is requeued.
        self.save_requested = True
        out(f"### hyperlaunch signal {SAVE_SIGNAL} received; forwarding to the training step")
        self.step.send(SAVE_SIGNUM)

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        if not self.ending:
            raise Terminated(signum)
