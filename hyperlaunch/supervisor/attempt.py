"""One attempt of a job (one Slurm run of its batch script), supervised: the checkpoint lock,
the attempt markers, rounds of trainers inside the allocation (after a crash or hang on healthy
nodes, or on a spare in place of a lost node), the lost-node probe, the restart budget, the
requeue, and Slurm's save warning passed on. The decisions are hyperlaunch.supervisor.decisions';
this module carries them out."""

from __future__ import annotations

import contextlib
import os
import pkgutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hyperlaunch.core.protocol import (
    REQUEUE_EXIT_CODE,
    SAVE_SIGNAL,
    AttemptAction,
    RestartCause,
    previous_attempt_cause,
    requeue_request_path,
    write_attempt_end,
)
from hyperlaunch.core.script_env import NCCL_CHECK_ENV, NCCL_REQUIRED, RENDEZVOUS_PORT_ENV, ROUND_ENV, STEP_NODES_ENV
from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.core.trackers import RESTART_CAUSE_ENV
from hyperlaunch.core.trainer_failures import (
    TRAINER_FAILURE_FILE_ENV,
    FailureKind,
    TrainerFailure,
    read_trainer_failure,
    write_trainer_failure,
)
from hyperlaunch.supervisor import ports, script_job, slurm_calls, step_errors, sweep_element
from hyperlaunch.supervisor.allocation import Allocation
from hyperlaunch.supervisor.budget import RestartBudget
from hyperlaunch.supervisor.decisions import RoundEnd, after_round, job_port, rendezvous_port, slurm_job
from hyperlaunch.supervisor.lock import HELD, TAKEN, CheckpointLock
from hyperlaunch.supervisor.output import Markers, err, out
from hyperlaunch.supervisor.probe import NodeProber
from hyperlaunch.supervisor.rounds import Rounds

POLL_S = 0.25
"""How often the running step is looked at."""
PROBE_INTERVAL_S = 5
"""Seconds between probes of the round's nodes while a step with a failed task still runs and
every node answers. The first probe comes as soon as the failure shows: it only asks each node's
kernel for a TCP connection, and on healthy nodes the step ends by itself."""
STOP_WAIT_S = 10
"""How long a stopped supervisor (scancel's TERM) waits for its step before killing it."""
SAVE_SIGNUM = getattr(signal, "SIG" + SAVE_SIGNAL)


