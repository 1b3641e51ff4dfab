"""One attempt of a job (one Slurm run of its batch script), supervised: the checkpoint lock,
the attempt markers, rounds of trainers inside the allocation (after a crash or hang on healthy
nodes, or on a spare in place of a lost node), the restart budget and the requeue. The decisions
are hyperlaunch.supervisor.decisions'; the parts that carry them out each keep their own state:
the nodes (allocation), the round counter (rounds), the budget (budget), the step and its probe
(step), the signals (signals). This module wires them together."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pkgutil
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hyperlaunch.core.decision_records import END, RESTART, DecisionRecord, append_decision, decisions_path
from hyperlaunch.core.error_lines import root_error_line, task_exit_code
from hyperlaunch.core.protocol import (
    REQUEUE_EXIT_CODE,
    AttemptAction,
    RestartCause,
    parse_marker_fields,
    previous_attempt_cause,
    requeue_request_path,
    write_attempt_end,
)
from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.core.trainer_failures import (
    TRAINER_FAILURE_FILE_ENV,
    FailureKind,
    TrainerFailure,
    read_trainer_failure,
    write_trainer_failure,
)
from hyperlaunch.supervisor import slurm_calls, sweep_element
from hyperlaunch.supervisor.allocation import Allocation
from hyperlaunch.supervisor.budget import RestartBudget
from hyperlaunch.supervisor.decisions import RoundEnd, after_round, slurm_job
from hyperlaunch.supervisor.keepers import Keepers
from hyperlaunch.supervisor.lock import HELD, TAKEN, CheckpointLock, utc_now
from hyperlaunch.supervisor.output import Markers, err
from hyperlaunch.supervisor.rounds import Rounds
from hyperlaunch.supervisor.signals import Signals, Terminated
from hyperlaunch.supervisor.step import TrainingStep
from hyperlaunch.supervisor.torn_checkpoints import TornCheckpoints


class Attempt:
    """The attempt's parts, and its course from the lock to its end marker."""

    def __init__(self, options: SupervisorOptions, environ: Mapping[str, str], step_script: str, *, sweep_element: bool = False) -> None:
        self.options = options
        self.environ = dict(environ)
        self.job_id = environ.get("SLURM_JOB_ID", "")
        self.slurm_job = slurm_job(environ, sweep_element=sweep_element)
        """The job as Slurm commands must name it (a sweep's element: `12_3`)."""
        job = self.job_id or "0"
        count = environ.get("SLURM_RESTART_COUNT", "")
        self.restart = int(count) if count.isdigit() else 0
        self.run_dir = Path(options.run_dir)
        self.requeue_request = requeue_request_path(self.run_dir, job, self.restart)
        """Where rank 0 asks for a requeue, having saved after a stop signal."""
        self.host = socket.gethostname()
        self.marker = Markers(self.restart, self.job_id)
        self.lock = CheckpointLock(options.checkpoint_lock, self.job_id, self.host, say=err)
        self.budget = RestartBudget(self.run_dir, job, self.restart, options.max_restarts)
        self.allocation = Allocation(options, self.environ, self.slurm_job)
        self.rounds = Rounds(self.run_dir, job, self.restart, previous_attempt_cause(self.run_dir, job, self.restart))
        self.step = TrainingStep(options, self.environ, step_script, self.job_id, self.slurm_job, self.host, self.restart)
        self.signals = Signals(self.step)
        self.torn = TornCheckpoints(options.checkpoint_dir, options.checkpoint_name, self.slurm_job, err)
        self.keepers = Keepers(options, self.environ, job) if options.keepers else None
        """The memory snapshots' keepers, where the job keeps them."""
        self.lost: tuple[str, ...] = ()
        """The nodes the last round lost: their keepers are gone too."""
        self.ended: RoundSeen | None = None
        """What the supervisor saw of the round that ended last, for its decision record."""

    def run(self) -> int:
        """The attempt, start to end: its exit status."""
        self._make_dirs()
        # Records of an earlier job with this id must not decide this attempt (a rebuilt cluster
        # numbers its jobs from the start again, into the same run dir).
        with contextlib.suppress(OSError):
            self.rounds.failure_record.unlink()
            if self.restart == 0:
                decisions_path(self.run_dir, self.job_id or "0").unlink()
        refusal = self.budget.start()
        if refusal is not None:
            self._start_marker()
            err(f"hyperlaunch: {refusal}")
            self._end_marker(1, RestartCause.RESTART_LIMIT, f"failures={self.budget.failures}", AttemptAction.EXIT)
            return 1
        taken = self.lock.take()
        if taken != TAKEN:
            self._start_marker()
            holder = self.lock.holder
            if taken == HELD:
                err(
                    f"hyperlaunch: job {holder} ({self.lock.holder_state}) trains into the same checkpoint folder and model"
                    f" (lock {self.lock.path}): not training a second copy; wait for it to end or cancel it"
                )
                self._end_marker(1, RestartCause.CHECKPOINT_LOCKED, f"holder={holder}", AttemptAction.EXIT)
                return 1
            err(
                f"hyperlaunch: could not take the checkpoint lock {self.lock.path}"
                f" (held by job {holder or '?'}, state {self.lock.holder_state or 'unknown'})"
            )
            return self._requeue_within_budget(RestartCause.CHECKPOINT_LOCKED, 1, f"holder={holder or 'none'}")
        self.allocation.take()
        if self.keepers is not None:
            self.keepers.start([*self.allocation.round_nodes, *self.allocation.spares])
        self.rounds.first()
        spares = f" spares={','.join(self.allocation.spares)}" if self.allocation.spares else ""
        self._start_marker(spares)
        return self._rounds()

    def _make_dirs(self) -> None:
        # The trainer writes here; Pyxis also refuses to mount a source that does not exist yet.
        for folder in (self.options.checkpoint_dir, self.options.run_dir):
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as error:
                err(f"hyperlaunch: cannot create {folder}: {error.strerror or error}")

    def _rounds(self) -> int:
        while True:
            self.torn.before_round()
            before = self.budget.checkpoint_step()
            more_env = self.keepers.round_environment(self.allocation.round_nodes, self.lost) if self.keepers is not None else {}
            status, lost = self.step.run(self.rounds, self.allocation, more_env)
            self.ended = self._seen(status, lost)
            self.lost = tuple(lost)
            if self.budget.checkpoint_step() > before:
                self.rounds.progressed()
            kind, final = "", False
            record: TrainerFailure | None = None
            from_output: TrainerFailure | None = None
            if status != 0:
                record = read_trainer_failure(self.rounds.failure_record)
                if record is None:
                    record = from_output = self._unfixable_error(status, lost)
                if record is not None:
                    kind, final = record.kind, record.final
            repeated = record is not None and self._repeats_the_round_before(record)
            end = RoundEnd(
                status=status,
                lost=tuple(lost),
                failure_kind=kind,
                failure_final=final,
                save_requested=self.signals.save_requested,
                requeue_requested=os.path.lexists(self.requeue_request),
                in_row=self.rounds.in_row,
                restarts_in_allocation=self.options.restarts_in_allocation,
                repeated=repeated,
            )
            decision = after_round(end, self.allocation.down_nodes)
            if decision.action == "torn" and record is not None:
                set_aside = self.torn.after_round(record.checkpoint, record.message)
                if set_aside:
                    self._next_round(decision.cause, status, f"checkpoint={set_aside}", in_row=False)
                    continue
                # Nothing of that name to set aside: a crash like any other, within the budgets.
                decision = after_round(dataclasses.replace(end, failure_kind=""), self.allocation.down_nodes)
            if decision.action == "exit":
                if decision.cause is RestartCause.TRAINER_ERROR and from_output is not None:
                    # Recorded once it ends the job: where a node is down, the round is a node failure.
                    where = {TRAINER_FAILURE_FILE_ENV: str(self.rounds.failure_record)}
                    write_trainer_failure(FailureKind(from_output.kind), from_output.message, None, where)
                    fixed = f"; once fixed: hyperlaunch resume {self.slurm_job} --refresh-code" if self.options.script_name else ""
                    err(
                        f"hyperlaunch: the step failed in a way no restart can fix ({from_output.message}): not requeued;"
                        f" the whole output: hyperlaunch logs {self.slurm_job} --err{fixed}"
                    )
                elif decision.cause is RestartCause.TRAINER_ERROR and end.repeated and record is not None:
                    err(
                        f"hyperlaunch: the trainers failed at step {record.step} again, with the same error as the round"
                        f" before ({record.message}): not restarted again, as every restart would meet it;"
                        f" once fixed: hyperlaunch resume {self.slurm_job}"
                    )
                elif decision.cause is RestartCause.TRAINER_ERROR:
                    err(
                        f"hyperlaunch: the trainer failed ({kind}) in a way no restart can fix: not requeued;"
                        f" its reason is in {self.rounds.failure_record}"
                    )
                self._end_marker(status, decision.cause, f"{decision.fields} round={self.rounds.number}".lstrip(), AttemptAction.EXIT)
                return status
            if decision.action == "requeue":
                return self._requeue_within_budget(decision.cause, status)
            if decision.action == "lost":
                self.lost = tuple(dict.fromkeys([*self.lost, *decision.nodes]))
                replaced_by = self.allocation.replace(decision.nodes)
                if replaced_by is not None:
                    fields = f"nodes={','.join(decision.nodes)} spare={','.join(replaced_by)}"
                    self._next_round(RestartCause.NODE_FAILURE, status, fields, in_row=False)
                    continue
                return self._requeue_within_budget(decision.cause, status, decision.fields, decision.nodes)
            self._next_round(decision.cause, status, decision.fields, in_row=True)

    def _repeats_the_round_before(self, record: TrainerFailure) -> bool:
        """Whether the round's failure is the round before's again (TrainerFailure.repeats);
        that record is looked for only after a round that failed with one."""
        earlier = self.rounds.record_before()
        return earlier is not None and record.repeats(read_trainer_failure(earlier))

    def _unfixable_error(self, status: int, lost: Sequence[str]) -> TrainerFailure | None:
        """A failure record for the round from its output (not written yet), where no rank wrote
        one and the output names an error no restart fixes (hyperlaunch.supervisor.step_errors):
        never for a round that lost nodes or stopped to save."""
        if lost or self.signals.save_requested or status == REQUEUE_EXIT_CODE or os.path.lexists(self.requeue_request):
            return None
        return self.step.unfixable_error(self.allocation.round_nodes)

    def _next_round(self, cause: RestartCause, status: int, fields: str, *, in_row: bool) -> None:
        number = self.rounds.next(cause, in_row=in_row)
        more = f"{fields} " if fields else ""
        self.marker("restart", f"round={number} cause={cause.value} exit={status} {more}action={AttemptAction.RESTART_IN_ALLOCATION.value}")
        self._record(RESTART, status, cause, fields, AttemptAction.RESTART_IN_ALLOCATION, next_round=number, next_round_started=time.time())

    def _requeue_within_budget(self, cause: RestartCause, status: int, fields: str = "", lost: Sequence[str] = ()) -> int:
        """Requeue the job while the restart budget lasts, else end it with `status`. An attempt
        that completed a checkpoint resets the budget; lost nodes are given back first (else
        the requeue waits until Slurm marks them down), then excluded from the next start."""
        lost = self.allocation.all_gone(lost, self.step.prober.gone)
        if self.keepers is not None:
            self.keepers.persist_newest([*self.lost, *lost], self.restart)
        allowed = self.budget.spend()
        text = f"{fields} " if fields else ""
        text += f"failures={self.budget.failures}" + (f" round={self.rounds.number}" if self.rounds.number is not None else "")
        if allowed:
            self._end_marker(status, cause, text, AttemptAction.REQUEUE, record=False)
            excluded = self.allocation.leave(lost)
            self._record(END, status, cause, text, AttemptAction.REQUEUE, requeue_asked=time.time())
            self.signals.ending = True
            if slurm_calls.requeue(self.slurm_job):
                self.lock.keep = True
                self.allocation.keep_away(lost, excluded)
                return 0
            self.signals.ending = False
            err("hyperlaunch: scontrol requeue failed; ending with the step's status")
        else:
            err(f"hyperlaunch: {self.budget.refusal()}")
        self._end_marker(status, cause, text, AttemptAction.EXIT)
        return status

    def _start_marker(self, more: str = "") -> None:
        self.marker("start", f"nodes={self.environ.get('SLURM_JOB_NODELIST', '')} host={self.host}{more}")

    def _end_marker(self, status: int, cause: RestartCause, fields: str, action: AttemptAction, *, record: bool = True) -> None:
        self.marker("end", f"exit={status} cause={cause.value} {fields} action={action.value}")
        try:
            write_attempt_end(self.run_dir, self.job_id or "0", self.restart, cause.value)
        except OSError:
            pass  # only the next attempt's trackers read it: they say "requeued" instead
        if record:
            self._record(END, status, cause, fields, action)

    def _seen(self, status: int, lost: Sequence[str]) -> RoundSeen:
        """What the round that just ended leaves for its decision record: its nodes, its times,
        and for a failed one the root error line and the first failed task's code in its output."""
        lines = self.step.output.lines() if status != 0 else []
        stopped = self.step.stopped or time.time()
        return RoundSeen(
            round=self.rounds.number,
            nodes=tuple(self.allocation.round_nodes),
            lost=tuple(lost),
            error_line=root_error_line(lines),
            task_exit=task_exit_code(lines) or "",
            failure_seen=(self.step.failure_seen or stopped) if status != 0 else None,
            stopped=stopped,
        )

    def _record(
        self, event: str, status: int, cause: RestartCause, fields: str, action: AttemptAction, *,
        next_round: int | None = None, next_round_started: float | None = None, requeue_asked: float | None = None,
    ) -> None:
        """Append the decision's record (hyperlaunch.core.decision_records): the marker's words and
        what the supervisor saw of the round that ended, where this attempt ran one."""
        words = parse_marker_fields(fields)
        seen = self.ended
        nodes_out = tuple(filter(None, words.pop("nodes", "").split(","))) or (seen.lost if seen else ())
        spare = tuple(filter(None, words.pop("spare", "").split(",")))
        words.pop("round", None)
        record = DecisionRecord(
            event=event, restart=self.restart, cause=cause.value, action=action.value, time=utc_now(), exit=status,
            round=seen.round if seen else None, next_round=next_round,
            task_exit=seen.task_exit if seen else "", error_line=seen.error_line if seen else "",
            nodes_in=seen.nodes if seen else (), nodes_out=nodes_out, spare=spare, fields=words,
            failure_seen=seen.failure_seen if seen else None, step_stopped=seen.stopped if seen else None,
            requeue_asked=requeue_asked, next_round_started=next_round_started,
        )
        try:
            append_decision(self.run_dir, self.job_id or "0", record)
        except OSError as error:
            err(f"hyperlaunch: cannot write the decision record in {self.run_dir}: {error.strerror or error}")


