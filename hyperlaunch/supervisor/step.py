"""A round's training step: srun of the step script on the round's nodes, with what its trainers
are told (round, rendezvous port, failure record, NCCL check, restart cause, a script job's
variables), watched until it ends. A step whose task failed while it still runs gets its nodes
probed: one that is gone keeps srun waiting until Slurm notices, so the step is ended at once.
The idle spares are probed all along (hyperlaunch.supervisor.spare_watch): a dead one is given back."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from hyperlaunch.core.script_env import (
    NCCL_CHECK_ENV,
    NCCL_REQUIRED,
    RENDEZVOUS_PORT_ENV,
    ROUND_ENV,
    SLURM_JOB_ENV,
    STEP_NODES_ENV,
)
from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.core.trackers import RESTART_CAUSE_ENV
from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV, FailureKind, TrainerFailure
from hyperlaunch.supervisor import ports, script_job, slurm_calls, step_errors, work_dir
from hyperlaunch.supervisor.allocation import Allocation
from hyperlaunch.supervisor.decisions import job_port, rendezvous_port
from hyperlaunch.supervisor.framework_checkpoints import FrameworkCheckpoints
from hyperlaunch.supervisor.output import err
from hyperlaunch.supervisor.probe import NodeProber
from hyperlaunch.supervisor.rounds import Rounds
from hyperlaunch.supervisor.spare_watch import SpareWatch

POLL_S = 0.25
"""How often the running step is looked at."""
PROBE_INTERVAL_S = 5
"""Seconds between probes of the round's nodes while a step with a failed task still runs and
every node answers. The first probe comes as soon as the failure shows: it only asks each node's
kernel for a TCP connection, and on healthy nodes the step ends by itself."""
STOP_WAIT_S = 10
"""How long a stopped supervisor (scancel's TERM) waits for its step before killing it."""


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128 + the signal that killed it."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except OSError:
        pass


class TrainingStep:
    """The attempt's training step, one srun at a time (a round's), and what the round wrote."""

    def __init__(self, options: SupervisorOptions, environ: Mapping[str, str], step_script: str, job_id: str, slurm_job: str, host: str, restart: int) -> None:
        self.options = options
        self.environ = environ
        """The job's environment, which each round's step gets with the round's variables."""
        self.step_script = step_script
        self.job_id = job_id
        """SLURM_JOB_ID: each round's rendezvous port derives from it."""
        self.slurm_job = slurm_job
        """The job as Slurm commands name it (hyperlaunch.supervisor.decisions.slurm_job)."""
        self.host = host
        self.here = environ.get("SLURMD_NODENAME") or host
        """This node as Slurm names it: the batch host, which runs the supervisor."""
        self.process: subprocess.Popen[bytes] | None = None
        """srun of the round running or last run."""
        self.claimed: tuple[int, str] | None = None
        """The port this round claimed on this host, and as whom (ports.claim)."""
        self.prober = NodeProber(self.here)
        self.spare_watch: SpareWatch | None = None
        """The idle spares, probed while a round trains (made with the first round that has any)."""
        self.output = step_errors.RoundOutput()
        """The round's part of this attempt's stderr file, where srun writes the tasks' stderr."""
        self.failure_seen: float | None = None
        """Unix time a task of the round was first seen failed while the step still ran."""
        self.stopped: float | None = None
        """Unix time the round's step had ended."""
        self.frameworks = FrameworkCheckpoints(options, job_id or "0", restart)
        """A script job's checkpoints in its framework's layout, where it names one."""

    def run(self, rounds: Rounds, allocation: Allocation, more_env: Mapping[str, str] | None = None) -> tuple[int, list[str]]:
        """One round of trainers on the round's nodes (`more_env`: what else they are told),
        watched until it ends; the rendezvous port it claimed is released after. (exit status,
        lost nodes)."""
        try:
            return self._run(rounds, allocation, more_env or {})
        finally:
            self.frameworks.poll(rounds.number or 0, now=True)  # one saved on the way out
            if self.claimed is not None:
                ports.release(*self.claimed)
                self.claimed = None

    def _run(self, rounds: Rounds, allocation: Allocation, more_env: Mapping[str, str]) -> tuple[int, list[str]]:
        flags: list[str] = []
        env = {**self.environ, **more_env}
        if self.options.spare_nodes > 0:
            # The trainers run on the round's nodes only, one task each (the allocation's
            # SLURM_NTASKS counts the spares); the spares wait.
            count = str(len(allocation.round_nodes))
            flags += [f"--nodes={count}", f"--ntasks={count}", f"--nodelist={','.join(allocation.round_nodes)}"]
            env[STEP_NODES_ENV] = " ".join(allocation.round_nodes)
        if rounds.number:
            # A step that lost a node stays on Slurm's books, holding its live nodes' CPUs, until
            # Slurm marks that node down; its processes are gone (_end_step): overlap it.
            flags.append("--overlap")
        env[ROUND_ENV] = str(rounds.number)
        env[SLURM_JOB_ENV] = self.slurm_job
        env[RENDEZVOUS_PORT_ENV] = str(self._rendezvous_port(rounds.number or 0, allocation.round_nodes))
        env[TRAINER_FAILURE_FILE_ENV] = str(rounds.failure_record)
        if self.options.nccl_check:
            env[NCCL_CHECK_ENV] = NCCL_REQUIRED if self.options.require_efa else "1"
        if rounds.restart_cause:
            env[RESTART_CAUSE_ENV] = rounds.restart_cause
        launch = list(self.options.launch_command)
        if self.options.script_name:
            self._mirror_code()
            resume, warning = script_job.resume_from(self.options.checkpoint_dir, self.options.script_name)
            if warning:
                err(warning)
            if not resume and not warning:
                found = self.frameworks.resume(rounds.number or 0)
                resume = found.path if found is not None else ""
            env.update(script_job.script_environment(self.options.run_dir, self.options.checkpoint_dir, self.options.script_name, env, resume))
            launch = script_job.launch_command(self.options, resume, len(allocation.round_nodes) or allocation.nodes_needed)
        with contextlib.suppress(OSError):
            rounds.failure_record.unlink()
        self.output.mark()
        self.failure_seen = self.stopped = None
        argv = ["srun", *allocation.srun_flags, *flags, "bash", "-c", self.step_script, "hyperlaunch-step", *launch]
        try:
            # Its own process group: a stopped supervisor stops whatever srun started here too.
            self.process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as error:
            err(f"hyperlaunch: cannot start srun: {error.strerror or error}")
            self.stopped = time.time()
            return 127, []
        try:
            return self._watch(self.process, rounds, allocation)
        finally:
            self.stopped = time.time()

    def _watch(self, process: subprocess.Popen[bytes], rounds: Rounds, allocation: Allocation) -> tuple[int, list[str]]:
        """The step until it ends. When a task fails while it still runs (a rank's record, or
        srun's line for a task that ended), the round's nodes are probed: a node that is gone
        keeps srun waiting until Slurm notices (SlurmdTimeout), so the step is ended at once."""
        next_probe = 0.0
        if allocation.fast_node_check and allocation.spares and self.spare_watch is None:
            self.spare_watch = SpareWatch(lambda: allocation.spares, self.prober.gone, allocation.drop_spares)
        while process.poll() is None:
            if self.spare_watch is not None:
                self.spare_watch.poll()
            self.frameworks.poll(rounds.number or 0)
            if self.failure_seen is None and self._a_task_failed(rounds):
                self.failure_seen = time.time()
            if allocation.fast_node_check and time.monotonic() >= next_probe and self.failure_seen is not None:
                lost = self.prober.gone(allocation.round_nodes)
                next_probe = time.monotonic() + PROBE_INTERVAL_S
                if lost:
                    err(
                        f"hyperlaunch: node(s) {','.join(lost)} stopped answering (slurmd refuses or ignores connections);"
                        " ending the step without waiting for Slurm to notice"
                    )
                    return self._end_step(process, lost, allocation), lost
            time.sleep(POLL_S)
        return exit_status(process.wait()), []

    def _mirror_code(self) -> None:
        """The code snapshot mirrored into the script's working folder, where it has one."""
        if not (self.options.work_dir and self.options.code_dir):
            return
        try:
            work_dir.mirror(self.options.code_dir, self.options.work_dir)
        except OSError as error:
            err(f"hyperlaunch: cannot mirror the code into {self.options.work_dir}: {error.strerror or error}")

    def _a_task_failed(self, rounds: Rounds) -> bool:
        """Whether the running round has a failed task: a rank's failure record (the bundled
        trainer's, the runtime library's), or srun's line for a task that ended on an error (any
        script's rank that lost its peer)."""
        return rounds.failure_record.exists() or self.output.task_failed()

    def _rendezvous_port(self, round_: int, round_nodes: Sequence[str]) -> int:
        """The round's port: checked free where the round's head node, which hosts the store, is
        this host (the batch host; also the head in a container, where the step finds no node
        list), and claimed there until the round ends (ports.claim); another node's ports are
        not seen from here, so that one keeps its job's port."""
        own = job_port(self.job_id, round_)
        head = round_nodes[0] if round_nodes else None
        if head is not None and head != self.here:
            return own
        owner = f"{self.job_id}.{round_}"
        port = rendezvous_port(self.job_id, round_, lambda port: ports.in_use(port) or not ports.claim(port, owner))
        self.claimed = (port, owner)
        if port != own:
            err(f"hyperlaunch: rendezvous port {own} is in use on {head or self.host}; the trainers rendezvous on {port}")
        return port

    def _end_step(self, process: subprocess.Popen[bytes], lost: Sequence[str], allocation: Allocation) -> int:
        """End the round's step whose node is gone: the step's processes on the live nodes (so
        the next round gets their CPUs and GPUs at once), then srun itself (it would wait for the
        dead node). scancel is not waited for. When the job goes back to the queue (not enough
        spares), srun goes half a second later: each live node's slurmstepd reports its tasks'
        end to srun, and retries for about 2 s while srun is gone; until then the job stays
        COMPLETING, and a requeued job's hold only starts after that."""
        for step_id in slurm_calls.job_steps(self.slurm_job):
            slurm_calls.kill_step_in_background(step_id)
        if len(allocation.spares) < len(lost):
            time.sleep(0.5)
        process.kill()
        process.wait()
        return 1

    def unfixable_error(self, round_nodes: Sequence[str]) -> TrainerFailure | None:
        """A failure record for the round from its output (not written yet), where the output
        names an error no restart fixes (hyperlaunch.supervisor.step_errors), and on which node."""
        line, task = step_errors.unfixable_error(self.output.lines())
        if not line:
            return None
        if task is not None and task < len(round_nodes):
            line += f" (on {round_nodes[task]})"
        kind = FailureKind.SCRIPT_BROKEN if self.options.script_name else FailureKind.TRAINER_BROKEN
        return TrainerFailure(kind=kind.value, final=True, rank=None, message=line)

    def send(self, signum: int) -> None:
        """`signum` to srun, while it runs (the save signal, passed on to the step)."""
        process = self.process
        if process is not None and process.returncode is None:
            try:
                os.kill(process.pid, signum)
            except OSError:
                pass

    def stop(self) -> None:
        """Nothing is left running: the step gets TERM (its trainers save where they can), then
        KILL after STOP_WAIT_S."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
