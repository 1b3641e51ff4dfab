"""One Slurm job at a time trains into a checkpoint folder and model
(hyperlaunch.core.protocol.CHECKPOINT_LOCK_PREFIX). The lock names the job, not a process, so a
requeued attempt of the same job takes it over, and a job Slurm no longer runs leaves it stale,
to be taken. `submit` and `resume` refuse a second recorded job; this guards against jobs
submitted by other means."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from hyperlaunch.core.protocol import format_checkpoint_lock, read_checkpoint_lock
from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.supervisor import slurm_calls

LIVE_STATES = ACTIVE_STATES - {"COMPLETING"}
"""A holder in one of these keeps its lock; COMPLETING is waited out (its trainers may still be
saving), for at most COMPLETING_WAIT_S."""
COMPLETING_WAIT_S = 120
TRIES = 5

TAKEN, HELD, UNDECIDED = "taken", "held", "undecided"


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class CheckpointLock:
    def __init__(
        self,
        path: str,
        job_id: str,
        host: str,
        *,
        state_of: Callable[[str], str] = slurm_calls.job_state,
        sleep: Callable[[float], None] = time.sleep,
        say: Callable[[str], None] = print,
    ) -> None:
        self.path = path
        self.job_id = job_id
        self.host = host
        self.holder: str | None = None
        self.holder_state: str | None = None
        self.keep = False
        """Set once the job is requeued: the next attempt takes the lock over."""
        self._state_of = state_of
        self._sleep = sleep
        self._say = say

    def _holder_state(self, job: str) -> str:
        waited = 0
        while True:
            state = self._state_of(job)
            if state != "COMPLETING" or waited >= COMPLETING_WAIT_S:
                return state
            self._sleep(2)
            waited += 2

    def _create(self, mine: str) -> bool:
        # A hard link appears whole, or not at all when the lock exists; O_EXCL where the file
        # system has no hard links.
        try:
            os.link(mine, self.path)
            return True
        except FileExistsError:
            return False
        except OSError:
            pass
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            return False
        with os.fdopen(fd, "w") as handle, open(mine) as source:
            handle.write(source.read())
        return True

    def take(self) -> str:
        """TAKEN (or already this job's), HELD by another live job, or UNDECIDED."""
        mine = f"{self.path}.{self.job_id}.{os.getpid()}"
        try:
            with open(mine, "w") as handle:
                handle.write(format_checkpoint_lock(self.job_id, self.host, utc_now()))
        except OSError:
            return UNDECIDED
        try:
            return self._take(mine)
        finally:
            _remove(mine)

    def _take(self, mine: str) -> str:
        for _ in range(TRIES):
            if self._create(mine):
                return TAKEN
            self.holder = read_checkpoint_lock(Path(self.path))
            if self.holder == self.job_id:
                return TAKEN
            if self.holder:
                self.holder_state = self._holder_state(self.holder)
                if self.holder_state in LIVE_STATES:
                    return HELD
                if self.holder_state == "UNKNOWN":
                    self._sleep(2)
                    continue
            else:
                self._sleep(1)  # a lock without a job id: being written, or broken; stale if it stays so
                if read_checkpoint_lock(Path(self.path)):
                    continue
            self._move_stale_aside()
        return UNDECIDED

    def _move_stale_aside(self) -> None:
        # Moved aside, and put back if another job replaced it meanwhile.
        aside = f"{self.path}.stale.{self.job_id}.{os.getpid()}"
        try:
            os.rename(self.path, aside)
        except OSError:
            return
        if read_checkpoint_lock(Path(aside)) != self.holder:
            try:
                os.link(aside, self.path)
            except OSError:
                pass
        _remove(aside)
        self._say(f"hyperlaunch: took over the stale checkpoint lock of job {self.holder or '?'} ({self.holder_state or 'no job'}): {self.path}")

    def release(self) -> None:
        """On the way out: the lock goes unless the job comes back (requeued), so that the next
        job needs no Slurm answer to take it."""
        if not self.keep and read_checkpoint_lock(Path(self.path)) == self.job_id:
            _remove(self.path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
