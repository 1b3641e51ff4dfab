"""The lines `status JOB` gives a job that waits for others (--after), a training's or a
prepare-data or export job's alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperlaunch.runs.job_status import WaitsFor


def waiting_lines(status: WaitsFor) -> list[str]:
    """Why a job never runs, or while it is pending, what it waits for and where those are."""
    if status.never_runs:
        return [f"  never runs: {status.never_runs}"]
    if status.waits_for and status.state == "PENDING":
        waited = ", ".join(f"job {d.job} ({'to complete' if d.kind == 'ok' else 'to end'}; {d.state})" for d in status.waits_for)
        return [f"  waits for:  {waited}"]
    return []
