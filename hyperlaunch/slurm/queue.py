"""The queue as squeue shows it now (a job's state, this user's jobs and why they wait, what
runs and holds nodes), scancel, which takes jobs out of it, and scontrol requeue, which puts a
running one back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.slurm import runner


def queue_state(job_id: str, *, env: Mapping[str, str] | None = None) -> str:
    """The job's state while it is in the queue (PENDING, RUNNING, ...), '' once it left."""
    return runner.run(["squeue", "-h", "-j", job_id, "-o", "%T"], env=env, timeout=15, check=False).stdout.strip()


def cancel_running_jobs(*, env: Mapping[str, str] | None = None) -> None:
    """Cancel every running job of the cluster (used before its daemons are stopped, so no
    job outlives its processes in slurmctld's saved state)."""
    runner.run(["scancel", "--state=RUNNING", "--full"], env=env, timeout=30, check=False)
    runner.run(["scancel", "--state=CONFIGURING", "--full"], env=env, timeout=30, check=False)


def running_job_count(*, env: Mapping[str, str] | None = None) -> int:
    out = runner.run(["squeue", "-h", "-t", "RUNNING,CONFIGURING,COMPLETING", "-o", "%i"], env=env, timeout=15, check=False)
    return len(out.stdout.split())


def cancel(job_id: str, *, env: Mapping[str, str] | None = None) -> None:
    runner.run(["scancel", job_id], env=env, timeout=30)


def requeue(job_id: str, *, env: Mapping[str, str] | None = None) -> None:
    runner.run(["scontrol", "requeue", job_id], env=env, timeout=30)


@dataclass(frozen=True)
class HoldingJob:
    """A job that holds nodes now: running, configuring or suspended."""

    job_id: str
    state: str
    requeue: bool
    """It may be requeued after a failure (not submitted with --no-requeue, where JobRequeue=1)."""


def jobs_holding_nodes(*, env: Mapping[str, str] | None = None) -> list[HoldingJob]:
    """Every job, any user's, that holds nodes now. SlurmError when no controller answers."""
    args = ["squeue", "-h", "-t", "RUNNING,CONFIGURING,SUSPENDED", "-O", "JobID:40,State:24,Requeue:4"]
    jobs = []
    for line in runner.run(args, env=env, timeout=15).stdout.splitlines():
        fields = line.split()
        if len(fields) == 3:
            jobs.append(HoldingJob(job_id=fields[0], state=fields[1], requeue=fields[2] == "1"))
    return jobs


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
    out = runner.run(["squeue", "-h", "--me", "--states=all", "-o", "%i|%A|%T|%r"], env=env, timeout=30, check=False).stdout
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


def job_state(job_id: str, *, env: Mapping[str, str] | None = None) -> str:
    """Job `job_id`'s state as squeue reports it (PENDING, RUNNING, COMPLETED, ...), any user's
    job; '' once Slurm no longer knows it. SlurmError when squeue cannot tell (no controller)."""
    listed = queue_listing(job_id, env=env)
    return listed[0] if listed else ""


def queue_listing(job_id: str, *, env: Mapping[str, str] | None = None) -> list[str]:
    """The state of every job squeue lists for `job_id` (a job array: each task's), ended ones
    included while Slurm keeps them; none once it has forgotten the job. SlurmError when squeue
    cannot tell (no controller)."""
    result = runner.run(["squeue", "-h", "-j", job_id, "--states=all", "-o", "%T"], env=env, timeout=15, check=False)
    if result.returncode != 0:
        if "invalid job id" in (result.stderr + result.stdout).lower():
            return []
        raise SlurmError(f"squeue could not tell the state of job {job_id}: {result.one_line_error()}")
    return result.stdout.split()