class Terminated(Exception):
    """A stop signal (scancel's TERM) reached the supervisor."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.status = 128 + signum


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128 + the signal that killed it."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except OSError:
        pass


class Attempt:
    def __init__(self, options: SupervisorOptions, environ: Mapping[str, str], step_script: str, *, sweep_element: bool = False) -> None:
        self.options = options
        self.environ = dict(environ)
        self.step_script = step_script
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
        self.claimed: tuple[int, str] | None = None
        """The port this round claimed on this host, and as whom (ports.claim)."""
        self.marker = Markers(self.restart, self.job_id)
        self.lock = CheckpointLock(options.checkpoint_lock, self.job_id, self.host, say=err)
        self.budget = RestartBudget(self.run_dir, job, self.restart, options.max_restarts)
        self.allocation = Allocation(options, self.environ, self.slurm_job)
        self.rounds = Rounds(self.run_dir, job, self.restart, previous_attempt_cause(self.run_dir, job, self.restart))
        self.save_requested = False
        self.ending = False
        self.step: subprocess.Popen[bytes] | None = None
        self.prober = NodeProber(environ.get("SLURMD_NODENAME") or self.host)
        self.round_output = step_errors.RoundOutput()
        """The round's part of this attempt's stderr file, where srun writes the tasks' stderr."""

    # Signals --------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.signal(SAVE_SIGNUM, self._on_save_signal)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_stop_signal)

    def _on_save_signal(self, signum: int, frame: object) -> None:
        # Slurm sends it to the batch step (--signal=B:...) before the time limit: every trainer
        # saves a checkpoint and exits, then the job is requeued.
        self.save_requested = True
        out(f"### hyperlaunch signal {SAVE_SIGNAL} received; forwarding to the training step")
        step = self.step
        if step is not None and step.returncode is None:
            try:
                os.kill(step.pid, SAVE_SIGNUM)
            except OSError:
                pass

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        if not self.ending:
            raise Terminated(signum)

    def stop_step(self) -> None:
        """Nothing is left running: the step gets TERM (its trainers save where they can), then
        KILL after STOP_WAIT_S."""
        step = self.step
        if step is None or step.poll() is not None:
            return
        _signal_group(step.pid, signal.SIGTERM)
        try:
            step.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            _signal_group(step.pid, signal.SIGKILL)
            step.wait()

    # The attempt ----------------------------------------------------------------------------

    def run(self) -> int:
        """The attempt, start to end: its exit status."""
        self._make_dirs()
        # Records of an earlier job with this id must not decide this attempt (a rebuilt cluster
        # numbers its jobs from the start again, into the same run dir).
        with contextlib.suppress(OSError):
            self.rounds.failure_record.unlink()
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
            before = self.budget.checkpoint_step()
            try:
                status, lost = self._run_round()
            finally:
                if self.claimed is not None:
                    ports.release(*self.claimed)
                    self.claimed = None
            if self.budget.checkpoint_step() > before:
                self.rounds.progressed()
            kind, final = "", False
            from_output: TrainerFailure | None = None
            if status != 0:
                record = read_trainer_failure(self.rounds.failure_record)
                if record is None:
                    record = from_output = self._unfixable_error(status, lost)
                if record is not None:
                    kind, final = record.kind, record.final
            end = RoundEnd(
                status=status,
                lost=tuple(lost),
                failure_kind=kind,
                failure_final=final,
                save_requested=self.save_requested,
                requeue_requested=os.path.lexists(self.requeue_request),
                in_row=self.rounds.in_row,
                restarts_in_allocation=self.options.restarts_in_allocation,
            )
            decision = after_round(end, self.allocation.down_nodes)
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
                replaced_by = self.allocation.replace(decision.nodes)
                if replaced_by is not None:
                    fields = f"nodes={','.join(decision.nodes)} spare={','.join(replaced_by)}"
                    self._next_round(RestartCause.NODE_FAILURE, status, fields, in_row=False)
                    continue
                return self._requeue_within_budget(decision.cause, status, decision.fields, decision.nodes)
            self._next_round(decision.cause, status, decision.fields, in_row=True)

    def _unfixable_error(self, status: int, lost: Sequence[str]) -> TrainerFailure | None:
        """A failure record for the round from its output (not written yet), where no rank wrote
        one and the output names an error no restart fixes (hyperlaunch.supervisor.step_errors):
        never for a round that lost nodes or stopped to save."""
        if lost or self.save_requested or status == REQUEUE_EXIT_CODE or os.path.lexists(self.requeue_request):
            return None
        line, task = step_errors.unfixable_error(self.round_output.lines())
        if not line:
            return None
        round_nodes = self.allocation.round_nodes
        if task is not None and task < len(round_nodes):
            line += f" (on {round_nodes[task]})"
        kind = FailureKind.SCRIPT_BROKEN if self.options.script_name else FailureKind.TRAINER_BROKEN
        return TrainerFailure(kind=kind.value, final=True, rank=None, message=line)

    def _next_round(self, cause: RestartCause, status: int, fields: str, *, in_row: bool) -> None:
        number = self.rounds.next(cause, in_row=in_row)
        more = f"{fields} " if fields else ""
        self.marker("restart", f"round={number} cause={cause.value} exit={status} {more}action={AttemptAction.RESTART_IN_ALLOCATION.value}")

    def _requeue_within_budget(self, cause: RestartCause, status: int, fields: str = "", lost: Sequence[str] = ()) -> int:
        """Requeue the job while the restart budget lasts, else end it with `status`. An attempt
        that completed a checkpoint resets the budget; lost nodes are given back first (else
        the requeue waits until Slurm marks them down), then excluded from the next start."""
        allowed = self.budget.spend()
        text = f"{fields} " if fields else ""
        text += f"failures={self.budget.failures}" + (f" round={self.rounds.number}" if self.rounds.number is not None else "")
        if allowed:
            self._end_marker(status, cause, text, AttemptAction.REQUEUE)
            excluded = self.allocation.leave(lost)
            self.ending = True
            if slurm_calls.requeue(self.slurm_job):
                self.lock.keep = True
                self.allocation.keep_away(lost, excluded)
                return 0
            self.ending = False
            err("hyperlaunch: scontrol requeue failed; ending with the step's status")
        else:
            err(f"hyperlaunch: {self.budget.refusal()}")
        self._end_marker(status, cause, text, AttemptAction.EXIT)
        return status

    # A round ------------------------------------------------------------------------------------

    def _run_round(self) -> tuple[int, list[str]]:
        """One round of trainers: the training step on the round's nodes, watched until it ends.
        When a task fails while the step still runs (a rank's record, or srun's line for a task
        that ended), the round's nodes are probed: a node that is gone keeps srun waiting until
        Slurm notices (SlurmdTimeout), so the step is ended at once. (exit status, lost nodes)."""
        flags: list[str] = []
        env = dict(self.environ)
        round_nodes = self.allocation.round_nodes
        if self.options.spare_nodes > 0:
            # The trainers run on the round's nodes only, one task each (the allocation's
            # SLURM_NTASKS counts the spares); the spares wait.
            count = str(len(round_nodes))
            flags += [f"--nodes={count}", f"--ntasks={count}", f"--nodelist={','.join(round_nodes)}"]
            env[STEP_NODES_ENV] = " ".join(round_nodes)
        if self.rounds.number:
            # A step that lost a node stays on Slurm's books, holding its live nodes' CPUs, until
            # Slurm marks that node down; its processes are gone (end_step): overlap it.
            flags.append("--overlap")
        env[ROUND_ENV] = str(self.rounds.number)
        env[RENDEZVOUS_PORT_ENV] = str(self._rendezvous_port())
        env[TRAINER_FAILURE_FILE_ENV] = str(self.rounds.failure_record)
        if self.options.nccl_check:
            env[NCCL_CHECK_ENV] = NCCL_REQUIRED if self.options.require_efa else "1"
        if self.rounds.restart_cause:
            env[RESTART_CAUSE_ENV] = self.rounds.restart_cause
        if self.options.script_name:
            resume, warning = script_job.resume_from(self.options.checkpoint_dir, self.options.script_name)
            if warning:
                err(warning)
            env.update(script_job.script_environment(self.options.run_dir, self.options.checkpoint_dir, self.options.script_name, env, resume))
        with contextlib.suppress(OSError):
            self.rounds.failure_record.unlink()
        self.round_output.mark()
        argv = ["srun", *self.allocation.srun_flags, *flags, "bash", "-c", self.step_script, "hyperlaunch-step", *self.options.launch_command]
        try:
            # Its own process group: a stopped supervisor stops whatever srun started here too.
            self.step = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as error:
            err(f"hyperlaunch: cannot start srun: {error.strerror or error}")
            return 127, []
        step = self.step
        next_probe = 0.0
        while step.poll() is None:
            if self.allocation.fast_node_check and time.monotonic() >= next_probe and self._a_task_failed():
                lost = self.prober.gone(self.allocation.round_nodes)
                next_probe = time.monotonic() + PROBE_INTERVAL_S
                if lost:
                    err(
                        f"hyperlaunch: node(s) {','.join(lost)} stopped answering (slurmd refuses or ignores connections);"
                        " ending the step without waiting for Slurm to notice"
                    )
                    return self._end_step(lost), lost
            time.sleep(POLL_S)
        return exit_status(step.wait()), []

    def _a_task_failed(self) -> bool:
        """Whether the running round has a failed task: a rank's failure record (the bundled
        trainer's, the runtime library's), or srun's line for a task that ended on an error (any
        script's rank that lost its peer)."""
        return self.rounds.failure_record.exists() or self.round_output.task_failed()

    def _rendezvous_port(self) -> int:
        """The round's port: checked free where the round's head node, which hosts the store, is
        this host (the batch host; also the head in a container, where the step finds no node
        list), and claimed there until the round ends (ports.claim); another node's ports are
        not seen from here, so that one keeps its job's port."""
        round_ = self.rounds.number or 0
        own = job_port(self.job_id, round_)
        head = self.allocation.round_nodes[0] if self.allocation.round_nodes else None
        if head is not None and head != (self.environ.get("SLURMD_NODENAME") or self.host):
            return own
        owner = f"{self.job_id}.{round_}"
        port = rendezvous_port(self.job_id, round_, lambda port: ports.in_use(port) or not ports.claim(port, owner))
        self.claimed = (port, owner)
        if port != own:
            err(f"hyperlaunch: rendezvous port {own} is in use on {head or self.host}; the trainers rendezvous on {port}")
        return port

    def _end_step(self, lost: Sequence[str]) -> int:
        """End the round's step whose node is gone: the step's processes on the live nodes (so
        the next round gets their CPUs and GPUs at once), then srun itself (it would wait for the
        dead node). scancel is not waited for. When the job goes back to the queue (not enough
        spares), srun goes half a second later: each live node's slurmstepd reports its tasks'
        end to srun, and retries for about 2 s while srun is gone; until then the job stays
        COMPLETING, and a requeued job's hold only starts after that."""
        for step_id in slurm_calls.job_steps(self.slurm_job):
            slurm_calls.kill_step_in_background(step_id)
        if len(self.allocation.spares) < len(lost):
            time.sleep(0.5)
        assert self.step is not None
        self.step.kill()
        self.step.wait()
        return 1

    def _start_marker(self, more: str = "") -> None:
        self.marker("start", f"nodes={self.environ.get('SLURM_JOB_NODELIST', '')} host={self.host}{more}")

    def _end_marker(self, status: int, cause: RestartCause, fields: str, action: AttemptAction) -> None:
        self.marker("end", f"exit={status} cause={cause.value} {fields} action={action.value}")
        try:
            write_attempt_end(self.run_dir, self.job_id or "0", self.restart, cause.value)
        except OSError:
            pass  # only the next attempt's trackers read it: they say "requeued" instead


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
    attempt.install_signal_handlers()
    try:
        return attempt.run()
    except Terminated as stop:
        attempt.ending = True
        err(f"hyperlaunch: stopped by {signal.Signals(stop.status - 128).name}; ending the training step")
        attempt.stop_step()
        return stop.status
    finally:
        attempt.ending = True
        attempt.lock.release()
