"""The only module that runs Slurm commands (sbatch, squeue, sacct, sacctmgr, scancel,
scontrol, sinfo). Everything else calls these functions, so unit tests can swap in a fake
runner and integration tests exercise the real binaries."""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.core.private_files import private_dir, write_private
from hyperlaunch.core.slurm_states import command_environment
from hyperlaunch.slurm import hostlist

DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Result:
    """What a Slurm command printed and returned."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def one_line_error(self) -> str:
        text = (self.stderr or self.stdout).strip()
        return " ".join(text.split()) or f"exit code {self.returncode}"


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    check: bool = True,
    stdin: str | None = None,
) -> Result:
    """Run one Slurm command. With check=True a non-zero exit raises SlurmError carrying
    Slurm's own message, so the user sees why Slurm refused."""
    if shutil.which(args[0], path=(env or os.environ).get("PATH")) is None:
        raise SlurmError(f"{args[0]} not found on PATH", hint="is this a Slurm login node? try 'hyperlaunch doctor'")
    conf = (env if env is not None else os.environ).get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        # Slurm's commands would retry for a minute before saying so.
        raise SlurmError(f"SLURM_CONF={conf} is no file", hint="name your cluster's slurm.conf, or unset SLURM_CONF for the default one")
    try:
        proc = subprocess.run(
            list(args),
            env=command_environment(args[0], env if env is not None else os.environ),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise SlurmError(f"{' '.join(args[:2])} did not answer within {timeout:.0f} s") from err
    except OSError as err:  # found on PATH but not runnable: a broken wrapper, no permission
        raise SlurmError(f"{args[0]} could not be run: {err.strerror or err}") from None
    result = Result(tuple(args), proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise SlurmError(f"{args[0]} failed: {result.one_line_error()}")
    return result


@dataclass(frozen=True)
class NodeInfo:
    """One node as sinfo reports it."""

    name: str
    state: str
    reason: str


def node_states(*, env: Mapping[str, str] | None = None) -> list[NodeInfo]:
    """Every node with its state (idle, alloc, down*, drain, ...) and reason."""
    out = run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], env=env, timeout=15).stdout
    nodes: dict[str, NodeInfo] = {}
    for line in out.splitlines():
        name, state, reason = (line.split("|", 2) + ["", ""])[:3]
        if name:
            nodes[name] = NodeInfo(name=name, state=state.strip(), reason=reason.strip())
    return [nodes[name] for name in sorted(nodes, key=_natural_key)]


def config_values(*, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The running configuration (`scontrol show config`) as KEY -> value text.
    SlurmError when no controller answers."""
    out = run(["scontrol", "show", "config"], env=env, timeout=15).stdout
    values: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            values.setdefault(key.strip(), value.strip())
    return values


def gres_types(*, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The generic resources slurm.conf declares (GresTypes of `scontrol show config`), e.g.
    ('gpu',); () when it declares none. SlurmError when no controller answers."""
    kinds = config_values(env=env).get("GresTypes", "")
    return () if kinds in ("", "(null)") else tuple(k.strip() for k in kinds.split(",") if k.strip())


def run_on_nodes(
    command: Sequence[str],
    *,
    nodes: Sequence[str],
    partition: str,
    env: Mapping[str, str] | None = None,
    start_within_s: int = 20,
    timeout_s: float = 90.0,
) -> Result:
    """Run `command` once on each of `nodes` (one task per node) in a job of its own that never
    lingers: srun gives up when the nodes are not free within `start_within_s` (--immediate), the
    job's time limit is a minute, and when srun has not finished after `timeout_s` the job is
    cancelled (by its unique name) before SlurmError says so. A non-zero exit is returned."""
    name = f"hyperlaunch-probe-{uuid.uuid4().hex[:12]}"
    args = [
        "srun",
        f"--job-name={name}",
        f"--partition={partition}",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(nodes)}",
        "--ntasks-per-node=1",
        # The whole node, as a job gets it: no other job's step on it meanwhile.
        "--exclusive",
        "--time=1",
        f"--immediate={start_within_s}",
        "--quiet",
        *command,
    ]
    try:
        return run(args, env=env, timeout=timeout_s, check=False)
    except SlurmError:
        try:
            run(["scancel", f"--name={name}", f"--user={getpass.getuser()}"], env=env, timeout=15, check=False)
        except SlurmError:
            pass  # the error below is the one to report
        raise


