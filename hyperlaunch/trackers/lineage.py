"""One process's part of a training's lineage, fanned out to its trackers.

The lineage rule: the first step record a process logs (step k) opens this process's run, and
whatever the lineage logged at steps >= k before is stale (the tail of a failed attempt after
the checkpoint this one restarted from). Each tracker says so in its own way (see the tracker
modules); this module turns metrics.jsonl records into scalars and events, waits for the first
step to open the trackers, and switches off a tracker that fails (training goes on)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hyperlaunch.core import trackers as names
from hyperlaunch.core.metrics_reader import last_logged_step
from hyperlaunch.core.metrics_records import TrainerEvent
from hyperlaunch.core.trackers import Ending

_NOT_SCALARS = frozenset(
    {"type", "step", "time", "job_id", "restart", "round", "world_size", "samples_consumed", "peak_memory_bytes_per_rank"}
)
"""Step record fields that describe the record rather than the training."""
_RENAMED = {"peak_memory_bytes": ("peak_memory_gib", 1 / 2**30)}
_EVENT_SCALARS = {"val_loss": "val/loss", "val_perplexity": "val/perplexity"}
_QUIET_EVENTS = frozenset({TrainerEvent.CHECKPOINT_SAVING.value, TrainerEvent.CHECKPOINT_PRUNED.value})
"""Events the trackers leave out: metrics.jsonl and `status` have them; a dashboard does not need them."""


@dataclass(frozen=True)
class Start:
    """What opens a process's run: where it starts, and who it is."""

    first_step: int
    """k: the first step this process logs; the lineage's earlier values at steps >= k are stale."""
    previous_last_step: int | None
    """The last step the lineage logged before this process (metrics.jsonl), None for its first."""
    run_id: str
    """HYPERLAUNCH_TRACKER_RUN_ID (the same across requeues and `resume`)."""
    job_id: str
    attempt: int
    """SLURM_RESTART_COUNT: 0 in a job's first attempt."""
    round: int
    """The round of trainers within the attempt (restarts inside the allocation)."""
    cause: str | None
    """HYPERLAUNCH_RESTART_CAUSE: why the trainers started again, when they did."""

    @property
    def restarted(self) -> bool:
        return bool(self.cause) or self.attempt > 0 or self.round > 0

    @property
    def stale_steps(self) -> tuple[int, int] | None:
        """The steps logged before whose values this process replaces (first, last), if any."""
        last = self.previous_last_step
        return (self.first_step, last) if last is not None and last >= self.first_step else None

    def describe(self) -> str:
        """One line for the restart event."""
        why = f"after {self.cause}" if self.cause else "of the training"
        where = f"job {self.job_id} attempt {self.attempt} round {self.round}" if self.job_id else "outside Slurm"
        stale = self.stale_steps
        dropped = f"; steps {stale[0]}-{stale[1]} logged before are replaced" if stale else ""
        return f"restart {why}: {where}, from step {self.first_step}{dropped}"


class Tracker(Protocol):
    """One tracker's run for this process (tensorboard_log, mlflow_runs, wandb_run)."""

    name: str

    def open(self, start: Start, params: Mapping[str, Any]) -> str:
        """Open (or reopen) the run from `start`; returns where it is (a folder or a URL)."""

    def scalars(self, step: int, values: Mapping[str, float]) -> None: ...

    def event(self, step: int, event: str, text: str) -> None: ...

    def params(self, values: Mapping[str, Any]) -> None: ...

    def committed(self, step: int) -> None: ...

    def close(self, ending: Ending) -> None: ...


