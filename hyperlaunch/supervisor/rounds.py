"""The rounds of trainers inside one allocation: which round runs, how many in a row were
restarted without a new checkpoint, why the next one starts, and where its trainers record a
failure. What to do after a round is hyperlaunch.supervisor.decisions'."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.core.protocol import RestartCause
from hyperlaunch.core.trainer_failures import trainer_failure_path, trainer_failure_round


class Rounds:
    """The round counter and what each round is told."""

    def __init__(self, run_dir: Path, job: str, restart: int, restart_cause: str | None) -> None:
        self.run_dir = run_dir
        self.job = job
        self.restart = restart
        self.number: int | None = None
        """The round running or last run, from 0; None before the allocation is taken (an
        attempt refused at its start runs none)."""
        self.in_row = 0
        """Rounds restarted in a row inside this allocation without a new checkpoint."""
        self.restart_cause = restart_cause
        """Why the next round of trainers starts (the trackers log it with the restart): the
        previous attempt's end for the first round, None for the job's first start."""
        self.failure_record = trainer_failure_path(run_dir, job, restart)
        """Where the round's trainers write a failure record."""

    def first(self) -> None:
        """The allocation is taken: round 0 comes."""
        self.number = 0

    def progressed(self) -> None:
        """The round completed a checkpoint."""
        self.in_row = 0

    def next(self, cause: RestartCause, *, in_row: bool) -> int:
        """Another round inside the allocation, started for `cause`; `in_row` counts it among
        the restarts without a new checkpoint (a crash or hang, not a spare's start). Its number."""
        assert self.number is not None
        if in_row:
            self.in_row += 1
        self.number += 1
        self.restart_cause = cause.value
        self.failure_record = trainer_failure_path(self.run_dir, self.job, self.restart, self.number)
        return self.number

    def record_before(self) -> Path | None:
        """Where the round before this one recorded its failure, if it did: this allocation's
        previous round, or for the first round the last round of the attempt before (the
        supervisor compares the two: TrainerFailure.repeats). None for the job's first round."""
        if self.number:
            return trainer_failure_path(self.run_dir, self.job, self.restart, self.number - 1)
        if not self.restart:
            return None
        earlier = (self.job, self.restart - 1)
        rounds = [key[2] for key in map(trainer_failure_round, _names(self.run_dir)) if key is not None and key[:2] == earlier]
        return trainer_failure_path(self.run_dir, self.job, self.restart - 1, max(rounds)) if rounds else None


def _names(folder: Path) -> list[str]:
    try:
        return [entry.name for entry in folder.iterdir()]
    except OSError:
        return []
