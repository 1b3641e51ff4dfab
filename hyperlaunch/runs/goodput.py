"""Goodput: where a training's wall time went, from its first submission to its end (or now),
over its lineage (the job, its requeues, the jobs it resumes), split into parts that add up to
the wall time, and what each restart cost.

Each moment of the wall time is given one part (`paint`): where parts overlap, the first in
PARTS wins, and a moment no part claims is `unaccounted`. The parts come from what the
training left behind:
- steps (metrics.jsonl step records: their end and step_time_s): `productive` where the step
  was kept (the record written last for that step), `recomputed` where a rollback lost it,
  with the failing step's time up to the rank's failure record (its file's time);
- `checkpoint` (a save's checkpoint_saving to checkpoint_completed), `validation` and `export`
  (the time between two steps, or after the last, in which the event was written);
- `hang`: from the last step to the watchdog's verdict (the hang event);
- `detection`: from the failure (the failure record, the verdict, else the last step) to the
  supervisor's action: the next round's start or the requeue it asked for, as its decision
  record times them (hyperlaunch.core.decision_records), else the marker of the next round or of
  the attempt's end (to the second);
- `start-up`: from the round's start (the attempt's start in Slurm, the marker of a round
  inside the allocation) to its first step: imports, the model's build, the checkpoint's load;
- `requeue wait`: from an attempt's end to the next one's start (Slurm's: the job ending,
  cred_expire, a scheduling pass, the queue); `queue`: from a submission to the first start;
  `between jobs`: from a job's end to the submission of the job resuming it.

Device-hours are the seconds times the job's GPUs (training nodes x GPUs a node), or its nodes
on CPU nodes: what that time would have trained."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hyperlaunch.core.decision_records import END, RESTART, DecisionRecord, written_at
from hyperlaunch.core.metrics_records import EventRecord, MetricsRecord, StepRecord, TrainerEvent
from hyperlaunch.core.protocol import parse_attempt_marker
from hyperlaunch.runs import attempts
from hyperlaunch.runs.attempts import restart_count, started
from hyperlaunch.runs.curves import kept_steps, ordered_restarts, own_records
from hyperlaunch.runs.job_status import JobStatus

PARTS = (
    "productive", "recomputed", "checkpoint", "validation", "export", "hang", "detection", "start-up",
    "requeue wait", "queue", "between jobs", "unaccounted",
)
"""The parts of the wall time, by precedence where two claim the same moment."""
LOST_PARTS = PARTS[1:]
_RANK = {part: index for index, part in enumerate(PARTS)}

RoundKey = tuple[str, int, int]
"""(job id, attempt, round)."""


@dataclass(frozen=True)
class Span:
    start: float
    end: float
    part: str


@dataclass(frozen=True)
class RestartCost:
    """What one restart cost: a new round inside the allocation, a requeue or a resume."""

    job_id: str
    attempt: int
    round: int
    cause: str
    nodes: tuple[str, ...]
    at: float
    """When the failed round made its last progress (its last step's end, else its start)."""
    seconds: Mapping[str, float]
    """The lost parts from `at` to the next round's first step."""
    steps_recomputed: int
    """Steps the failed round trained that a later round trained again."""

    @property
    def lost_s(self) -> float:
        return sum(self.seconds.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "attempt": self.attempt, "round": self.round, "cause": self.cause, "nodes": list(self.nodes),
            "at": self.at, "lost_s": round(self.lost_s, 3), "steps_recomputed": self.steps_recomputed,
            "seconds": {part: round(s, 3) for part, s in self.seconds.items()},
        }


@dataclass(frozen=True)
class Ledger:
    job_ids: tuple[str, ...]
    start: float
    end: float
    seconds: Mapping[str, float]
    """Every part's seconds; they add up to end - start."""
    devices: int
    device_unit: str
    """"GPU", or "node" for a job on CPU nodes."""
    restarts: tuple[RestartCost, ...] = ()
    timeline: tuple[Span, ...] = field(default=(), repr=False)
    """The painted wall time: consecutive spans, one part each."""

    @property
    def wall_s(self) -> float:
        return self.end - self.start

    @property
    def goodput(self) -> float:
        return self.seconds.get("productive", 0.0) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def lost_s(self) -> float:
        return self.wall_s - self.seconds.get("productive", 0.0)

    def device_hours(self, seconds: float) -> float:
        return seconds * self.devices / 3600

    def summary(self) -> str:
        """`goodput: 91.2 % (lost 0.31 GPU-h: 3 restarts)`, the line `status J` shows."""
        restarts = len(self.restarts)
        return (
            f"goodput: {self.goodput * 100:.1f} % (lost {self.device_hours(self.lost_s):.2f} {self.device_unit}-h:"
            f" {restarts} restart{'' if restarts == 1 else 's'})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": list(self.job_ids), "start": self.start, "end": self.end, "wall_s": round(self.wall_s, 3),
            "goodput": round(self.goodput, 4), "devices": self.devices, "device_unit": self.device_unit,
            "parts": {
                part: {"seconds": round(s, 3), "device_hours": round(self.device_hours(s), 4), "share": round(s / self.wall_s, 4) if self.wall_s else 0.0}
                for part, s in self.seconds.items()
            },
            "restarts": [r.to_json() for r in self.restarts],
        }


def paint(spans: Iterable[Span], start: float, end: float) -> list[Span]:
    """[start, end] cut into consecutive spans, each moment given the first part in PARTS of
    the spans that cover it, `unaccounted` where none does; neighbours of one part merged."""
    edges: list[tuple[float, int, int]] = []
    for span in spans:
        low, high = max(span.start, start), min(span.end, end)
        if high > low:
            edges += [(low, 1, _RANK[span.part]), (high, -1, _RANK[span.part])]
    edges.sort()
    open_counts = [0] * len(PARTS)
    heap: list[int] = []
    painted: list[Span] = []
    at = start
    for when, change, rank in [*edges, (end, 0, _RANK["unaccounted"])]:
        while heap and open_counts[heap[0]] == 0:
            heapq.heappop(heap)
        part = PARTS[heap[0]] if heap else "unaccounted"
        if when > at:
            if painted and painted[-1].part == part and painted[-1].end == at:
                painted[-1] = Span(painted[-1].start, when, part)
            else:
                painted.append(Span(at, when, part))
            at = when
        if change > 0:
            if open_counts[rank] == 0:
                heapq.heappush(heap, rank)
            open_counts[rank] += 1
        elif change < 0:
            open_counts[rank] -= 1
    return painted


def seconds_by_part(timeline: Iterable[Span], start: float = -math.inf, end: float = math.inf) -> dict[str, float]:
    """Each part's seconds within [start, end]."""
    found = dict.fromkeys(PARTS, 0.0)
    for span in timeline:
        low, high = max(span.start, start), min(span.end, end)
        if high > low:
            found[span.part] += high - low
    return found


def marker_time(text: str) -> float | None:
    """A marker's `time=2026-11-28T02:55:02Z` (UTC) as Unix time (read as `status` reads it)."""
    when = attempts.marker_time(text)
    return when.timestamp() if when is not None else None


def sacct_time(text: str) -> float | None:
    """sacct's `2026-11-28T03:05:37` (the cluster's local time) as Unix time."""
    when = attempts.parse_time(text)
    return when.timestamp() if when is not None else None


@dataclass
class _Round:
    key: RoundKey
    begin: float | None = None
    """The round's start: the attempt's start, or its restart marker."""
    action: float | None = None
    """When the supervisor acted on its end: the next round's marker, or the attempt's end marker."""
    steps: list[StepRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    failed: float | None = None
    """When its failure record was written."""
    ended_well: bool = False


def build(
    records: Sequence[MetricsRecord],
    statuses: Sequence[JobStatus],
    logs: Mapping[str, Sequence[str]],
    failure_times: Mapping[RoundKey, float],
    devices: int,
    device_unit: str,
    now: float,
    decisions: Mapping[str, Sequence[DecisionRecord]] | None = None,
) -> Ledger:
    """The ledger of a lineage (`statuses`, oldest first): its metrics `records`, each job's
    supervisor's decision records (`decisions`, by job id) and stdout log lines (`logs`: its
    markers, read for the attempts with no record), and the times its rounds' failure records
    were written."""
    job_ids = tuple(s.record.job_id for s in statuses)
    own = own_records(records, job_ids)
    rounds = _rounds(own, statuses, logs, failure_times, decisions or {})
    kept = kept_steps(own)
    spans: list[Span] = []
    ended = {(r.key[0], r.key[1]): r.action for r in rounds.values() if r.action is not None}
    for status in statuses:
        spans += _job_spans(status, ended)
    for index, status in enumerate(statuses[1:], 1):
        before = _job_end(statuses[index - 1])
        if before is not None:
            spans.append(Span(before, status.record.submitted_at, "between jobs"))
    ordered = sorted(rounds.values(), key=lambda r: (job_ids.index(r.key[0]), r.key[1], r.key[2]))
    for this in ordered:
        spans += _round_spans(this, kept)
    start = min((s.record.submitted_at for s in statuses), default=now)
    ends = [t for t in (_job_end(s) for s in statuses) if t is not None]
    ends += [item.time for item in own if item.time > 0]
    active = any(s.active for s in statuses)
    end = now if active or not ends else max(ends)
    timeline = paint(spans, start, end)
    return Ledger(
        job_ids=job_ids, start=start, end=end, seconds=seconds_by_part(timeline), devices=devices, device_unit=device_unit,
        restarts=tuple(_restart_costs(statuses, ordered, timeline, kept)), timeline=tuple(timeline),
    )


def _rounds(
    own: Sequence[MetricsRecord], statuses: Sequence[JobStatus], logs: Mapping[str, Sequence[str]],
    failure_times: Mapping[RoundKey, float], decisions: Mapping[str, Sequence[DecisionRecord]],
) -> dict[RoundKey, _Round]:
    rounds: dict[RoundKey, _Round] = {}

    def round_of(key: RoundKey) -> _Round:
        return rounds.setdefault(key, _Round(key))

    for item in own:
        if item.job_id is None or item.restart is None:
            continue
        this = round_of((item.job_id, item.restart, item.round or 0))
        (this.steps if isinstance(item, StepRecord) else this.events).append(item)  # type: ignore[arg-type]
    for status in statuses:
        job = status.record.job_id
        for index, attempt in enumerate(status.attempts):
            begin = sacct_time(attempt.start) if started(attempt) else None
            if begin is not None:
                round_of((job, restart_count(status.attempts, index), 0)).begin = begin
        recorded = {d.restart for d in decisions.get(job, ())}
        for decision in decisions.get(job, ()):
            _apply(decision, job, round_of)
        last_round: dict[int, _Round] = {}
        for line in logs.get(job, ()):
            marker = parse_attempt_marker(line)
            if marker is None or not marker.get("restart", "").isdigit():
                continue
            restart, when = int(marker["restart"]), marker_time(marker.get("time", ""))
            if when is None or (restart in recorded and marker["event"] != "start"):
                continue
            if marker["event"] == "start":
                first = round_of((job, restart, 0))
                first.begin = first.begin if first.begin is not None else when
                last_round[restart] = first
            elif marker["event"] == "restart" and marker.get("round", "").isdigit():
                number = int(marker["round"])
                round_of((job, restart, number - 1)).action = when
                round_of((job, restart, number)).begin = when
                last_round[restart] = round_of((job, restart, number))
            elif marker["event"] == "end":
                numbered = marker.get("round", "")
                ended = round_of((job, restart, int(numbered))) if numbered.isdigit() else last_round.get(restart) or round_of((job, restart, 0))
                ended.action = when
                ended.ended_well = marker.get("cause") == "completed"
    for key, when in failure_times.items():
        if key in rounds:
            rounds[key].failed = when
    return rounds


def _apply(decision: DecisionRecord, job: str, round_of: Callable[[RoundKey], _Round]) -> None:
    """A decision record's times on the rounds it ends and starts."""
    written = written_at(decision)
    if decision.event == RESTART and decision.round is not None and decision.next_round is not None:
        started = decision.next_round_started or written
        round_of((job, decision.restart, decision.round)).action = started
        round_of((job, decision.restart, decision.next_round)).begin = started
    elif decision.event == END and decision.round is not None:
        ended = round_of((job, decision.restart, decision.round))
        ended.action = decision.requeue_asked or written
        ended.ended_well = decision.cause == "completed"


def _job_spans(status: JobStatus, ended: Mapping[tuple[str, int], float]) -> list[Span]:
    """The queue before the job's first start and the wait before each later attempt: from the
    supervisor's last action in the attempt before (its end marker), else Slurm's end of it."""
    job = status.record.job_id
    spans: list[Span] = []
    previous_end: float | None = None
    first = True
    for index, attempt in enumerate(status.attempts):
        begin = sacct_time(attempt.start) if started(attempt) else None
        if begin is None:
            continue
        if first:
            spans.append(Span(status.record.submitted_at, begin, "queue"))
            first = False
        elif previous_end is not None:
            spans.append(Span(previous_end, begin, "requeue wait"))
        marked, end = ended.get((job, restart_count(status.attempts, index))), sacct_time(attempt.end)
        previous_end = min(t for t in (marked, end) if t is not None) if marked is not None or end is not None else None
    if first:
        spans.append(Span(status.record.submitted_at, math.inf, "queue"))  # not started yet
    return spans


def _job_end(status: JobStatus) -> float | None:
    ends = [sacct_time(a.end) for a in status.attempts]
    found = [t for t in ends if t is not None]
    return max(found) if found and not status.active else None


def _timed(steps: Sequence[StepRecord]) -> list[tuple[float, StepRecord]]:
    """A round's steps in time order, each with its start: its end less step_time_s, or, where
    the writer gave none (a script's runtime.log), the end of the step before (the first one
    then starts as it ends: its time is start-up's)."""
    timed: list[tuple[float, StepRecord]] = []
    for step in sorted((s for s in steps if s.time > 0), key=lambda s: s.time):
        previous = timed[-1][1].time if timed else step.time
        timed.append((step.time - step.step_time_s if step.step_time_s > 0 else previous, step))
    return timed


def _round_spans(this: _Round, kept: Mapping[int, StepRecord]) -> list[Span]:
    spans: list[Span] = []
    timed = _timed(this.steps)
    for began, step in timed:
        spans.append(Span(began, step.time, "productive" if kept.get(step.step) is step else "recomputed"))
    steps = [step for _, step in timed]
    first = timed[0][0] if timed else None
    last = steps[-1].time if steps else None
    if this.begin is not None:
        spans.append(Span(this.begin, first if first is not None else (this.action or this.begin), "start-up"))
    saving: float | None = None
    ends = [s.time for s in steps]
    for event in sorted(this.events, key=lambda e: e.time):
        if event.event == TrainerEvent.CHECKPOINT_SAVING.value:
            saving = event.time
        elif event.event == TrainerEvent.CHECKPOINT_COMPLETED.value and saving is not None:
            spans.append(Span(saving, event.time, "checkpoint"))
            saving = None
        elif event.event in (TrainerEvent.VALIDATION.value, TrainerEvent.EXPORTED.value, TrainerEvent.EXPORT_FAILED.value):
            part = "validation" if event.event == TrainerEvent.VALIDATION.value else "export"
            before = max((t for t in ends if t <= event.time), default=this.begin)
            if before is not None:
                spans.append(Span(before, event.time, part))
    if this.ended_well or (last is None and this.action is None):
        return spans
    progress = last if last is not None else first if first is not None else this.begin
    hang = next((e.time for e in this.events if e.event == TrainerEvent.HANG.value and progress is not None and e.time >= progress), None)
    if progress is not None:
        if hang is not None:
            spans.append(Span(progress, hang, "hang"))
            seen = hang
        elif this.failed is not None and this.failed >= progress and last is not None:
            spans.append(Span(progress, this.failed, "recomputed"))  # the step it failed in
            seen = this.failed
        else:
            seen = progress
        if this.action is not None:
            spans.append(Span(seen, this.action, "detection"))
    return spans


def _restart_costs(statuses: Sequence[JobStatus], ordered: Sequence[_Round], timeline: Sequence[Span], kept: Mapping[int, StepRecord]) -> list[RestartCost]:
    """A row for each restart `status` lists, and for each resume: the lost parts from the
    failed round's last progress to the next round's first step."""
    costs: list[RestartCost] = []
    position = {r.key: index for index, r in enumerate(ordered)}
    for status in statuses:
        job = status.record.job_id
        for restart in ordered_restarts(status):
            failed = _failed_round(ordered, job, restart.attempt, restart.round)
            if failed is None:
                continue
            following = ordered[position[failed.key] + 1] if position[failed.key] + 1 < len(ordered) else None
            costs.append(_cost(failed, following, job, restart.attempt, restart.round, restart.describe(), restart.nodes, timeline, kept))
    for index, status in enumerate(statuses[1:], 1):
        earlier = statuses[index - 1].record.job_id
        last = [r for r in ordered if r.key[0] == earlier]
        first = next((r for r in ordered if r.key[0] == status.record.job_id), None)
        if last:
            before = statuses[index - 1].failure
            cause = f"resume of job {earlier}" + (f" after {before.describe()}" if before is not None else "")
            costs.append(_cost(last[-1], first, status.record.job_id, 0, 0, cause, (), timeline, kept))
    return sorted(costs, key=lambda c: c.at)


def _failed_round(ordered: Sequence[_Round], job: str, attempt: int, round_: int) -> _Round | None:
    """The round a restart ended: for a round inside the allocation the one before it; for a
    requeue the attempt's last round."""
    if round_:
        return next((r for r in ordered if r.key == (job, attempt, round_ - 1)), None)
    of_attempt = [r for r in ordered if r.key[0] == job and r.key[1] == attempt]
    return of_attempt[-1] if of_attempt else None


def _cost(
    failed: _Round, following: _Round | None, job: str, attempt: int, round_: int, cause: str, nodes: Sequence[str],
    timeline: Sequence[Span], kept: Mapping[int, StepRecord],
) -> RestartCost:
    steps = [s for s in failed.steps if s.time > 0]
    at = max((s.time for s in steps), default=failed.begin or 0.0)
    until = min((began for began, _ in _timed(following.steps)), default=math.inf) if following is not None else math.inf
    lost = {part: s for part, s in seconds_by_part(timeline, at, until).items() if part in LOST_PARTS and part != "unaccounted" and s > 0}
    recomputed = sum(1 for s in steps if kept.get(s.step) is not s)
    return RestartCost(job, attempt, round_, cause, tuple(nodes), at, lost, recomputed)
