"""Why each attempt of a job ended and the job ran again (or, for the last, stopped), and why
each round of trainers inside an allocation was started again: read from Slurm's state for the
attempt, the supervisor's decision records (or, for a job whose supervisor wrote none, its
attempt markers in the log and the error log), slurmdbd's node events and the failure records
the trainer wrote. hyperlaunch.runs.job_status puts them together for one job."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.decision_records import DecisionRecord
from hyperlaunch.core.error_lines import root_error_line, task_exit_code
from hyperlaunch.core.protocol import (
    RESTART_CEILING,
    AttemptAction,
    RestartCause,
    attempts_text,
    budget_spent,
    cause_text,
    checkpoint_lock_path,
    parse_attempt_marker,
)
from hyperlaunch.core.srun_lines import TASK_ENDED
from hyperlaunch.core.trainer_failures import (
    FINAL_FAILURE_KINDS,
    SCRIPT_FAILURE_KINDS,
    TrainerFailure,
    read_trainer_failure,
    trainer_failure_path,
)
from hyperlaunch.runs.attempts import failed_nodes, split_rounds
from hyperlaunch.runs.jobs import JobRecord
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


@dataclass(frozen=True)
class RoundError:
    """What a failed round's output says: the line that names its root error and the first
    failed task's own exit code (core.error_lines)."""

    line: str = ""
    task_exit: str | None = None

    @classmethod
    def read(cls, lines: Sequence[str]) -> RoundError:
        """From the round's part of the error log (a job whose supervisor wrote no record)."""
        return cls(root_error_line(lines), task_exit_code(lines))

    @classmethod
    def recorded(cls, decision: DecisionRecord | None, lines: Callable[[], Sequence[str]]) -> RoundError:
        """From the supervisor's decision record, as it read the round's output when it ended;
        from the log where there is no record, or where the record has nothing of the output
        (a stderr that was no file the supervisor could read back)."""
        if decision is not None and (decision.error_line or decision.task_exit):
            return cls(decision.error_line, decision.task_exit or None)
        return cls.read(lines())


def cut(text: str, limit: int | None) -> str:
    """`text` for a table's cell: longer than `limit`, cut there with `…` (None: whole)."""
    return text if limit is None or len(text) <= limit else text[: limit - 1].rstrip() + "…"


def attempt_cause(
    index: int,
    attempt: Attempt,
    marker: Mapping[str, str] | None,
    events: Sequence[NodeEvent],
    error: RoundError,
    record: JobRecord,
    next_start: str | None = None,
) -> Restart:
    state = attempt.state
    reason = marker_cause(marker)
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
        # The save signal reached the supervisor: Slurm's warning before the time limit,
        # unless the attempt ended well before that limit (someone sent it: preemption).
        limit = attempt.time_limit_s
        near_limit = limit is not None and attempt.elapsed_s >= limit - record.spec.recovery.signal_seconds - 60
        return Restart(index, cause_text(reason.value if near_limit else "preemption"), "saved and requeued")
    if reason is RestartCause.REQUEUE_REQUESTED:
        return Restart(index, cause_text(reason.value), "saved and requeued")
    if reason in (RestartCause.TRAINER_ERROR, RestartCause.CRASH, RestartCause.HANG) or state == "FAILED":
        round_text = (marker or {}).get("round", "")
        trainer = _trainer_failure(record, index, int(round_text) if round_text.isdigit() else 0)
        return _failed(index, reason, exit_code, error, trainer, repeated=(marker or {}).get("repeated") == "1")
    if state == "REQUEUED":
        return Restart(index, cause_text("requeued"), "scontrol requeue")
    return Restart(index, state.lower() or "unknown")


def as_restart_limit(ended: Restart, marker: Mapping[str, str] | None, record: JobRecord) -> Restart:
    """`ended` as a restart limit when the supervisor ended the job on it because the
    budget was spent (its end marker: action exit, more failures in a row than --max-restarts)."""
    failures = (marker or {}).get("failures", "")
    spent = failures.isdigit() and budget_spent(int(failures), record.spec.recovery.max_restarts)
    if (marker or {}).get("action") != AttemptAction.EXIT.value or not spent or marker_cause(marker) is RestartCause.RESTART_LIMIT:
        return ended
    limit = _limit_detail(failures, ended.attempt, record)
    return Restart(ended.attempt, cause_text(RestartCause.RESTART_LIMIT.value), f"{limit}; last: {ended.describe()}", ended.nodes, ended.kind)


def _limit_detail(failures: str | None, restart: int, record: JobRecord) -> str:
    allowed = record.spec.recovery.max_restarts
    if failures is None or not failures.isdigit():  # a marker of an older version
        return f"{allowed} restart(s) allowed"
    if int(failures) > allowed:
        return f"{attempts_text(int(failures))} in a row without a new checkpoint, {allowed} allowed"
    return f"restart {restart}: the ceiling of {RESTART_CEILING} restarts"


