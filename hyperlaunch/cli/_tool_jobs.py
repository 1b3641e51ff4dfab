"""How `status` shows the prepare-data and export jobs (hyperlaunch.runs.tool_status): a table
under the trainings' in the list, and one job's detail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hyperlaunch.cli._output import aligned, sacct_cell
from hyperlaunch.cli._output import elapsed as _elapsed
from hyperlaunch.cli._waiting import held_cell, never_runs_cell, waiting_lines

if TYPE_CHECKING:
    from hyperlaunch.runs.tool_status import ToolStatus

_COLUMNS = ("JOB", "KIND", "STATE", "ELAPSED", "WHAT")


def state_cell(status: ToolStatus) -> str:
    if status.blocker is not None:
        return never_runs_cell(status.state, status.blocker)
    return held_cell(status) or status.state


def what(status: ToolStatus) -> str:
    """What the job does; for an export that completed, the folder it wrote."""
    if status.written is not None:
        return status.job.what.split(" -> ", 1)[0] + f" -> {status.written}"
    return status.job.what


def table(statuses: Sequence[ToolStatus]) -> str:
    """The list's second table, titled, in plain aligned columns as the first."""
    rows = [_COLUMNS, *((s.job.job_id, s.job.kind, state_cell(s), _elapsed(s.elapsed_s), what(s)) for s in statuses)]
    return "prepare-data and export jobs\n" + "\n".join(aligned(rows))


def detail(status: ToolStatus) -> list[Any]:
    from rich.table import Table

    job = status.job
    lines: list[Any] = [
        f"job {job.job_id}: {job.kind}, {what(status)}, {state_cell(status)}",
        f"  output:     {status.written or job.output}",
        f"  log:        {job.log}",
    ]
    if status.error:
        lines.append(f"  error:      {status.error}")
    lines += waiting_lines(status)
    attempts = Table(title="attempts", box=None, header_style="bold", title_justify="left")
    for column in ("#", "STATE", "NODES", "START", "END", "ELAPSED"):
        attempts.add_column(column, overflow="fold")
    for index, attempt in enumerate(status.attempts):
        attempts.add_row(
            str(index), attempt.state, sacct_cell(attempt.node_list), sacct_cell(attempt.start), sacct_cell(attempt.end),
            _elapsed(attempt.elapsed_s),
        )
    lines.append(attempts)
    return lines