@dataclass(frozen=True)
class PartitionNode:
    """One node of one partition, as sinfo lists it (a node in two partitions appears twice)."""

    name: str
    state: str = ""
    """sinfo's long state: idle, mixed, allocated, drained, down*, idle~ (powered down), ..."""
    partition: str = ""
    default: bool = False
    """The partition is the cluster's default (sinfo marks it with `*`)."""
    gres: str = "(null)"
    """As sinfo writes it (`gpu:8`), or `(null)`."""
    features: tuple[str, ...] = ()
    """The node's features (sinfo %f): where a cluster names the instance type there (AWS
    ParallelCluster: `dynamic,p5.48xlarge,...`), the job's presets can be chosen by it."""


def all_partition_nodes(*, env: Mapping[str, str] | None = None) -> list[PartitionNode]:
    """Every node of every partition with its state, GRES and features, in one sinfo call."""
    out = run(["sinfo", "-h", "-N", "-o", "%N|%T|%P|%G|%f"], env=env, timeout=15).stdout
    rows = []
    for line in out.splitlines():
        fields = line.split("|", 4)
        if len(fields) < 3 or not fields[0].strip() or not fields[2].strip():
            continue
        names, state, partition = (field.strip() for field in fields[:3])
        gres = fields[3].strip() if len(fields) > 3 else "(null)"
        features = tuple(f for f in fields[4].strip().split(",") if f and f != "(null)") if len(fields) > 4 else ()
        for name in hostlist.expand(names):  # -N writes one name a line; a list expands too
            rows.append(PartitionNode(name, state, partition.rstrip("*"), partition.endswith("*"), gres, features))
    return sorted(rows, key=lambda row: (row.partition, _natural_key(row.name)))


def partition_nodes(partition: str | None, *, env: Mapping[str, str] | None = None) -> list[PartitionNode]:
    """The nodes of `partition` (None: the cluster's default one, sinfo's `*`), each once.
    Every partition is listed and filtered here, since `sinfo -p` cannot name the default."""
    nodes: dict[str, PartitionNode] = {}
    for row in all_partition_nodes(env=env):
        if (row.partition == partition) if partition else row.default:
            nodes.setdefault(row.name, row)
    return [nodes[name] for name in sorted(nodes, key=_natural_key)]


def controller_responds(*, env: Mapping[str, str] | None = None) -> bool:
    """True when slurmctld answers `scontrol ping`."""
    result = run(["scontrol", "ping"], env=env, timeout=10, check=False)
    return result.returncode == 0 and "UP" in result.stdout


def ensure_accounting_cluster(name: str, *, env: Mapping[str, str] | None = None) -> None:
    """Register the cluster with slurmdbd (sacct needs it); a no-op when it exists."""
    result = run(["sacctmgr", "-i", "add", "cluster", name], env=env, timeout=30, check=False)
    text = (result.stdout + result.stderr).lower()
    if result.returncode != 0 and "already exists" not in text and "nothing new added" not in text:
        raise SlurmError(f"sacctmgr could not register cluster {name}: {result.one_line_error()}")


def _natural_key(name: str) -> tuple[str, int]:
    stem = name.rstrip("0123456789")
    digits = name[len(stem):]
    return (stem, int(digits) if digits else -1)


def submit_script(script: str, folder: Path, *, env: Mapping[str, str], forward: Sequence[str] = ()) -> str:
    """sbatch a script we rendered, through submitit's Slurm executor (its submission files
    and job folders under `folder`, private to the user: the script holds `--env` values), with
    `env` as sbatch's environment: SLURM_CONF, and what the job inherits. `forward` names
    variables of `env` the job must receive (`--env NAME`, see export_flag). Returns the job id.
    A refusal raises SlurmError with sbatch's reason in one line, and a failed submission of
    any kind leaves no submission file behind."""
    return _rendered_script_executor()(folder, script, env, forward).submit_rendered()


