"""The cells `status` shows a training job in, shared by the list, a sweep's elements and one
job's detail: its state (with why it failed or what holds it), its restarts, the restart budget
left, and a number or `-`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hyperlaunch.cli._waiting import held_cell, never_runs_cell

if TYPE_CHECKING:
    from hyperlaunch.runs.job_status import JobStatus


def restarts_cell(status: JobStatus) -> str:
    # Restarts inside an allocation and through the queue alike: both restarted the trainers.
    # In the order `plot` marks them (one home for it).
    from hyperlaunch.runs.curves import ordered_restarts

    every = ordered_restarts(status)
    if not every:
        return "0"
    # How many and the last cause: every cause is in `status JOB`, and a job restarted a dozen
    # times would stretch the row past any terminal.
    return f"{len(every)}{': ' if len(every) == 1 else ', last: '}{every[-1].describe(limit=CELL_DETAIL)}"


def budget_cell(status: JobStatus) -> str:
    """What is left of --max-restarts, `left/allowed`; `-` where a failure no restart fixes
    ended the job (as `status JOB` says: the budget was never the question)."""
    budget = status.budget
    if budget is None or (status.failure is not None and status.failure.final):
        return "-"
    return f"{budget.left}/{budget.allowed}"


def number(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


CELL_DETAIL = 60
"""Characters of a failure's detail the list shows (a trainer's message can run to 500)."""


def state_cell(status: JobStatus, limit: int | None = CELL_DETAIL) -> str:
    if status.blocker is not None:
        return never_runs_cell(status.state, status.blocker)
    if status.failure is not None and status.state != "COMPLETED":
        return f"{status.state} ({status.failure.describe(limit=limit)})"
    return held_cell(status, limit) or status.state
