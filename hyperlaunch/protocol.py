"""The protocol between the three programs of a job: the batch script (templates/), the trainer
(train/) and `status`/`logs`. Each vocabulary is declared once here, each record's writer and
reader sit side by side, and the template is rendered with these values.

- Attempt markers: one line the script prints at each attempt's start and end (stdout and
  stderr), `### hyperlaunch attempt-end restart=0 job=12 exit=0 cause=completed action=exit
  time=...`; `status` reads why each attempt ended from them, `logs` splits logs at them.
- Exit codes and request files: how the trainer tells the script "I saved, requeue me".
- Metrics records: rank 0's step and event records in `<run_dir>/metrics.jsonl`.

Torch-free and Jinja-free (the CLI reads logs and metrics on a login node), Python 3.10."""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


class RestartCause(str, enum.Enum):
    """Why an attempt ended, as the batch script writes it into its attempt-end marker."""

    COMPLETED = "completed"
    """The training step exited 0."""
    TIME_LIMIT = "time-limit"
    """The save signal (Slurm's warning before the time limit, or someone's) reached the script."""
    REQUEUE_REQUESTED = "requeue-requested"
    """The trainer saved after a stop signal: its requeue-request file, or REQUEUE_EXIT_CODE."""
    CRASH = "crash"
    """The step failed any other way."""
    NODE_FAILURE = "node-failure"
    """The step failed and some of the job's nodes are down: Slurm requeues the job itself."""
    RESTART_LIMIT = "restart-limit"
    """The attempt found the job already restarted max_restarts times."""
    # Room for the trainer's own reason: a failure record written by the trainer
    # before it exits non-zero would add a cause here and a record type below.


class AttemptAction(str, enum.Enum):
    """What the script did after an attempt ended."""

    REQUEUE = "requeue"
    EXIT = "exit"
    SLURM_REQUEUE = "slurm-requeue"
    """Nothing: Slurm requeues a job whose node failed by itself."""


CAUSE_TEXT: dict[str, str] = {
    RestartCause.COMPLETED.value: "completed",
    RestartCause.TIME_LIMIT.value: "time limit",
    RestartCause.REQUEUE_REQUESTED.value: "preemption",
    RestartCause.CRASH.value: "crash",
    RestartCause.NODE_FAILURE.value: "node failure",
    RestartCause.RESTART_LIMIT.value: "restart limit",
    # What only Slurm's accounting tells (no marker, or the marker's cause refined by it).
    "preemption": "preemption",
    "cancelled": "cancelled",
    "requeued": "requeued",
}
"""The words `status` shows for why an attempt ended, keyed by a RestartCause value or by a
cause only Slurm reports. A stop the trainer saved for (requeue-requested) reads as a
preemption: nothing but a preemption sends that signal outside the time-limit warning."""


def cause_text(key: str) -> str:
    return CAUSE_TEXT.get(key, key)


ATTEMPT_MARKER = "### hyperlaunch attempt-"
"""Prefix of every attempt marker line."""
ATTEMPT_MARKER_PRINTF = ATTEMPT_MARKER + "%s restart=%s job=%s %s time=%s"
"""The script's printf format: event, restart count, job id, `key=value ...`, UTC time."""
_MARKER_FIELD = re.compile(r"(\w+)=(\S*)")


def format_attempt_marker(event: str, restart: int, job: str, fields_text: str, time: str) -> str:
    """The line the script prints (its printf does the same with ATTEMPT_MARKER_PRINTF)."""
    return ATTEMPT_MARKER_PRINTF % (event, restart, job, fields_text, time)


def parse_attempt_marker(line: str) -> dict[str, str] | None:
    """The fields of an attempt marker line ({'event': 'start'|'end', 'restart': ..., ...}),
    or None for any other line."""
    stripped = line.strip()
    if not stripped.startswith(ATTEMPT_MARKER):
        return None
    event, _, rest = stripped[len(ATTEMPT_MARKER) :].partition(" ")
    return {"event": event, **dict(_MARKER_FIELD.findall(rest))}


REQUEUE_EXIT_CODE = 75
"""Exit code of a training process that received SIGUSR2/SIGTERM, saved a complete checkpoint
and moved the pointer: "saved, please requeue" (75 is sysexits' EX_TEMPFAIL, retry later)."""