def export_flag(forward: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """sbatch's --export naming `forward` on top of what the job gets anyway: sbatch exports
    its whole environment (ALL) unless SBATCH_EXPORT says otherwise, and a command-line
    --export would replace SBATCH_EXPORT, so its list is kept. Names only: sbatch reads each
    value from `env`, so no value is written on a command line or in a file."""
    if not forward:
        return []
    base = env.get("SBATCH_EXPORT", "").strip() or "ALL"
    kept = [] if base.upper() in ("NONE", "NIL") else [item for item in base.split(",") if item]
    names = [name for name in forward if name not in kept]
    return ["--export=" + ",".join(kept + names)]


def _rendered_script_executor() -> type:
    import submitit  # on the submit path only: rendering and reading need none of it
    from submitit.core.utils import JobPaths

    class RenderedScriptExecutor(submitit.SlurmExecutor):
        """submitit's SlurmExecutor with our script as the submission file. Its public submit()
        pickles a Python callable, and _submit_command runs sbatch in os.environ with its
        stderr echoed; submit_rendered does the same steps with sbatch run here, in `env`."""

        def __init__(self, folder: Path, script: str, env: Mapping[str, str], forward: Sequence[str]) -> None:
            super().__init__(folder=folder)
            self._script = script
            self._env = dict(env)
            self._forward = tuple(forward)

        @classmethod
        def affinity(cls) -> int:
            # submitit looks for srun on this process's PATH; run() checks for sbatch on the
            # PATH of the environment sbatch will actually get.
            return 1

        def _make_submission_file_text(self, command: str, uid: str) -> str:
            return self._script

        def _make_submission_command(self, submission_file_path: Path) -> list[str]:
            command: list[str] = super()._make_submission_command(submission_file_path)
            return command[:1] + export_flag(self._forward, self._env) + command[1:]

        @staticmethod
        def _set_job_permissions(folder: Path) -> None:
            private_dir(folder)  # submitit's hook for a job's folder, a no-op in submitit itself

        def submit_rendered(self) -> str:
            uid = uuid.uuid4().hex
            folder = private_dir(JobPaths.get_first_id_independent_folder(self.folder))
            path = folder / f".submission_file_{uid}.sh"
            try:
                write_private(path, self._make_submission_file_text("", uid))
                result = run(self._make_submission_command(path), env=self._env, timeout=60, check=False)
                if result.returncode != 0:
                    raise _refusal(result.stderr)
                job = self.job_class(folder=self.folder, job_id=_job_id_of(self, result.stdout), tasks=[0])
                self._set_job_permissions(job.paths.folder)
                job.paths.move_temporary_file(path, "submission_file")
            finally:
                # Whatever went wrong (a refusal, sbatch not executable, an interrupt), the
                # temporary copy of the script must not outlive this call.
                path.unlink(missing_ok=True)
            return str(job.job_id)

    return RenderedScriptExecutor


def _job_id_of(executor: object, sbatch_stdout: str) -> str:
    """The job id in sbatch's answer; a SlurmError when there is none (sbatch exited 0, so the
    job may exist: say where to look rather than let the user submit it twice)."""
    try:
        return str(executor._get_job_id_from_submission_command(sbatch_stdout))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - submitit raises its own FailedSubmissionError
        answer = " ".join(sbatch_stdout.split())[:200] or "nothing"
        raise SlurmError(
            f"sbatch exited 0 but answered with no job id ({answer!r})", hint="check squeue: the job may have been queued"
        ) from None


def _refusal(sbatch_stderr: str) -> SlurmError:
    """sbatch's own reason, in one line: its fatal line if any, else its last error lines."""
    lines = [line.strip() for line in sbatch_stderr.splitlines() if line.strip()]
    fatal = [line for line in lines if "fatal" in line]
    reason = fatal[-1] if fatal else " ".join(lines[-2:]) or "sbatch failed"
    if "configuration source" in reason:
        return SlurmError(
            f"no Slurm cluster configured: {reason}",
            hint="set SLURM_CONF, or start a local one with 'hyperlaunch dev-cluster up'",
        )
    return SlurmError(f"sbatch refused the job: {reason}")


@dataclass(frozen=True)
class Attempt:
    """One run of a job as sacct records it (a requeued job has several)."""

    job_id: str
    state: str
    node_list: str
    start: str
    end: str
    exit_code: str
    elapsed_s: int = 0
    time_limit_s: int | None = None
    restart: int | None = None
    """The restart count it ran under (SLURM_RESTART_COUNT), where the job's log tells it;
    sacct has no column for it."""


def job_attempts_command(job_ids: Sequence[str]) -> list[str]:
    """The one sacct call job_attempts makes (-D keeps requeued attempts)."""
    fields = "JobIDRaw,State,NodeList,Start,End,ExitCode,ElapsedRaw,TimelimitRaw"
    return ["sacct", "-n", "-P", "-D", "-X", "-o", fields, "-j", ",".join(job_ids)]


def job_attempts(job_ids: Sequence[str], *, env: Mapping[str, str] | None = None) -> dict[str, list[Attempt]]:
    """Every attempt of each job, oldest first, in one sacct call."""
    if not job_ids:
        return {}
    out = run(job_attempts_command(job_ids), env=env, timeout=60).stdout
    attempts: dict[str, list[Attempt]] = {job: [] for job in job_ids}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 8:
            continue
        job_id, state_text, nodes, start, end, exit_code, elapsed, limit = parts
        attempt = Attempt(
            job_id=job_id,
            state=state_text.split()[0] if state_text else "",
            node_list=nodes,
            start=start,
            end=end,
            exit_code=exit_code,
            elapsed_s=int(elapsed) if elapsed.isdigit() else 0,
            time_limit_s=int(limit) * 60 if limit.isdigit() else None,
        )
        runs = attempts.setdefault(job_id, [])
        if runs and runs[-1].state == "RESIZING":
            # A node given back (a lost node left for a spare, or before a requeue) closes a
            # record of the job's earlier size and opens one at the new size: the same run
            # continues, from the first record's start.
            earlier = runs.pop()
            attempt = replace(attempt, start=earlier.start, elapsed_s=earlier.elapsed_s + attempt.elapsed_s)
        runs.append(attempt)
    for runs in attempts.values():
        if runs and runs[-1].state == "RESIZING":
            runs[-1] = replace(runs[-1], state="RUNNING")  # the record of its new size is not written yet
    return attempts


def job_states(job_ids: Sequence[str], *, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """How each job ended or where it is now, by sacct (last attempts), for the jobs others wait
    for: a plain job's or an array task's (`12_3`) own state; a job array's as sbatch's afterok
    sees it: while a task is in the queue, PENDING or RUNNING; COMPLETED once every task did;
    else the state of one that did not (FAILED, CANCELLED, ...). An array task may be named by
    its own (raw) id too: `--after 73` for task 70_3, as Slurm accepts it. A job sacct does not
    know is left out."""
    return accounting_states(job_ids, env=env) or {}


def accounting_states(job_ids: Sequence[str], *, env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """job_states, or None when sacct cannot answer (a cluster without accounting)."""
    if not job_ids:
        return {}
    result = run(
        ["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,JobIDRaw,State"], env=env, timeout=60, check=False,
    )
    if result.returncode != 0:
        return None
    rows = [line.split("|") for line in result.stdout.splitlines() if line.count("|") == 2]
    states: dict[str, str] = {}
    for job in job_ids:
        own = [state.split()[0] for job_id, _, state in rows if job_id == job and state]
        tasks = [state.split()[0] for job_id, _, state in rows if job_id.startswith(f"{job}_") and state]
        # A task's raw id (sacct -j 73 lists 70_3); an array's own id is also one of its tasks'
        # raw ids, so the array's tasks come first.
        raw = [state.split()[0] for _, raw_id, state in rows if raw_id == job and state]
        if own:
            states[job] = own[-1]
        elif tasks:
            states[job] = array_state(tasks)
        elif raw:
            states[job] = raw[-1]
    return states


def array_state(task_states: Sequence[str]) -> str:
    """A job array's state from its tasks' (see job_states)."""
    for state in ("RUNNING", "REQUEUED", "PENDING", "COMPLETING", "CONFIGURING", "SUSPENDED"):
        if state in task_states:
            return "RUNNING" if state in ("COMPLETING", "CONFIGURING") else state
    unfinished = [state for state in task_states if state != "COMPLETED"]
    return unfinished[0] if unfinished else "COMPLETED"


def queue_state(job_id: str, *, env: Mapping[str, str] | None = None) -> str:
    """The job's state while it is in the queue (PENDING, RUNNING, ...), '' once it left."""
    return run(["squeue", "-h", "-j", job_id, "-o", "%T"], env=env, timeout=15, check=False).stdout.strip()


def cancel_running_jobs(*, env: Mapping[str, str] | None = None) -> None:
    """Cancel every running job of the cluster (used before its daemons are stopped, so no
    job outlives its processes in slurmctld's saved state)."""
    run(["scancel", "--state=RUNNING", "--full"], env=env, timeout=30, check=False)
    run(["scancel", "--state=CONFIGURING", "--full"], env=env, timeout=30, check=False)


def running_job_count(*, env: Mapping[str, str] | None = None) -> int:
    out = run(["squeue", "-h", "-t", "RUNNING,CONFIGURING,COMPLETING", "-o", "%i"], env=env, timeout=15, check=False)
    return len(out.stdout.split())


@dataclass(frozen=True)
class NodeEvent:
    """A node state change recorded by slurmdbd (e.g. DOWN, "Not responding")."""

    node: str
    start: str
    end: str
    state: str
    reason: str


def node_events(since: str, *, env: Mapping[str, str] | None = None) -> list[NodeEvent]:
    """Node events since `since` (Slurm time, e.g. 2026-01-01T00:00:00). sacct does not say
    which node of a NODE_FAIL job died; these events, matched to the attempt's window, do."""
    result = run(
        ["sacctmgr", "-n", "-P", "show", "event", f"start={since}", "format=NodeName,TimeStart,TimeEnd,State,Reason"],
        env=env,
        timeout=30,
        check=False,
    )
    events = []
    for line in result.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 5 and parts[0]:
            events.append(NodeEvent(*parts))
    return events


def cancel(job_id: str, *, env: Mapping[str, str] | None = None) -> None:
    run(["scancel", job_id], env=env, timeout=30)


@dataclass(frozen=True)
class Queued:
    """One of this user's jobs as squeue lists it now."""

    state: str
    reason: str = ""
    """Why it waits, in Slurm's word (Resources, Priority, PartitionNodeLimit, ...); "" for none."""


def my_queue(*, env: Mapping[str, str] | None = None) -> dict[str, Queued]:
    """Each of this user's jobs still in the queue (PENDING, RUNNING, ...) and why it waits, one
    call. sacct's last attempt can read NODE_FAIL or REQUEUED for a job that is already back in
    the queue; squeue says what it is now. A job array's task is there under both its names: the
    array's (`12_3`, `12_[4-7%2]` for tasks not started yet) and its own job id."""
    out = run(["squeue", "-h", "--me", "--states=all", "-o", "%i|%A|%T|%r"], env=env, timeout=30, check=False).stdout
    queued: dict[str, Queued] = {}
    for line in out.splitlines():
        parts = [part.strip() for part in line.split("|", 3)]
        if len(parts) == 2:  # `name|state` (the tests' stand-ins): a job under its own id
            parts = [parts[0], *parts]
        if len(parts) < 3 or not parts[0]:
            continue
        name, job_id, state = parts[:3]
        reason = parts[3] if len(parts) == 4 and parts[3] not in ("None", "(null)") else ""
        queued[name] = Queued(state, reason)
        queued.setdefault(job_id, queued[name])
    return queued


def my_queue_states(*, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """State of each of this user's jobs still in the queue (see my_queue)."""
    return {name: entry.state for name, entry in my_queue(env=env).items()}


@dataclass(frozen=True)
class ArrayTask:
    """One task of a job array as Slurm knows it now."""

    index: int
    job_id: str | None
    """The task's own job id, once it has one (a task gets it when it starts); None before."""
    state: str


_ARRAY_ID = re.compile(r"(?P<array>[0-9]+)_(?:(?P<index>[0-9]+)|\[(?P<range>[0-9,%\-]+)\])")


def array_tasks(job_id: str, *, env: Mapping[str, str] | None = None) -> dict[int, ArrayTask]:
    """Every task of job array `job_id` Slurm still knows, by index: sacct for the ones that
    started (and the range not started yet), squeue over it for what is in the queue now."""
    tasks: dict[int, ArrayTask] = {}
    accounted = run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,JobIDRaw,State"], env=env, timeout=60, check=False)
    queued = run(["squeue", "-h", "-r", "-j", job_id, "--states=all", "-o", "%i|%A|%T"], env=env, timeout=30, check=False)
    for source in (accounted.stdout, queued.stdout):
        for line in source.splitlines():
            parts = [part.strip() for part in line.split("|")]
            match = _ARRAY_ID.fullmatch(parts[0]) if len(parts) == 3 else None
            if match is None or match["array"] != job_id:
                continue
            state = parts[2].split()[0] if parts[2] else ""
            if match["index"] is not None:
                index = int(match["index"])
                earlier = tasks.get(index)
                # A task not started yet has the array's id in squeue; once started, its own.
                own = parts[1] if parts[1] != job_id or state not in ("PENDING", "") else None
                tasks[index] = ArrayTask(index, own or (earlier.job_id if earlier else None), state)
            else:
                for index in expand_indices(match["range"]):
                    tasks.setdefault(index, ArrayTask(index, None, state))
    return tasks


def array_task_of(job_id: str, *, env: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """The job array and index whose task runs or ran as job `job_id`, its own (raw) id: sacct
    lists JobID 6_1 with JobIDRaw 8 for task 1 of array 6 started as job 8. None when `job_id`
    is no array task's own id, or sacct cannot answer (no accounting)."""
    result = run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,JobIDRaw"], env=env, timeout=15, check=False)
    if result.returncode != 0:
        return None
    for line in result.stdout.splitlines():
        parts = [part.strip() for part in line.split("|")]
        match = _ARRAY_ID.fullmatch(parts[0]) if len(parts) >= 2 and parts[1] == job_id else None
        # The array's own id is also one of its tasks' raw ids: that job is the array itself.
        if match is not None and match["index"] is not None and match["array"] != job_id:
            return match["array"], int(match["index"])
    return None


def array_indices(name: str, job_id: str) -> list[int]:
    """The indices of job array `job_id` that squeue's name `name` stands for: `12_3`, or
    `12_[4-7,9%2]` for tasks not started yet; none for another job's name."""
    match = _ARRAY_ID.fullmatch(name)
    if match is None or match["array"] != job_id:
        return []
    return [int(match["index"])] if match["index"] is not None else expand_indices(match["range"])


def expand_indices(text: str) -> list[int]:
    """Slurm's array index list `0-3,7%2` as [0, 1, 2, 3, 7]."""
    indices: list[int] = []
    for part in text.split("%")[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            indices += range(int(first), int(last or first) + 1)
    return indices


def job_state(job_id: str, *, env: Mapping[str, str] | None = None) -> str:
    """Job `job_id`'s state as squeue reports it (PENDING, RUNNING, COMPLETED, ...), any user's
    job; '' once Slurm no longer knows it. SlurmError when squeue cannot tell (no controller)."""
    listed = queue_listing(job_id, env=env)
    return listed[0] if listed else ""


def queue_listing(job_id: str, *, env: Mapping[str, str] | None = None) -> list[str]:
    """The state of every job squeue lists for `job_id` (a job array: each task's), ended ones
    included while Slurm keeps them; none once it has forgotten the job. SlurmError when squeue
    cannot tell (no controller)."""
    result = run(["squeue", "-h", "-j", job_id, "--states=all", "-o", "%T"], env=env, timeout=15, check=False)
    if result.returncode != 0:
        if "invalid job id" in (result.stderr + result.stdout).lower():
            return []
        raise SlurmError(f"squeue could not tell the state of job {job_id}: {result.one_line_error()}")
    return result.stdout.split()
