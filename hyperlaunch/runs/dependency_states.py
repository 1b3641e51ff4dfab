"""The jobs a submitted job waits for (--after, resume --after-end) as `status` sees them: each
one's state now, and for a job that never started, the one it waited to complete that ended
otherwise, which means it never runs. (What is checked before sbatch: hyperlaunch.runs.waits.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.runs.attempts import started
from hyperlaunch.slurm.accounting import Attempt


@dataclass(frozen=True)
class Dependency:
    job: str
    kind: str
    """`ok`: starts once `job` completed; `any`: however it ended."""
    state: str
    """`job`'s Slurm state now (UNKNOWN when Slurm no longer knows it)."""


def blocker_of(waits_for: Sequence[Dependency], attempts: Sequence[Attempt]) -> Dependency | None:
    """For a job that never started: a job it waited to complete that ended otherwise (Slurm
    cancels it then, --kill-on-invalid-dep), or None."""
    if any(started(a) for a in attempts):
        return None
    for waited in waits_for:
        if waited.kind == "ok" and waited.state not in ACTIVE_STATES and waited.state not in ("COMPLETED", "UNKNOWN"):
            return waited
    return None


def never_runs_text(blocker: Dependency | None) -> str | None:
    """Why a job (or a sweep) that `blocker` failed never runs, in words; None without one."""
    if blocker is None:
        return None
    return f"job {blocker.job} ended {blocker.state}; this one waited for it to complete (--after {blocker.job}:ok)"


class WaitsFor:
    """What a job that waits for others says of them: the blocker, and why it never runs.
    Mixed into the statuses that have `waits_for` and Slurm `attempts`."""

    state: str
    waits_for: tuple[Dependency, ...]
    attempts: tuple[Attempt, ...]
    pending_reason: str
    """While PENDING: squeue's word for why (Resources, Priority, ...); "" otherwise."""

    @property
    def blocker(self) -> Dependency | None:
        """For a job that never started: a job it waited to complete that ended otherwise."""
        return blocker_of(self.waits_for, self.attempts)

    @property
    def never_runs(self) -> str | None:
        """Why a job that never started never will, or None."""
        return never_runs_text(self.blocker)
