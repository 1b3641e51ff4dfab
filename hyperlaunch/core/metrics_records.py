"""Metrics records: rank 0's step and event records in `<run_dir>/metrics.jsonl`, one JSON
object a line; the trainer writes them, `status` reads them. Part of the supervisor/trainer
protocol (hyperlaunch.core.protocol).

Torch-free (the CLI reads metrics on a login node). Importable on Python 3.8: the runtime
library (hyperlaunch.runtime) writes these records inside the job, where scripts may run on it
(reading them back, with typing.get_type_hints, needs 3.10)."""

from __future__ import annotations

import enum
import functools
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hyperlaunch.core.protocol import json_object

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
    HANG = "hang"
    EXPORTED = "exported"
    EXPORT_FAILED = "export_failed"
    EXIT = "exit"
    MEMORY_SNAPSHOT_FAILED = "memory_snapshot_failed"
    """A keeper refused a memory snapshot's part or could not be reached (told once a rank): disk checkpoints go on."""


@dataclass(frozen=True)  # not kw_only: hyperlaunch.runtime imports this on Python 3.8
class StepRecord:
    """One logged optimizer step (`"type": "step"`)."""

    step: int
    loss: float
    lr: float | None = None
    """None where the writer logged none (a user's script through hyperlaunch.runtime.log)."""
    grad_norm: float = 0.0
    tokens_per_s: float | None = None
    tokens_per_s_per_device: float = 0.0
    tflops_per_device: float = 0.0
    mfu: float | None = None
    """Model FLOPs utilisation from 6 x non-embedding parameters + attention (the output
    projection left out); None where the device's peak is unknown (CPU, fp32)."""
    mfu_with_output: float | None = None
    """The same with the output projection counted (torchtitan's convention); None also in
    records written before it existed."""
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
    round: int | None = None
    """The round of trainers within the attempt (restarts inside the allocation), 0 for the first."""

    def to_json(self) -> dict[str, Any]:
        return _without_none({"type": "step", **{f.name: _plain(getattr(self, f.name)) for f in fields(self)}}, keep=("mfu", "mfu_with_output"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord | None:
        return _build(cls, data)


@dataclass(frozen=True)  # not kw_only (Python 3.8)
class EventRecord:
    """Something the trainer did or saw (`"type": "event"`), with the event's own fields."""

    event: str
    """A TrainerEvent value."""
    message: str = ""
    time: float = 0.0
    step: int | None = None
    job_id: str | None = None
    restart: int | None = None
    round: int | None = None
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


MetricsRecord = typing.Union[StepRecord, EventRecord]  # noqa: UP007 - evaluated at import, on Python 3.8 too


def metrics_line(record: MetricsRecord) -> str:
    """The record as one metrics.jsonl line (keys sorted, as readers diff them)."""
    return json.dumps(record.to_json(), sort_keys=True) + "\n"


def append_line(run_dir: str | Path, line: str) -> None:
    """One line onto the run's metrics.jsonl, the run folder made if needed: rank 0's writes
    (hyperlaunch.runtime.records) and the supervisor's (a script framework's checkpoints)."""
    path = Path(run_dir) / METRICS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(line)


def parse_metrics_line(line: str) -> MetricsRecord | None:
    """The record on one metrics.jsonl line; None for a line cut mid-write by a crash, or any
    other line (readers skip those)."""
    data = json_object(line)
    if data is None:
        return None
    if data.get("type") == "step":
        return StepRecord.from_json(data)
    if data.get("type") == "event":
        return EventRecord.from_json(data)
    return None


def _build(cls: Any, data: Mapping[str, Any]) -> Any:
    """A record from a metrics line, None when it is not one: a required field missing, or a
    field of the wrong type (`"loss": "abc"`, `"step": true`). A null where the field has a
    default counts as absent; another version's extra fields are kept by the caller."""
    checks = _field_checks(cls)
    values: dict[str, Any] = {}
    for name, value in data.items():
        accepts = checks.get(name)
        if accepts is None or (value is None and not accepts(None)):
            continue
        value = tuple(value) if isinstance(value, list) else value
        if not accepts(value):
            return None
        values[name] = value
    try:
        return cls(**values)
    except TypeError:  # a required field missing: not a record of this kind
        return None


@functools.lru_cache(maxsize=None)  # noqa: UP033 - functools.cache needs 3.9
def _field_checks(cls: Any) -> dict[str, Callable[[Any], bool]]:
    """Each field's type test, built once per record class: `status` reads every line of a
    long run's metrics, and asking typing about each field of each line took most of its time."""
    return {name: _checker(kind) for name, kind in typing.get_type_hints(cls).items()}


def _checker(kind: Any) -> Callable[[Any], bool]:
    """Whether a JSON value fits `kind`: a bool only for bool, an int for float too."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return lambda value: True
    if origin is tuple:
        item = _checker(args[0])
        return lambda value: isinstance(value, tuple) and all(item(x) for x in value)
    if origin in (typing.Union, getattr(types, "UnionType", typing.Union)):  # UnionType: 3.10+  # X | None
        options = tuple(_checker(arg) for arg in args)
        return lambda value: any(accepts(value) for accepts in options)
    if kind is type(None):
        return lambda value: value is None
    if kind is bool:
        return lambda value: isinstance(value, bool)
    if kind is float:
        return lambda value: isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is not None:  # Mapping[str, Any]
        return lambda value: isinstance(value, Mapping)
    return lambda value: isinstance(value, kind) and not isinstance(value, bool)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _without_none(data: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None or k in keep}
