"""The restart budget as one attempt spends it: the attempts in a row that completed no checkpoint,
counted from the earlier attempts' records at the start and with this one's at its end, against
--max-restarts. The arithmetic and its messages are the protocol's (hyperlaunch.core.protocol),
which `status` reads too."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from hyperlaunch.core.protocol import (
    failures_after,
    failures_in_a_row,
    may_requeue,
    progress_path,
    progress_step,
    refusal_at_start,
    refusal_to_requeue,
)


class RestartBudget:
    """This attempt's part in the budget, and its progress record (rank 0 writes it where it
    completes a checkpoint): the one thing that resets the count."""

    def __init__(self, run_dir: Path, job: str, restart: int, max_restarts: int) -> None:
        self.run_dir = run_dir
        self.job = job
        self.restart = restart
        self.max_restarts = max_restarts
        self.progress_record = progress_path(run_dir, job, restart)
        self.failures = 0
        """Attempts in a row without a new checkpoint, this one counted once it ends (spend())."""

    def start(self) -> str | None:
        """The count before this attempt, from a clean progress record: why the attempt may not
        run (the budget is spent), or None."""
        # An earlier job with this id must not decide this attempt (a rebuilt cluster numbers its
        # jobs from the start again, into the same run dir).
        with contextlib.suppress(OSError):
            self.progress_record.unlink()
        self.failures = failures_in_a_row(self.run_dir, self.job, self.restart)
        return refusal_at_start(self.failures, self.restart, self.max_restarts)

    def checkpoint_step(self) -> int:
        """The newest step this attempt completed a checkpoint of, from its progress record."""
        return progress_step(self.run_dir, self.job, self.restart)

    def spend(self) -> bool:
        """This attempt counted (a failure unless it completed a checkpoint): whether the job
        may be requeued for another."""
        self.failures = failures_after(os.path.lexists(self.progress_record), self.failures)
        return may_requeue(self.failures, self.restart, self.max_restarts)

    def refusal(self) -> str:
        """Why spend() said no."""
        return refusal_to_requeue(self.failures, self.restart, self.max_restarts)
