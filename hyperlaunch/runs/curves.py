"""A training's curves as `plot` draws them and `status` sums them up: loss, validation loss
and throughput against step and wall time, with a marker where each restart or `resume`
took over.

The curve is the one the training kept. metrics.jsonl is append-only, so an attempt that
failed after logging past its last checkpoint leaves steps the next attempt logs again (from
that checkpoint): for each step the record written last wins. A `resume` job continues the
same training, usually in the same run dir, so the curve spans the job and the jobs it
resumes (its lineage); records other jobs wrote into that run dir are left out.

The restarts come from JobStatus, so a marker says exactly what `status` says."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core.errors import HyperlaunchError
from hyperlaunch.core.metrics_reader import read_metrics
from hyperlaunch.core.metrics_records import (
    METRICS_FILE,
    MetricsRecord,
    StepRecord,
    TrainerEvent,
)
from hyperlaunch.runs.job_status import JobStatus
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.runs.restart_causes import Restart

_MAX_LINEAGE = 1000
"""More resumes than any training has: a record edited into a loop stops here."""


@dataclass(frozen=True)
class Point:
    step: int
    time: float
    """Unix time the record was written; 0.0 where the writer gave none."""
    value: float


class MarkerKind:
    RESTART = "restart"
    """Slurm ran the job again (a requeue: node failure, preemption, time limit, crash)."""
    IN_ALLOCATION = "restart in allocation"
    """The supervisor started a new round of trainers inside the same allocation."""
    RESUME = "resume"
    """A `hyperlaunch resume` job took over the training."""


@dataclass(frozen=True)
class Marker:
    """Where the training started again, and why (the text `status` shows)."""

    kind: str
    cause: str
    job_id: str
    attempt: int
    round: int
    step: int | None
    """The first step the attempt, round or job that took over logged; None before it logged one."""
    time: float | None
    """When it logged that step."""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Curves:
    job_ids: tuple[str, ...]
    """The lineage, oldest first: the job asked about last."""
    loss: tuple[Point, ...]
    val_loss: tuple[Point, ...]
    tokens_per_s: tuple[Point, ...]
    markers: tuple[Marker, ...] = ()

    def to_json(self) -> dict[str, Any]:
        def points(series: Sequence[Point]) -> list[dict[str, Any]]:
            return [{"step": p.step, "time": p.time, "value": p.value} for p in series]

        return {
            "jobs": list(self.job_ids),
            "loss": points(self.loss),
            "val_loss": points(self.val_loss),
            "tokens_per_s": points(self.tokens_per_s),
            "markers": [m.to_json() for m in self.markers],
        }


@dataclass(frozen=True)
class Lineage:
    """A job and the jobs it resumes, oldest first."""

    records: tuple[JobRecord, ...]
    lost: str | None = None
    """The job the oldest record resumes when that job's record is gone or unreadable: its
    steps in the run dir still belong to the training."""

    @property
    def job_ids(self) -> tuple[str, ...]:
        return ((self.lost,) if self.lost else ()) + tuple(r.job_id for r in self.records)

    @property
    def metrics_paths(self) -> tuple[Path, ...]:
        """Each run dir's metrics file once, oldest first (a resume may name another run dir)."""
        return tuple(dict.fromkeys(Path(r.spec.output.run_dir) / METRICS_FILE for r in self.records))


def lineage(record: JobRecord, load: Callable[[str], JobRecord]) -> Lineage:
    """`record` and, through resumed_from, the jobs it resumes (`load` reads a job's record)."""
    chain = [record]
    seen = {record.job_id}
    while chain[0].resumed_from and len(chain) < _MAX_LINEAGE:
        earlier = chain[0].resumed_from
        if earlier in seen:
            break
        try:
            chain.insert(0, load(earlier))
        except HyperlaunchError:  # no record, an unreadable one, an id that is none
            return Lineage(tuple(chain), lost=earlier)
        seen.add(earlier)
    return Lineage(tuple(chain))


def read_records(paths: Iterable[Path]) -> list[MetricsRecord]:
    """Every record in the files, in file order (lines that are not records skipped)."""
    return [item for path in paths for item in read_metrics(path)]


def own_records(records: Sequence[MetricsRecord], job_ids: Sequence[str]) -> list[MetricsRecord]:
    """The records the lineage wrote. A file with no job tags at all (a script run outside
    Slurm, an older trainer) is all one training's, as `status` reads it."""
    if not any(r.job_id is not None for r in records):
        return list(records)
    wanted = set(job_ids)
    return [r for r in records if r.job_id in wanted]