@dataclasses.dataclass(frozen=True)
class RoundSeen:
    """What the supervisor saw of a round as it ended."""

    round: int | None
    nodes: tuple[str, ...]
    lost: tuple[str, ...]
    error_line: str
    task_exit: str
    failure_seen: float | None
    stopped: float


def step_script() -> str:
    """The per-node step (step.sh, beside this module in the shipped bundle)."""
    data = pkgutil.get_data("hyperlaunch.supervisor", "step.sh")
    if data is None:
        raise SystemExit("hyperlaunch supervisor: step.sh is missing from the bundle")
    return data.decode("utf-8")


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    in_sweep = bool(argv) and argv[0] == sweep_element.ELEMENTS_FLAG
    argv, element_env = sweep_element.resolve(argv, environ)  # an array task of a sweep: its element's
    options = SupervisorOptions.from_argv(argv)
    attempt = Attempt(options, {**environ, **element_env}, step_script(), sweep_element=in_sweep)
    attempt.signals.install()
    try:
        return attempt.run()
    except Terminated as stop:
        attempt.signals.ending = True
        err(f"hyperlaunch: stopped by {signal.Signals(stop.status - 128).name}; ending the training step")
        attempt.step.stop()
        return stop.status
    finally:
        attempt.signals.ending = True
        if attempt.keepers is not None:
            attempt.keepers.stop()
        attempt.lock.release()