def _failed(
    index: int, reason: RestartCause | None, exit_code: str, error: RoundError, trainer: TrainerFailure | None,
    *, repeated: bool = False,
) -> Restart:
    """A step that failed: in the trainer's own words where it recorded them, since srun's
    lines ("task 0: Terminated") only tell that it ended. `repeated`: the supervisor ended the
    job because the round before had failed the same way at the same step."""
    if reason is RestartCause.TRAINER_ERROR:
        detail = trainer.message if trainer else error.line
        if repeated and trainer is not None and trainer.step is not None:
            detail += f"; the same error at step {trainer.step} in the round before, so not retried"
        return Restart(index, cause_text(reason.value), detail, kind=trainer.kind if trainer else "")
    code = error.task_exit or exit_code
    error_line = trainer.message if trainer and trainer.message else error.line
    if TASK_ENDED.search(error_line):
        error_line = ""  # srun's "task 0: Exited with exit code 1" says only what the code says
    ended = f"killed by {code}" if code.startswith("SIG") else f"exit {code}"
    detail = ended + (f": {error_line}" if error_line else "")
    cause = RestartCause.HANG if reason is RestartCause.HANG else RestartCause.CRASH
    return Restart(index, cause_text(cause.value), detail, kind=trainer.kind if trainer else "")


def _trainer_failure(record: JobRecord, index: int, round_: int = 0) -> TrainerFailure | None:
    return read_trainer_failure(trainer_failure_path(Path(record.spec.output.run_dir), record.job_id, index, round_))


def in_allocation_restarts(
    markers: Iterable[Mapping[str, str]], decisions: Mapping[tuple[int, int], DecisionRecord],
    err_by_attempt: Mapping[int, Sequence[str]], record: JobRecord,
) -> list[Restart]:
    """The supervisor's restarts inside the allocation (its `restart` markers, or the records of
    those decisions as markers: restart_markers): each names the round it starts and why the one
    before it ended (a lost node and the spare in its place, or a crash or hang in the trainer's
    words, else the first failed task's code and error: from the decision record of that round
    (`decisions`, by attempt and round), else from that round's part of the error log: srun's exit
    status is the highest of its tasks', 143 for the peers stopped after the first failed)."""
    found = []
    rounds_by_attempt: dict[int, dict[int, list[str]]] = {}
    for marker in markers:
        if marker.get("event") != "restart" or not marker.get("restart", "").isdigit() or not marker.get("round", "").isdigit():
            continue
        attempt, round_ = int(marker["restart"]), int(marker["round"])
        reason = marker_cause(marker)
        if reason is RestartCause.NODE_FAILURE:
            nodes = tuple(filter(None, marker.get("nodes", "").split(",")))
            detail = ", ".join(nodes) + (f" -> spare {marker['spare']}" if marker.get("spare") else "")
            found.append(Restart(attempt, cause_text(reason.value), detail, nodes, round=round_))
            continue
        trainer = _trainer_failure(record, attempt, round_ - 1)
        if reason in (RestartCause.CRASH, RestartCause.HANG):

            def logged(attempt: int = attempt, round_: int = round_) -> list[str]:
                if attempt not in rounds_by_attempt:
                    rounds_by_attempt[attempt] = split_rounds(err_by_attempt.get(attempt, []))
                return rounds_by_attempt[attempt].get(round_ - 1, [])

            error = RoundError.recorded(decisions.get((attempt, round_ - 1)), logged)
            found.append(dataclasses.replace(_failed(attempt, reason, marker.get("exit", "?"), error, trainer), round=round_))
            continue
        detail = f"exit {marker.get('exit', '?')}" + (f": {trainer.message}" if trainer and trainer.message else "")
        cause = cause_text(reason.value) if reason else marker.get("cause", "unknown")
        found.append(Restart(attempt, cause, detail, kind=trainer.kind if trainer else "", round=round_))
    return found


def restart_markers(lines: Iterable[str], decisions: Sequence[DecisionRecord]) -> list[dict[str, str]]:
    """The `restart` markers of a job in the order they happened: the decision records' (as
    markers) for each attempt whose supervisor wrote any, the log's for the others (a job from
    before the records)."""
    recorded = {d.restart for d in decisions}
    logged = [m for m in map(parse_attempt_marker, lines) if m and m.get("event") == "restart" and m.get("restart", "").isdigit()]
    found = [m for m in logged if int(m["restart"]) not in recorded]
    found += [d.as_marker() for d in decisions if d.event == "restart"]
    return sorted(found, key=lambda m: (int(m["restart"]), int(m["round"]) if m.get("round", "").isdigit() else 0))


def marker_cause(marker: Mapping[str, str] | None) -> RestartCause | None:
    try:
        return RestartCause((marker or {}).get("cause", ""))
    except ValueError:
        return None  # no marker (a killed batch host), or one from another version
