"""`status`'s list of training jobs: one line per job, a sweep's in one line too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hyperlaunch.cli._output import aligned
from hyperlaunch.cli._output import elapsed as _elapsed
from hyperlaunch.cli._status_cells import budget_cell, number, restarts_cell, state_cell
from hyperlaunch.cli._sweep_view import SweepView

if TYPE_CHECKING:
    from hyperlaunch.runs.job_status import JobStatus


_COLUMNS = ("JOB", "MODEL", "NODES", "STATE", "RESTARTS", "BUDGET", "NODELIST", "CKPT", "STEP", "LOSS", "TOK/S", "ELAPSED")


def table(statuses: Sequence[JobStatus | SweepView]) -> str:
    """One line per job in plain aligned columns, as squeue prints them (rich's table took
    0.1 s of a 0.5 s `status` to import and lay out); a sweep is one line (`status JOB` opens it)."""
    rows: list[tuple[str, ...]] = [_COLUMNS]
    for s in statuses:
        if isinstance(s, SweepView):
            rows.append(s.row())
            continue
        p = s.progress
        rows.append((
            s.record.job_id,
            s.record.spec.job.model or s.record.spec.derived.checkpoint_name,
            str(s.record.spec.job.nodes),
            state_cell(s),
            restarts_cell(s),
            budget_cell(s),
            s.nodes or "-",
            number(p.checkpoint_step, "d"),
            number(p.last_step, "d"),
            number(p.last_loss, ".4f"),
            number(p.tokens_per_s, ".0f"),
            _elapsed(s.elapsed_s),
        ))
    return "\n".join(aligned(rows))