REQUEUE_REQUEST_PREFIX = "requeue-request-"
"""After a stop signal, once its checkpoint is complete, rank 0 creates
`<run_dir>/requeue-request-<job id>.<restart count>`; the batch script reads it to tell a
saved-and-stopped step from a crash, because torchrun reports every worker failure (75
included) as exit code 1."""


def requeue_request_path(run_dir: Path, job_id: str, restart_count: int) -> Path:
    return Path(run_dir) / f"{REQUEUE_REQUEST_PREFIX}{job_id}.{restart_count}"


METRICS_FILE = "metrics.jsonl"
"""Rank 0's step records and events in the run dir, one JSON object a line."""


class TrainerEvent(str, enum.Enum):
    """The events the trainer records (EventRecord.event)."""

    STARTED = "started"
    PRETRAINED_LOADED = "pretrained_loaded"
    RESUMED = "resumed"
    VALIDATION = "validation"
    NON_FINITE_LOSS = "non_finite_loss"
    CHECKPOINT_SAVING = "checkpoint_saving"
    CHECKPOINT_COMPLETED = "checkpoint_completed"
    CHECKPOINT_PRUNED = "checkpoint_pruned"
    SIGNAL_RECEIVED = "signal_received"
    EXPORTED = "exported"
    EXIT = "exit"


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One logged optimizer step (`"type": "step"`)."""

    step: int
    loss: float
    lr: float = 0.0
    grad_norm: float = 0.0
    tokens_per_s: float = 0.0
    tokens_per_s_per_device: float = 0.0
    tflops_per_device: float = 0.0
    mfu: float | None = None
    """Model FLOPs utilisation; None where the device's peak is unknown (CPU, fp32)."""
    peak_memory_bytes: int = 0
    """The largest of every rank's peak: device memory on GPU, resident set on CPU."""
    peak_memory_bytes_per_rank: tuple[int, ...] = ()
    step_time_s: float = 0.0
    tokens_seen: int = 0
    samples_consumed: int = 0
    world_size: int = 1
    time: float = 0.0
    job_id: str | None = None
    """The Slurm job that wrote it: a run dir is shared by a job and the jobs resuming it."""
    restart: int | None = None

    def to_json(self) -> dict[str, Any]:
        return _without_none({"type": "step", **{f.name: _plain(getattr(self, f.name)) for f in fields(self)}}, keep=("mfu",))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord | None:
        return _build(cls, data)


@dataclass(frozen=True, kw_only=True)
class EventRecord:
    """Something the trainer did or saw (`"type": "event"`), with the event's own fields."""

    event: str
    """A TrainerEvent value."""
    message: str = ""
    time: float = 0.0
    step: int | None = None
    job_id: str | None = None
    restart: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    """The event's own fields (exit_code, val_loss, path, ...), stored at the record's top level."""

    def to_json(self) -> dict[str, Any]:
        known = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "details"}
        return _without_none({"type": "event", **dict(self.details), **known})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EventRecord | None:
        names = {f.name for f in fields(cls)} | {"type"}
        record = _build(cls, data)
        if record is None:
            return None
        return cls(**{**record.__dict__, "details": {k: v for k, v in data.items() if k not in names}})

    def get(self, name: str, default: Any = None) -> Any:
        """A detail field (or a known one) by name."""
        return getattr(self, name) if name in self.__dataclass_fields__ and name != "details" else self.details.get(name, default)


MetricsRecord = StepRecord | EventRecord


def metrics_line(record: MetricsRecord) -> str:
    """The record as one metrics.jsonl line (keys sorted, as readers diff them)."""
    return json.dumps(record.to_json(), sort_keys=True) + "\n"


def parse_metrics_line(line: str) -> MetricsRecord | None:
    """The record on one metrics.jsonl line; None for a line cut mid-write by a crash, or any
    other line (readers skip those)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if data.get("type") == "step":
        return StepRecord.from_json(data)
    if data.get("type") == "event":
        return EventRecord.from_json(data)
    return None


def _build(cls: Any, data: Mapping[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known}
    try:
        return cls(**values)
    except TypeError:  # a required field missing: not a record of this kind
        return None


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _without_none(data: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None or k in keep}
