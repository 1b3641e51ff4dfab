"""What became of the prepare-data and export jobs (hyperlaunch.runs.tool_jobs): Slurm's state,
its attempts, what they wait for, and for one that failed, the one-line error the tool wrote
in its log."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core.bounded_read import read_regular_tail
from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.runs.dependency_states import Dependency, WaitsFor
from hyperlaunch.runs.job_status import current_state
from hyperlaunch.runs.status_queries import conf_for, env_with_conf
from hyperlaunch.runs.tool_jobs import ToolJob
from hyperlaunch.slurm import accounting as slurm_accounting
from hyperlaunch.slurm import queue as slurm_queue
from hyperlaunch.slurm.accounting import Attempt

_TAIL_BYTES = 64 * 1024
_LINE_CHARS = 300
_TOOL_ERROR = "hyperlaunch: error:"
"""How prepare-data and export begin their one-line error (cli/_errors.py)."""


@dataclass(frozen=True)
class ToolStatus(WaitsFor):
    job: ToolJob
    state: str
    attempts: tuple[Attempt, ...] = ()
    waits_for: tuple[Dependency, ...] = ()
    error: str | None = None
    """For a job that ended otherwise than COMPLETED: its error, as its log says it (error_line)."""
    written: str | None = None
    """For an export that completed: the folder it wrote, as its log says it (an export queued
    --after a training chose its checkpoint, and so its folder, when it started)."""
    pending_reason: str = ""
    """While PENDING: squeue's word for why (Resources, Priority, ...)."""

    @property
    def elapsed_s(self) -> int:
        return sum(attempt.elapsed_s for attempt in self.attempts)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.job.to_json(),
            "state": self.state,
            "elapsed_s": self.elapsed_s,
            "attempts": [attempt.__dict__ for attempt in self.attempts],
            "waits_for": [dependency.__dict__ for dependency in self.waits_for],
            "never_runs": self.never_runs,
            "error": self.error,
            "written": self.written,
            "pending_reason": self.pending_reason or None,
        }


def collect_tools(tool_jobs: Sequence[ToolJob], *, env: Mapping[str, str] | None = None) -> list[ToolStatus]:
    """Each job's status: per Slurm config in use, one squeue, one sacct for their attempts and
    one for the jobs they wait for (none for no jobs)."""
    by_conf: dict[str | None, list[ToolJob]] = {}
    for job in tool_jobs:
        by_conf.setdefault(conf_for(job.slurm_conf, env), []).append(job)
    found: dict[str, ToolStatus] = {}
    for conf, group in by_conf.items():
        slurm_env = env_with_conf(env, conf)
        queued = slurm_queue.my_queue(env=slurm_env)
        attempts = slurm_accounting.job_attempts([job.job_id for job in group], env=slurm_env)
        waited = slurm_accounting.job_states(list(dict.fromkeys(w for job in group for w, _ in job.waits)), env=slurm_env)
        for job in group:
            now = queued.get(job.job_id)
            found[job.job_id] = summarize_tool(
                job, attempts.get(job.job_id, []), now.state if now else None, waited, pending_reason=now.reason if now else "",
            )
    return [found[job.job_id] for job in tool_jobs]


def summarize_tool(
    job: ToolJob, attempts: Sequence[Attempt], queue_state: str | None, waited: Mapping[str, str], *, pending_reason: str = "",
) -> ToolStatus:
    """Pure but for the log: where the job is (job_status.current_state), what it waits for
    (and, pending, squeue's `pending_reason`), its error or the folder it wrote."""
    state = current_state(attempts[-1] if attempts else None, queue_state)
    waits = tuple(Dependency(w, kind, waited.get(w, "UNKNOWN")) for w, kind in job.waits)
    ended_badly = state not in ACTIVE_STATES and state not in ("COMPLETED", "UNKNOWN")
    written = exported_folder(Path(job.log)) if job.kind == "export" and state == "COMPLETED" else None
    reason = pending_reason if state == "PENDING" else ""
    return ToolStatus(job, state, tuple(attempts), waits, error_line(Path(job.log)) if ended_badly else None, written, reason)


def exported_folder(path: Path) -> str | None:
    """The folder an export job wrote: its log's `done` event (hyperlaunch.runs.hf_export's
    JSON lines), None without one."""
    for line in reversed(_lines(path)):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "done" and isinstance(event.get("output"), str):
            return str(event["output"])
    return None


def _lines(path: Path) -> list[str]:
    """The non-empty lines at the end of a log (its last _TAIL_BYTES), stripped."""
    try:
        content = read_regular_tail(path, _TAIL_BYTES)
    except (OSError, ValueError):  # none, not a regular file; ValueError: a NUL in the path
        return []
    return [line.strip() for line in content.decode("utf-8", errors="replace").splitlines() if line.strip()]


def error_line(path: Path) -> str | None:
    """A failed job's error from its log's end: the tool's own one-line error (`hyperlaunch:
    error: ...`; on several nodes srun's lines about the others' ends come after it), else the
    last line; shortened, None without a log."""
    lines = _lines(path)
    if not lines:
        return None
    line = next((line for line in reversed(lines) if line.startswith(_TOOL_ERROR)), lines[-1])
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 3] + "..."
