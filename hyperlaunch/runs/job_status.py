"""What happened to a job: Slurm state, attempts, why each restart happened, and the
trainer's progress (latest checkpoint, last loss and throughput).

Everything here is computed from what Slurm and the trainer already record - sacct's
attempts (one batched call for all jobs), slurmdbd's node events, the attempt markers the
rendered script writes into the log, metrics.jsonl and the checkpoint folder - so `status`
works from any shell, any time after the job ran. The attempts' own records are read in
hyperlaunch.runs.attempts; this module sums them up."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hyperlaunch.core import checkpoints
from hyperlaunch.core.metrics_records import (
    METRICS_FILE,
    EventRecord,
    StepRecord,
    TrainerEvent,
    parse_metrics_line,
)
from hyperlaunch.core.protocol import (
    RESTART_CEILING,
    AttemptAction,
    RestartCause,
    attempts_text,
    budget_spent,
    cause_text,
    checkpoint_lock_path,
    failures_in_a_row,
    made_progress,
    parse_attempt_marker,
)
from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.core.srun_lines import TASK_ENDED
from hyperlaunch.core.trainer_failures import (
    FINAL_FAILURE_KINDS,
    SCRIPT_FAILURE_KINDS,
    TrainerFailure,
    read_trainer_failure,
    trainer_failure_path,
)
from hyperlaunch.job.spec import dependencies
from hyperlaunch.runs.attempts import (
    failed_nodes,
    markers_by_restart,
    read_lines,
    restart_count,
    root_error_line,
    running_past_its_record,
    split_attempts,
    split_rounds,
    task_exit_code,
    with_logged_attempts,
)
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.slurm import accounting as slurm_accounting
from hyperlaunch.slurm import queue as slurm_queue
from hyperlaunch.slurm.accounting import Attempt, NodeEvent


@dataclass(frozen=True)
class Restart:
    """Why one attempt ended and the job ran again (or, for the last one, stopped)."""

    attempt: int
    """Which attempt ended (0 = the first run, = SLURM_RESTART_COUNT of that run)."""
    cause: str
    """node failure | preemption | time limit | crash | trainer error | requeued | cancelled |
    restart limit | checkpoint folder in use."""
    detail: str = ""
    """The failed node(s), or the exit code and the error line of a crash, or the trainer's
    own line for a trainer error."""
    nodes: tuple[str, ...] = ()
    """For a node failure: the nodes that went down during the attempt."""
    kind: str = ""
    """A FailureKind value when the trainer recorded why it failed, else empty."""
    round: int = 0
    """For a restart inside the allocation: the round of trainers it started (1 and on)."""

    def describe(self, limit: int | None = None) -> str:
        """`cause (detail)`; with `limit`, a detail longer than that cut there with `…` (a
        table's cell: `status JOB` shows it whole)."""
        where = " in allocation" if self.round else ""
        detail = cut(self.detail, limit)
        return f"{self.label}{where} ({detail})" if detail else f"{self.label}{where}"

    @property
    def label(self) -> str:
        """The cause in words: a user's script that stopped with runtime.fail, or on an error no
        restart fixes, is a script error, not the bundled trainer's."""
        return "script error" if self.kind in SCRIPT_FAILURE_KINDS else self.cause

    @property
    def final(self) -> bool:
        """A failure no restart fixes ended the attempt (its record's verdict)."""
        return self.kind in _FINAL_KINDS


_FINAL_KINDS = frozenset(kind.value for kind in FINAL_FAILURE_KINDS)


def cut(text: str, limit: int | None) -> str:
    """`text` for a table's cell: longer than `limit`, cut there with `…` (None: whole)."""
    return text if limit is None or len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(frozen=True)
class Progress:
    """The trainer's progress as its metrics.jsonl and checkpoint folder show it."""

    last_step: int | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    checkpoint_step: int | None = None
    checkpoint: str | None = None
    resumed_from_steps: tuple[int, ...] = ()
    events: tuple[EventRecord, ...] = ()

    @property
    def export_error(self) -> str | None:
        """Why the trainer's final Hugging Face export was not written (a full disk), where its
        last export of the run failed; the training itself completed."""
        ends = [e for e in self.events if e.event in (TrainerEvent.EXPORTED.value, TrainerEvent.EXPORT_FAILED.value)]
        return ends[-1].message if ends and ends[-1].event == TrainerEvent.EXPORT_FAILED.value else None


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
    """The budget as the next attempt's script will count it: from the trainer's progress
    records in the run dir. An attempt under way that has saved already has given it back."""
    run_dir, job = Path(record.spec.output.run_dir), record.job_id
    if not any(_started(a) for a in attempts):  # still queued, or cancelled there (a failed --after)
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
    return RestartBudget(windows=sum(map(_started, attempts)), failures=failures, allowed=record.spec.recovery.max_restarts)


@dataclass(frozen=True)
class Dependency:
    job: str
    kind: str
    """`ok`: starts once `job` completed; `any`: however it ended."""
    state: str
    """`job`'s Slurm state now (UNKNOWN when Slurm no longer knows it)."""


def blocker_of(waits_for: Sequence[Dependency], attempts: Sequence[Attempt]) -> Dependency | None:
    """For a job that never started: a job it waited to complete that ended otherwise (Slurm
    cancels it then, --kill-on-invalid-dep), or None."""
    if any(_started(a) for a in attempts):
        return None
    for waited in waits_for:
        if waited.kind == "ok" and waited.state not in ACTIVE_STATES and waited.state not in ("COMPLETED", "UNKNOWN"):
            return waited
    return None


def _started(attempt: Attempt) -> bool:
    """Whether Slurm started the attempt: it has a start time and nodes. A job cancelled in the
    queue has neither, but one cancelled as it was submitted (its --after had already failed)
    has its submit time as start and end in sacct, and still no nodes ("None assigned")."""
    return attempt.start not in ("", "Unknown", "None") and attempt.node_list not in ("", "None assigned")


def never_runs_text(blocker: Dependency | None) -> str | None:
    """Why a job (or a sweep) that `blocker` failed never runs, in words; None without one."""
    if blocker is None:
        return None
    return f"job {blocker.job} ended {blocker.state}; this one waited for it to complete (--after {blocker.job}:ok)"


class WaitsFor:
    """What a job that waits for others says of them: the blocker, and why it never runs.
    Mixed into the statuses that have `waits_for` and Slurm `attempts`."""

    state: str
    waits_for: tuple[Dependency, ...]
    attempts: tuple[Attempt, ...]
    pending_reason: str
    """While PENDING: squeue's word for why (Resources, Priority, ...); "" otherwise."""

    @property
    def blocker(self) -> Dependency | None:
        """For a job that never started: a job it waited to complete that ended otherwise."""
        return blocker_of(self.waits_for, self.attempts)

    @property
    def never_runs(self) -> str | None:
        """Why a job that never started never will, or None."""
        return never_runs_text(self.blocker)


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

    def to_json(self) -> dict[str, Any]:
        spec = self.record.spec
        return {
            "job_id": self.record.job_id,
            "model": spec.job.model,
            "name": spec.derived.checkpoint_name,
            "script": spec.job.script,
            "module": spec.job.module,
            "code_dir": spec.derived.code_dir,
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
            "export_error": self.progress.export_error,
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


def collect(records: Sequence[JobRecord], *, env: Mapping[str, str] | None = None) -> list[JobStatus]:
    """Status of each job: one sacct call for all of them (per Slurm config in use), one
    node-event query only when some attempt ended in NODE_FAIL."""
    by_conf: dict[str | None, list[JobRecord]] = {}
    for record in records:
        by_conf.setdefault(conf_for(record.slurm_conf, env), []).append(record)
    attempts: dict[str, list[Attempt]] = {}
    events: dict[str | None, list[NodeEvent]] = {}
    queued: dict[str, str] = {}
    reasons: dict[str, str] = {}
    ended: dict[str, str] = {}
    for conf, group in by_conf.items():
        slurm_env = env_with_conf(env, conf)
        # squeue runs while sacct does: each waits on slurmctld or slurmdbd, not on us.
        waited = list(dict.fromkeys(job for r in group for job, _ in dependencies(r.spec)))
        with ThreadPoolExecutor(max_workers=2) as pool:
            in_queue = pool.submit(slurm_queue.my_queue, env=slurm_env)
            # The jobs waited for by their own states: an array task's (12_3) and a whole
            # array's (a sweep's) are not one job's attempts.
            waited_states = pool.submit(slurm_accounting.job_states, waited, env=slurm_env)
            found = slurm_accounting.job_attempts([r.job_id for r in group], env=slurm_env)
            for name, entry in in_queue.result().items():
                queued[name], reasons[name] = entry.state, entry.reason
            ended.update(waited_states.result())
        attempts.update(found)
        failed = [a for job in found.values() for a in job if a.state == "NODE_FAIL"]
        if failed:
            starts = [a.start for a in failed if a.start and a.start != "Unknown"]
            if starts:
                events[conf] = slurm_accounting.node_events(min(starts), env=slurm_env)
    def state_of(job: str) -> str:
        if queued.get(job) in ACTIVE_STATES:
            return queued[job]
        if any(name.startswith(f"{job}_") and state in ACTIVE_STATES for name, state in queued.items()):
            return "PENDING" if all(state == "PENDING" for name, state in queued.items() if name.startswith(f"{job}_")) else "RUNNING"
        return ended.get(job, "UNKNOWN")

    return [
        dataclasses.replace(
            summarize(record, attempts.get(record.job_id, []), events.get(conf_for(record.slurm_conf, env), []), queue_state=queued.get(record.job_id)),
            waits_for=tuple(Dependency(job, kind, state_of(job)) for job, kind in dependencies(record.spec)),
            pending_reason=reasons.get(record.job_id, "") if queued.get(record.job_id) == "PENDING" else "",
        )
        for record in records
    ]


def conf_for(recorded: str | None, env: Mapping[str, str] | None) -> str | None:
    """The Slurm config to ask about a job: the one in force now, else the one it was submitted with."""
    current = (env or {}).get("SLURM_CONF")
    return current or recorded


def env_with_conf(env: Mapping[str, str] | None, conf: str | None) -> dict[str, str]:
    base = dict(env if env is not None else os.environ)
    if conf and os.path.isfile(conf):  # a dev cluster's, removed since: the one in force is asked
        base["SLURM_CONF"] = conf
    return base


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
    markers = markers_by_restart(out_lines, "end")
    attempts = with_logged_attempts(attempts, markers_by_restart(out_lines, "start"), markers)
    if attempts and queue_state == "RUNNING":
        attempts[-1] = running_past_its_record(attempts[-1], now or datetime.now())
    err_by_attempt = split_attempts(read_lines(err_log))

    def cause_of(index: int) -> Restart:
        following = attempts[index + 1].start if index + 1 < len(attempts) else None
        count = restart_count(attempts, index)
        marker = markers.get(count)
        ended = _cause(count, attempts[index], marker, events, err_by_attempt.get(count, []), record, following)
        return _budget_spent(ended, marker, record)

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
            if _marker_cause(markers.get(restart_count(attempts, len(attempts) - 1))) is RestartCause.RESTART_LIMIT and restarts:
                failure = Restart(failure.attempt, failure.cause, f"{failure.detail}; last: {restarts[-1].describe()}")
    progress, steps = read_progress(record)
    state = current_state(last, queue_state)
    budget = restart_budget(record, attempts, last_running=last is not None and last.state in ACTIVE_STATES)
    return JobStatus(
        in_allocation=tuple(_in_allocation_restarts(out_lines, err_by_attempt, record)),
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


def _cause(
    index: int,
    attempt: Attempt,
    marker: Mapping[str, str] | None,
    events: Sequence[NodeEvent],
    err_lines: Sequence[str],
    record: JobRecord,
    next_start: str | None = None,
) -> Restart:
    state = attempt.state
    reason = _marker_cause(marker)
    if state == "NODE_FAIL" or reason is RestartCause.NODE_FAILURE:
        down = tuple(failed_nodes(attempt, events, next_start))
        if not down and (marker or {}).get("nodes"):
            down = tuple((marker or {})["nodes"].split(","))
        return Restart(index, cause_text(RestartCause.NODE_FAILURE.value), ", ".join(down), down)
    if state == "PREEMPTED":
        return Restart(index, cause_text("preemption"))
    if state == "TIMEOUT":
        return Restart(index, cause_text(RestartCause.TIME_LIMIT.value))
    if state == "CANCELLED":
        return Restart(index, cause_text("cancelled"))
    exit_code = (marker or {}).get("exit", attempt.exit_code.split(":")[0])
    if reason is RestartCause.RESTART_LIMIT:
        return Restart(index, cause_text(reason.value), _limit_detail((marker or {}).get("failures"), index, record))
    if reason is RestartCause.CHECKPOINT_LOCKED:
        holder = (marker or {}).get("holder", "")
        lock = checkpoint_lock_path(Path(record.spec.output.checkpoint_dir), record.spec.derived.checkpoint_name)
        return Restart(index, cause_text(reason.value), f"job {holder or '?'} holds its lock, {lock.name}")
    if reason is RestartCause.TIME_LIMIT:
        # The save signal reached the batch shell: Slurm's warning before the time limit,
        # unless the attempt ended well before that limit (someone sent it: preemption).
        limit = attempt.time_limit_s
        near_limit = limit is not None and attempt.elapsed_s >= limit - record.spec.recovery.signal_seconds - 60
        return Restart(index, cause_text(reason.value if near_limit else "preemption"), "saved and requeued")
    if reason is RestartCause.REQUEUE_REQUESTED:
        return Restart(index, cause_text(reason.value), "saved and requeued")
    if reason in (RestartCause.TRAINER_ERROR, RestartCause.CRASH, RestartCause.HANG) or state == "FAILED":
        round_text = (marker or {}).get("round", "")
        return _failed(index, reason, exit_code, err_lines, _trainer_failure(record, index, int(round_text) if round_text.isdigit() else 0))
    if state == "REQUEUED":
        return Restart(index, cause_text("requeued"), "scontrol requeue")
    return Restart(index, state.lower() or "unknown")


def _budget_spent(ended: Restart, marker: Mapping[str, str] | None, record: JobRecord) -> Restart:
    """`ended` as a restart limit when the script ended the job on it because the budget was
    spent (its end marker: action exit, more failures in a row than --max-restarts)."""
    failures = (marker or {}).get("failures", "")
    spent = failures.isdigit() and budget_spent(int(failures), record.spec.recovery.max_restarts)
    if (marker or {}).get("action") != AttemptAction.EXIT.value or not spent or _marker_cause(marker) is RestartCause.RESTART_LIMIT:
        return ended
    limit = _limit_detail(failures, ended.attempt, record)
    return Restart(ended.attempt, cause_text(RestartCause.RESTART_LIMIT.value), f"{limit}; last: {ended.describe()}", ended.nodes, ended.kind)


def _limit_detail(failures: str | None, restart: int, record: JobRecord) -> str:
    allowed = record.spec.recovery.max_restarts
    if failures is None or not failures.isdigit():  # a marker of an older script
        return f"{allowed} restart(s) allowed"
    if int(failures) > allowed:
        return f"{attempts_text(int(failures))} in a row without a new checkpoint, {allowed} allowed"
    return f"restart {restart}: the ceiling of {RESTART_CEILING} restarts"


def _failed(
    index: int, reason: RestartCause | None, exit_code: str, err_lines: Sequence[str], trainer: TrainerFailure | None
) -> Restart:
    """A step that failed: in the trainer's own words where it recorded them, since srun's
    lines ("task 0: Terminated") only tell that it ended."""
    if reason is RestartCause.TRAINER_ERROR:
        detail = trainer.message if trainer else root_error_line(err_lines)
        return Restart(index, cause_text(reason.value), detail, kind=trainer.kind if trainer else "")
    code = task_exit_code(err_lines) or exit_code
    error_line = trainer.message if trainer and trainer.message else root_error_line(err_lines)
    if TASK_ENDED.search(error_line):
        error_line = ""  # srun's "task 0: Exited with exit code 1" says only what the code says
    ended = f"killed by {code}" if code.startswith("SIG") else f"exit {code}"
    detail = ended + (f": {error_line}" if error_line else "")
    cause = RestartCause.HANG if reason is RestartCause.HANG else RestartCause.CRASH
    return Restart(index, cause_text(cause.value), detail, kind=trainer.kind if trainer else "")


def _trainer_failure(record: JobRecord, index: int, round_: int = 0) -> TrainerFailure | None:
    return read_trainer_failure(trainer_failure_path(Path(record.spec.output.run_dir), record.job_id, index, round_))


def _in_allocation_restarts(lines: Iterable[str], err_by_attempt: Mapping[int, Sequence[str]], record: JobRecord) -> list[Restart]:
    """The script's `restart` markers: each names the round it starts and why the one before
    it ended (a lost node and the spare in its place, or a crash or hang in the trainer's words,
    else the first failed task's code and error from that round's part of the error log: srun's
    exit status is the highest of its tasks', 143 for the peers stopped after the first failed)."""
    found = []
    rounds_by_attempt: dict[int, dict[int, list[str]]] = {}
    for line in lines:
        marker = parse_attempt_marker(line)
        if not marker or marker.get("event") != "restart" or not marker.get("round", "").isdigit():
            continue
        attempt, round_ = int(marker["restart"]), int(marker["round"])
        reason = _marker_cause(marker)
        if reason is RestartCause.NODE_FAILURE:
            nodes = tuple(filter(None, marker.get("nodes", "").split(",")))
            detail = ", ".join(nodes) + (f" -> spare {marker['spare']}" if marker.get("spare") else "")
            found.append(Restart(attempt, cause_text(reason.value), detail, nodes, round=round_))
            continue
        trainer = _trainer_failure(record, attempt, round_ - 1)
        if reason in (RestartCause.CRASH, RestartCause.HANG):
            if attempt not in rounds_by_attempt:
                rounds_by_attempt[attempt] = split_rounds(err_by_attempt.get(attempt, []))
            ended = rounds_by_attempt[attempt].get(round_ - 1, [])
            found.append(dataclasses.replace(_failed(attempt, reason, marker.get("exit", "?"), ended, trainer), round=round_))
            continue
        detail = f"exit {marker.get('exit', '?')}" + (f": {trainer.message}" if trainer and trainer.message else "")
        cause = cause_text(reason.value) if reason else marker.get("cause", "unknown")
        found.append(Restart(attempt, cause, detail, kind=trainer.kind if trainer else "", round=round_))
    return found


def _marker_cause(marker: Mapping[str, str] | None) -> RestartCause | None:
    try:
        return RestartCause((marker or {}).get("cause", ""))
    except ValueError:
        return None  # no marker (a killed batch host), or one from another version


def _metrics_records(path: Path) -> tuple[Sequence[StepRecord], Sequence[EventRecord]]:
    """The steps and events of a metrics file, parsed once for as long as it stays as it is: a
    run folder is shared by a job and those that resume it, and `status` reads it for each."""
    try:
        info = path.stat()
    except OSError:
        return (), ()
    return _parsed_metrics(str(path), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=8)
def _parsed_metrics(path: str, mtime_ns: int, size: int) -> tuple[tuple[StepRecord, ...], tuple[EventRecord, ...]]:
    steps: list[StepRecord] = []
    events: list[EventRecord] = []
    for line in read_lines(Path(path)):
        item = parse_metrics_line(line)  # None for a line cut by a crash mid-write
        if isinstance(item, StepRecord):
            steps.append(item)
        elif isinstance(item, EventRecord):
            events.append(item)
    return tuple(steps), tuple(events)


def read_progress(record: JobRecord) -> tuple[Progress, list[StepRecord]]:
    all_steps, all_events = _metrics_records(Path(record.spec.output.run_dir) / METRICS_FILE)
    steps, events = list(all_steps), list(all_events)
    # A run dir is shared by a job and the jobs that resume it; the trainer tags each record
    # with its Slurm job id, so each job shows its own part (untagged files: all of it).
    tagged = any(step.job_id is not None for step in steps) or any(event.job_id is not None for event in events)
    if tagged:
        steps = [item for item in steps if item.job_id == record.job_id]
        events = [item for item in events if item.job_id == record.job_id]
    model = record.spec.derived.checkpoint_name
    saved = [e for e in events if e.event == TrainerEvent.CHECKPOINT_COMPLETED.value and e.details.get("path")] if tagged else []
    ckpt_name: str | None = None
    if saved:
        # The last checkpoint this job completed: the pointer may be a later job's by now (a
        # resume of this one, or the same training submitted again).
        ckpt_name = Path(str(saved[-1].details["path"])).name
    elif tagged and not steps and not events:
        pass  # it never trained (the folder's records are other jobs'): the pointer is theirs
    else:
        try:
            # A run that saves none has none of its own: a pointer there is another run's.
            ckpt_name = checkpoints.read_pointer(Path(record.spec.output.checkpoint_dir), model) if record.spec.saves_checkpoints else None
        except Exception:  # noqa: BLE001 - status shows what it can; `checkpoints` explains a bad pointer
            ckpt_name = None
    ckpt_step = checkpoints.parse_step(ckpt_name, model) if ckpt_name is not None else None
    last = steps[-1] if steps else None
    resumed = tuple(e.step or 0 for e in events if e.event == TrainerEvent.RESUMED.value)
    progress = Progress(
        last_step=last.step if last else None,
        last_loss=last.loss if last else None,
        tokens_per_s=last.tokens_per_s if last else None,
        checkpoint_step=ckpt_step,
        checkpoint=ckpt_name,
        resumed_from_steps=resumed,
        events=tuple(events),
    )
    return progress, steps
