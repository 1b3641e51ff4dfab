"""What slurmdbd records, through sacct and sacctmgr: each job's attempts and how it ended (a job
array's too), the nodes' state changes, and the cluster's registration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.slurm import runner


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
    out = runner.run(job_attempts_command(job_ids), env=env, timeout=60).stdout
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
    result = runner.run(
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
    result = runner.run(
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


def ensure_accounting_cluster(name: str, *, env: Mapping[str, str] | None = None) -> None:
    """Register the cluster with slurmdbd (sacct needs it); a no-op when it exists."""
    result = runner.run(["sacctmgr", "-i", "add", "cluster", name], env=env, timeout=30, check=False)
    text = (result.stdout + result.stderr).lower()
    if result.returncode != 0 and "already exists" not in text and "nothing new added" not in text:
        raise SlurmError(f"sacctmgr could not register cluster {name}: {result.one_line_error()}")
