"""What `status` says of a job that waits, for others (--after) or for Slurm (squeue's reason): a
training's, a sweep's element's or a prepare-data or export job's alike: its state cell in a
list, its lines in `status JOB`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperlaunch.runs.dependency_states import Dependency, WaitsFor


def never_runs_cell(state: str, blocker: Dependency) -> str:
    """A state cell for a job Slurm cancelled because a job it waited for failed: that is why,
    not "cancelled"."""
    return f"{state} (never runs: job {blocker.job} {blocker.state})"


def pending_cell(waits_for: Sequence[Dependency]) -> str:
    """A state cell for a job pending behind others."""
    return f"PENDING (after {', '.join(d.job for d in waits_for)})"


def held_cell(status: WaitsFor, limit: int | None = 60) -> str | None:
    """A pending job's state cell: the jobs it waits for, else squeue's reason; None when
    neither holds it."""
    if status.state == "PENDING" and status.waits_for:
        return pending_cell(status.waits_for)
    if status.pending_reason:
        return pending_reason_cell(status.pending_reason, limit)
    return None


def waiting_lines(status: WaitsFor) -> list[str]:
    """Why a job never runs, or while it is pending, what it waits for and where those are, or
    else what squeue's reason for holding it means."""
    if status.never_runs:
        return [f"  never runs: {status.never_runs}"]
    if status.waits_for and status.state == "PENDING":
        waited = ", ".join(f"job {d.job} ({'to complete' if d.kind == 'ok' else 'to end'}; {d.state})" for d in status.waits_for)
        return [f"  waits for:  {waited}"]
    return pending_line([status.pending_reason] if status.pending_reason else [])


def pending_reason_cell(reason: str, limit: int | None = 60) -> str:
    """A state cell for a job Slurm holds, with squeue's reason cut to `limit` characters (None:
    whole): `PENDING (Resources)`."""
    from hyperlaunch.runs.restart_causes import cut

    return f"PENDING ({cut(reason, limit)})"


def pending_line(reasons: Sequence[str]) -> list[str]:
    """`status JOB`'s line saying what Slurm's reasons for holding a job mean; none without."""
    from hyperlaunch.core.slurm_states import pending_text

    return [f"  pending:    {'; '.join(map(pending_text, reasons))}"] if reasons else []
