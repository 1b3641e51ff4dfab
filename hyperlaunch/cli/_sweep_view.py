"""How `status` shows a sweep (hyperlaunch.runs.sweeps): one row in the list, its elements in
`status JOB`, and its JSON document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hyperlaunch.cli._output import aligned
from hyperlaunch.cli._output import elapsed as _elapsed
from hyperlaunch.cli._status_cells import CELL_DETAIL, number, state_cell
from hyperlaunch.cli._waiting import never_runs_cell, pending_cell, pending_line, pending_reason_cell

if TYPE_CHECKING:
    from hyperlaunch.runs.jobs import JobRecord
    from hyperlaunch.runs.sweeps import ElementStatus, SweepStatus


@dataclass(frozen=True)
class SweepView:
    """A sweep as `status` shows it: one row in the list, its elements in `status JOB`."""

    now: SweepStatus

    @property
    def record(self) -> JobRecord:
        return self.now.record

    def row(self) -> tuple[str, ...]:
        spec, ran = self.record.spec, [m.status for m in self.now.members if m.status is not None]
        steps = [s.progress.last_step for s in ran if s.progress.last_step is not None]
        restarts = sum(len(s.restarts) + len(s.in_allocation) for s in ran)
        return (
            self.record.job_id, f"{spec.job.model or spec.derived.checkpoint_name} sweep x{len(self.now.members)}", str(spec.job.nodes),
            self.now.summary, str(restarts), "-", "-", "-",
            f"{min(steps)}-{max(steps)}" if steps else "-", "-", "-", _elapsed(max((s.elapsed_s for s in ran), default=0)),
        )

    def _element_state(self, m: ElementStatus) -> str:
        """An element's state cell: its job's, or, before it started, the sweep's reason."""
        if self.now.blocker is not None:
            return never_runs_cell(m.state, self.now.blocker)
        if m.status is not None:
            return state_cell(m.status)
        if m.state == "CANCELLED":
            return "CANCELLED (before it started)"
        if m.state == "PENDING" and self.now.waits_for:
            return pending_cell(self.now.waits_for)
        if m.pending_reason:
            return pending_reason_cell(m.pending_reason, CELL_DETAIL)
        return m.state

    def detail(self) -> list[str]:
        spec, sweep = self.record.spec, self.record.sweep
        assert sweep is not None
        lines = [
            f"sweep {self.record.job_id}: {len(self.now.members)} x {spec.what} on {spec.nodes_text} each, {self.now.summary}",
            f"  array:      --array={sweep.array}",
            f"  checkpoints: {spec.output.checkpoint_dir}",
        ]
        if self.record.resumed_from:
            lines.append(f"  resumes sweep {self.record.resumed_from}")
        if self.now.never_runs:
            lines.append(f"  never runs: {self.now.never_runs}")
        elif self.now.waiting:
            waited = ", ".join(f"job {d.job} ({'to complete' if d.kind == 'ok' else 'to end'}; {d.state})" for d in self.now.waits_for)
            lines.append(f"  waits for:  {waited}")
        if not self.now.waiting:
            lines += pending_line(sorted({m.pending_reason for m in self.now.members if m.pending_reason}))
        header = ("ELEMENT", "NAME", "STATE", "JOB", "STEP", "LOSS", "BEST VAL", "RESTARTS")
        rows = [header]
        for m in self.now.members:
            p = m.status.progress if m.status is not None else None
            rows.append((
                m.task, m.name, self._element_state(m),
                m.status.record.job_id if m.status is not None else "-",
                number(p.last_step if p else None, "d"), number(p.last_loss if p else None, ".4f"),
                number(m.best_val_loss, ".4f"), str(len(m.status.restarts) + len(m.status.in_allocation)) if m.status else "0",
            ))
        lines += aligned(rows, indent="  ")
        lines.append(f"  one element: hyperlaunch status {self.record.job_id}_N, hyperlaunch logs {self.record.job_id}_N")
        return lines

    def to_json(self) -> dict[str, Any]:
        spec, sweep = self.record.spec, self.record.sweep
        assert sweep is not None
        return {
            "job_id": self.record.job_id,
            "sweep": True,
            "model": spec.job.model,
            "name": spec.derived.checkpoint_name,
            "state": self.now.state,
            "summary": self.now.summary,
            "array": sweep.array,
            "nodes": spec.job.nodes,
            "checkpoint_dir": spec.output.checkpoint_dir,
            "submitted_at": self.record.submitted_at,
            "resumed_from_job": self.record.resumed_from,
            "waits_for": [d.__dict__ for d in self.now.waits_for],
            "never_runs": self.now.never_runs,
            "elements": [m.to_json() for m in self.now.members],
        }