class Trackers:
    """This process's trackers: every metrics.jsonl record goes to `record`; nothing reaches a
    tracker before the first step record (events and params before it wait for it)."""

    def __init__(self, run_dir: Path, chosen: list[Tracker], environ: Mapping[str, str]) -> None:
        self.run_dir = Path(run_dir)
        self.environ = dict(environ)
        self.live = list(chosen)
        self.previous_last_step = last_logged_step(self.run_dir)
        self.start: Start | None = None
        self.last_step = 0
        self._waiting_events: list[tuple[str, str]] = []
        self._params: dict[str, Any] = {}
        self._closed = False

    def record(self, record: Mapping[str, Any]) -> None:
        """One metrics.jsonl record, as written."""
        if self._closed:
            return
        step = record.get("step")
        if record.get("type") == "step" and isinstance(step, int):
            if self.start is None:
                self._open(step, record)
            self.last_step = step
            values = step_scalars(record)
            self._each("log", lambda tracker: tracker.scalars(step, values))
        elif record.get("type") == "event":
            self._event(record)

    def params(self, values: Mapping[str, Any]) -> None:
        """Hyperparameters and job settings: once per run (kept until the run is open)."""
        if self.start is None:
            self._params.update(values)
        else:
            self._each("params", lambda tracker: tracker.params(values))

    def committed(self, step: int) -> None:
        """The checkpoint of `step` completed: the lineage keeps what this process logged up to it."""
        if self.start is not None:
            self._each("commit", lambda tracker: tracker.committed(step))

    def close(self, ending: Ending) -> None:
        """The process's end, and how. Nothing to do when no step was logged."""
        if self._closed:
            return
        self._closed = True
        if self.start is not None:
            self._each("close", lambda tracker: tracker.close(ending))

    def _open(self, step: int, record: Mapping[str, Any]) -> None:
        env = self.environ
        job_id = record.get("job_id")
        self.start = Start(
            first_step=step,
            previous_last_step=self.previous_last_step,
            run_id=env.get(names.TRACKER_RUN_ID_ENV) or env.get(names.WANDB_RUN_ID_ENV) or "",
            job_id=str(job_id) if job_id is not None else "",
            attempt=_count(record.get("restart")),
            round=_count(record.get("round")),
            cause=env.get(names.RESTART_CAUSE_ENV) or None,
        )
        start, params = self.start, dict(self._params)
        opened = []
        for tracker in list(self.live):
            where = self._guarded(tracker, "open", lambda t=tracker: t.open(start, params))  # type: ignore[misc]
            if tracker in self.live and isinstance(where, str):
                opened.append((tracker.name, where))
        for name, where in opened:
            try:
                names.write_location(self.run_dir, name, where)
            except OSError as error:
                warn(f"cannot record where the {name} run is: {error}")
        if start.restarted:
            self._each("log", lambda tracker: tracker.event(start.first_step, "restart", start.describe()))
        for event, text in self._waiting_events:
            self._each("log", lambda tracker, e=event, t=text: tracker.event(start.first_step, e, t))  # type: ignore[misc]
        self._waiting_events.clear()

    def _event(self, record: Mapping[str, Any]) -> None:
        event = str(record.get("event", ""))
        if not event or event in _QUIET_EVENTS:
            return
        step = record.get("step")
        values = {tag: float(record[key]) for key, tag in _EVENT_SCALARS.items() if _is_number(record.get(key))}
        text = str(record.get("message") or event)
        if self.start is None:
            self._waiting_events.append((event, text))
            return
        # An event without a step (exported) or before this process's first goes with the last step logged.
        at = step if isinstance(step, int) and step >= self.start.first_step else max(self.last_step, self.start.first_step)
        if values:
            self._each("log", lambda tracker: tracker.scalars(at, values))
        else:
            self._each("log", lambda tracker: tracker.event(at, event, text))

    def _each(self, what: str, call: Callable[[Tracker], object]) -> None:
        for tracker in list(self.live):
            self._guarded(tracker, what, lambda t=tracker: call(t))  # type: ignore[misc]

    def _guarded(self, tracker: Tracker, what: str, call: Callable[[], object]) -> object:
        """A tracker's error never stops training: one warning, and it is off for this process."""
        try:
            return call()
        except Exception as error:  # noqa: BLE001 - any library error, by design
            self.live.remove(tracker)
            warn(f"{tracker.name} failed to {what} ({type(error).__name__}: {error}); it is off for the rest of this process")
            return None


def step_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """A step record's numbers as `train/<name>` scalars (a script's own keys included)."""
    values = {}
    for key, value in record.items():
        if key in _NOT_SCALARS or not _is_number(value):
            continue
        renamed, scale = _RENAMED.get(key, (key, 1.0))
        values[f"train/{renamed}"] = float(value) * scale
    return values


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not (isinstance(value, float) and math.isinf(value))


def warn(message: str) -> None:
    print(f"hyperlaunch: warning: trackers: {message}", file=sys.stderr, flush=True)


def now_ms() -> int:
    return int(time.time() * 1000)
