"""What happened to one job: Slurm state, attempts, why each restart happened, the restart budget
left and the trainer's progress (latest checkpoint, last loss and throughput).

Everything here is computed from what Slurm and the trainer already record - sacct's
attempts, slurmdbd's node events, the attempt markers the job's supervisor writes into the
log, metrics.jsonl and the checkpoint folder - so `status` works from any shell, any time
after the job ran. The attempts' own records are read in hyperlaunch.runs.attempts, why each
ended in runs.restart_causes, the trainer's progress in runs.training_progress; this module
sums them up (summarize). runs.status_queries asks Slurm about a list of jobs at once."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hyperlaunch.core.checkpoint_integrity import SetAside, set_aside_checkpoints
from hyperlaunch.core.decision_records import RESTART, DecisionRecord, ends_by_attempt, read_decisions, written_at
from hyperlaunch.core.metrics_records import StepRecord
from hyperlaunch.core.protocol import RestartCause, failures_in_a_row, made_progress
from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.runs.attempts import (
    as_the_markers_end_them,
    markers_by_restart,
    read_lines,
    restart_count,
    running_past_its_record,
    split_attempts,
    started,
    with_logged_attempts,
)
from hyperlaunch.runs.dependency_states import Dependency, WaitsFor
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.runs.restart_causes import (
    Restart,
    RoundError,
    as_restart_limit,
    attempt_cause,
    in_allocation_restarts,
    marker_cause,
    restart_markers,
)
from hyperlaunch.runs.training_progress import Progress, read_progress
from hyperlaunch.slurm.accounting import Attempt, NodeEvent


@dataclass(frozen=True)
class RestartBudget:
    """How much of --max-restarts a job has used: attempts in a row that made no progress (no
    new complete checkpoint) use it, one that did gives it back (see hyperlaunch.core.protocol)."""

    windows: int
    """Attempts Slurm ran: time windows and restarts alike."""
    failures: int
    """The ended attempts in a row, counted back from the latest, without a new checkpoint."""
    allowed: int
    """--max-restarts."""

    @property
    def left(self) -> int:
        return max(self.allowed - self.failures, 0)


def restart_budget(record: JobRecord, attempts: Sequence[Attempt], *, last_running: bool) -> RestartBudget:
    """The budget as the next attempt's supervisor will count it: from the trainer's progress
    records in the run dir. An attempt under way that has saved already has given it back."""
    run_dir, job = Path(record.spec.output.run_dir), record.job_id
    if not any(started(a) for a in attempts):  # still queued, or cancelled there (a failed --after)
        return RestartBudget(windows=0, failures=0, allowed=record.spec.recovery.max_restarts)
    # Counted by restart count, as the supervisor counts (a count Slurm skipped made no progress).
    last = restart_count(attempts, len(attempts) - 1)
    ended = last if last_running else last + 1
    if attempts and attempts[-1].state == "COMPLETED":
        failures = 0
    elif last_running and made_progress(run_dir, job, ended):
        failures = 0
    else:
        failures = failures_in_a_row(run_dir, job, max(ended, 0))
    # A requeued attempt still in the queue has not run (sacct lists it, PENDING).
    return RestartBudget(windows=sum(map(started, attempts)), failures=failures, allowed=record.spec.recovery.max_restarts)


@dataclass(frozen=True)
class JobStatus(WaitsFor):
    record: JobRecord
    state: str
    attempts: tuple[Attempt, ...]
    restarts: tuple[Restart, ...]
    progress: Progress
    nodes: str = ""
    elapsed_s: int = 0
    failure: Restart | None = None
    steps: tuple[StepRecord, ...] = field(default_factory=tuple)
    budget: RestartBudget | None = None
    in_allocation: tuple[Restart, ...] = ()
    """Restarts of the trainers inside an attempt's allocation (on a spare node, or after a
    crash or hang on healthy nodes): no trip through the queue, no Slurm attempt of their own."""
    waits_for: tuple[Dependency, ...] = ()
    """The jobs this one starts after (--after, resume --after-end), with their states now."""
    pending_reason: str = ""
    """While it is pending: why, in Slurm's word (squeue's REASON: Resources, PartitionNodeLimit, ...)."""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def failed_nodes(self) -> tuple[str, ...]:
        """Every node that went down under this job, in the order it happened."""
        ended = [*self.in_allocation, *self.restarts, *([self.failure] if self.failure else [])]
        return tuple(dict.fromkeys(node for r in ended for node in r.nodes))

    @property
    def set_aside(self) -> list[SetAside]:
        """The checkpoints this job found torn and set aside (read from its checkpoint folder now)."""
        spec, jobs = self.record.spec, {self.record.job_id, self.record.element_of}
        return [a for a in set_aside_checkpoints(Path(spec.output.checkpoint_dir), spec.derived.checkpoint_name) if a.job in jobs]

    def to_json(self) -> dict[str, Any]:
        spec = self.record.spec
        return {
            "job_id": self.record.job_id,
            "model": spec.job.model,
            "name": spec.derived.checkpoint_name,
            "script": spec.job.script,
            "module": spec.job.module,
            "code_dir": spec.derived.code_dir,
            "work_dir": spec.work_dir,
            "job_name": spec.job.job_name,
            "nodes": spec.job.nodes,
            "state": self.state,
            "node_list": self.nodes,
            "elapsed_s": self.elapsed_s,
            "restarts": [r.__dict__ for r in self.restarts],
            "restarts_in_allocation": [r.__dict__ for r in self.in_allocation],
            "failure": self.failure.__dict__ if self.failure else None,
            "attempts": [a.__dict__ for a in self.attempts],
            **self._budget_json(),
            "last_step": self.progress.last_step,
            **_finite("last_loss", self.progress.last_loss),
            **_finite("tokens_per_s", self.progress.tokens_per_s),
            "checkpoint_step": self.progress.checkpoint_step,
            "checkpoint": self.progress.checkpoint,
            "resumed_from_steps": list(self.progress.resumed_from_steps),
            "resumed_from_memory": list(self.progress.resumed_from_memory),
            "export_error": self.progress.export_error,
            "set_aside": [{"name": a.path.name, "path": str(a.path), "reason": a.reason, "file": a.file} for a in self.set_aside],
            "checkpoint_dir": spec.output.checkpoint_dir,
            "run_dir": spec.output.run_dir,
            "log": str(self.record.log_paths[0]),
            "submitted_at": self.record.submitted_at,
            "resumed_from_job": self.record.resumed_from,
            "element": self.record.element_of,
            "element_values": dict(self.record.element_values) if self.record.element_of else None,
            "waits_for": [d.__dict__ for d in self.waits_for],
            "pending_reason": self.pending_reason or None,
            "never_runs": self.never_runs,
        }


    def _budget_json(self) -> dict[str, Any]:
        budget = self.budget or RestartBudget(windows=len(self.attempts), failures=0, allowed=self.record.spec.recovery.max_restarts)
        return {
            "windows": budget.windows,
            "failures_counted": budget.failures,
            "max_restarts": budget.allowed,
            "restart_budget_left": budget.left,
        }


def _finite(name: str, value: float | None) -> dict[str, Any]:
    """A number for the JSON document: JSON has no NaN or Infinity, so a diverged loss is null
    with `<name>_non_finite` saying which ("nan", "inf", "-inf")."""
    if value is None or math.isfinite(value):
        return {name: value}
    return {name: None, f"{name}_non_finite": str(value)}


def current_state(last: Attempt | None, queue_state: str | None) -> str:
    """Where a job is: squeue's state while it is in the queue (sacct's last attempt can read
    NODE_FAIL for a job already back there), else its last attempt's."""
    if queue_state is not None and queue_state in ACTIVE_STATES:
        return queue_state
    return last.state if last is not None else (queue_state or "UNKNOWN")