def ordered_restarts(status: JobStatus) -> list[Restart]:
    """Every restart of one job in the order it happened: within an attempt its rounds in the
    allocation, then the requeue that ended it. `status` lists them in this order too."""
    return sorted([*status.in_allocation, *status.restarts], key=lambda r: (r.attempt, r.round == 0, r.round))


def kept_steps(records: Iterable[MetricsRecord]) -> dict[int, StepRecord]:
    """For each step, the record written last: the one the training kept (an attempt that
    restored an earlier checkpoint logs the steps after it again)."""
    return {item.step: item for item in records if isinstance(item, StepRecord)}


def kept_curves(records: Sequence[MetricsRecord], job_ids: Sequence[str]) -> Curves:
    """Loss, validation loss and tokens/s by step, the value written last for each step."""
    own = own_records(records, job_ids)
    steps = kept_steps(own)
    validations: dict[int, Point] = {}
    for item in own:
        if not isinstance(item, StepRecord) and item.event == TrainerEvent.VALIDATION.value and item.step is not None:
            value = item.get("val_loss")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                validations[item.step] = Point(item.step, item.time, float(value))
    kept = [steps[step] for step in sorted(steps)]
    return Curves(
        job_ids=tuple(job_ids),
        loss=tuple(Point(s.step, s.time, s.loss) for s in kept),
        val_loss=tuple(validations[step] for step in sorted(validations)),
        tokens_per_s=tuple(Point(s.step, s.time, s.tokens_per_s) for s in kept if s.tokens_per_s is not None),
    )


def markers(records: Sequence[MetricsRecord], statuses: Sequence[JobStatus]) -> list[Marker]:
    """A marker for each restart of each job in the lineage (`statuses`, oldest first), and
    for each `resume`, placed at the first step logged after it."""
    first: dict[tuple[str | None, int | None, int | None], StepRecord] = {}
    first_of_job: dict[str | None, StepRecord] = {}
    for item in records:
        if isinstance(item, StepRecord):
            first.setdefault((item.job_id, item.restart, item.round or 0), item)
            first.setdefault((item.job_id, item.restart, None), item)
            first_of_job.setdefault(item.job_id, item)
    found: list[Marker] = []
    for index, status in enumerate(statuses):
        job = status.record.job_id
        if status.record.resumed_from:
            before = statuses[index - 1] if index else None
            cause = f"resume of job {status.record.resumed_from}"
            if before is not None and before.failure is not None:
                cause += f" after {before.failure.describe()}"
            found.append(_marker(MarkerKind.RESUME, cause, job, 0, 0, first_of_job.get(job)))
        for restart in ordered_restarts(status):
            if restart.round:
                kind, at = MarkerKind.IN_ALLOCATION, first.get((job, restart.attempt, restart.round))
            else:
                kind, at = MarkerKind.RESTART, _first_after(first, job, restart.attempt)
            found.append(_marker(kind, restart.describe(), job, restart.attempt, restart.round, at))
    return found


def _first_after(first: Mapping[tuple[str | None, int | None, int | None], StepRecord], job: str, attempt: int) -> StepRecord | None:
    """The first step of the job's next attempt: the lowest restart count above `attempt`
    (Slurm's count can skip a number)."""
    later = [restart for (job_id, restart, round_) in first if job_id == job and round_ is None and restart is not None and restart > attempt]
    return first.get((job, min(later), None)) if later else None


def _marker(kind: str, cause: str, job_id: str, attempt: int, round_: int, at: StepRecord | None) -> Marker:
    when = at.time if at is not None and at.time > 0 else None
    return Marker(kind, cause, job_id, attempt, round_, at.step if at else None, when)


def training_curves(records: Sequence[MetricsRecord], statuses: Sequence[JobStatus], lost: str | None = None) -> Curves:
    """The kept curves of a lineage's jobs (`statuses`, oldest first) with their markers."""
    job_ids = ((lost,) if lost else ()) + tuple(s.record.job_id for s in statuses)
    kept = kept_curves(records, job_ids)
    return Curves(kept.job_ids, kept.loss, kept.val_loss, kept.tokens_per_s, tuple(markers(records, statuses)))


def finite(points: Iterable[Point]) -> list[Point]:
    """The points a chart can place (a diverged step's NaN or inf left out)."""
    return [p for p in points if math.isfinite(p.value)]


def breaks(points: Sequence[Point], markers: Iterable[Marker]) -> list[int]:
    """The indices of `points` (in step order) where the training had started again since the
    point before: a wall-time chart breaks its line there instead of drawing one across the
    hours a job waited in the queue."""
    steps = sorted({m.step for m in markers if m.step is not None})
    found = []
    for index in range(1, len(points)):
        following = bisect.bisect_right(steps, points[index - 1].step)  # the first marker after the point before
        if following < len(steps) and steps[following] <= points[index].step:
            found.append(index)
    return found