def summarize(
    record: JobRecord,
    attempts: Sequence[Attempt],
    events: Sequence[NodeEvent],
    *,
    queue_state: str | None = None,
    now: datetime | None = None,
) -> JobStatus:
    """Pure: the status of one job from its sacct attempts, node events, queue state, log
    and metrics, at `now` (local time, as sacct's; the clock's unless given)."""
    out_log, err_log = record.log_paths
    out_lines = read_lines(out_log)
    decisions = job_decisions(record)
    ended = ends_by_attempt(decisions)
    # Each attempt's end as its supervisor's decision record tells it, else its end marker.
    markers = {**markers_by_restart(out_lines, "end"), **{count: d.as_marker() for count, d in ended.items()}}
    attempts = with_logged_attempts(attempts, markers_by_restart(out_lines, "start"), markers)
    if attempts and queue_state == "RUNNING":
        attempts[-1] = running_past_its_record(attempts[-1], now or datetime.now())
    if attempts and (queue_state is None or queue_state not in ACTIVE_STATES):
        attempts = as_the_markers_end_them(attempts, markers)
    err_by_attempt = split_attempts(read_lines(err_log))

    def cause_of(index: int) -> Restart:
        following = attempts[index + 1].start if index + 1 < len(attempts) else None
        count = restart_count(attempts, index)
        marker = markers.get(count)
        error = RoundError.recorded(ended.get(count), lambda: err_by_attempt.get(count, []))
        cause = attempt_cause(count, attempts[index], marker, events, error, record, following)
        return as_restart_limit(cause, marker, record)

    restarts = [cause_of(index) for index in range(len(attempts) - 1)]
    last = attempts[-1] if attempts else None
    failure = None
    in_queue = queue_state is not None and queue_state in ACTIVE_STATES
    # A run the job was requeued from reads REQUEUED while the job waits to start again: it ended.
    if last is not None and (last.state not in ACTIVE_STATES or (last.state == "REQUEUED" and queue_state == "PENDING")):
        if in_queue:
            # The last recorded attempt ended and the job is back in the queue: that
            # attempt is a restart too.
            restarts.append(cause_of(len(attempts) - 1))
        elif last.state != "COMPLETED":
            failure = cause_of(len(attempts) - 1)
            # An attempt that found the budget spent at its start: the restart before it spent it.
            if marker_cause(markers.get(restart_count(attempts, len(attempts) - 1))) is RestartCause.RESTART_LIMIT and restarts:
                failure = Restart(failure.attempt, failure.cause, f"{failure.detail}; last: {restarts[-1].describe()}")
    progress, steps = read_progress(record)
    by_round = {(d.restart, d.round): d for d in decisions if d.event == RESTART and d.round is not None}
    state = current_state(last, queue_state)
    budget = restart_budget(record, attempts, last_running=last is not None and last.state in ACTIVE_STATES)
    return JobStatus(
        in_allocation=tuple(in_allocation_restarts(restart_markers(out_lines, decisions), by_round, err_by_attempt, record)),
        record=record,
        state=state,
        attempts=tuple(attempts),
        restarts=tuple(restarts),
        progress=progress,
        nodes=last.node_list if last and last.node_list != "None assigned" and queue_state != "PENDING" else "",
        elapsed_s=sum(a.elapsed_s for a in attempts),
        failure=failure,
        steps=tuple(steps),
        budget=budget,
    )


_EARLIER_JOB_S = 60
"""A decision record written this long before the job was submitted is an earlier job's with its
id (a rebuilt cluster numbers its jobs from the start again, into the same run dir)."""


def job_decisions(record: JobRecord) -> list[DecisionRecord]:
    """The supervisor's decision records of the job (hyperlaunch.core.decision_records)."""
    found = read_decisions(Path(record.spec.output.run_dir), record.job_id)
    return [d for d in found if (written_at(d) or 0) >= record.submitted_at - _EARLIER_JOB_S]
