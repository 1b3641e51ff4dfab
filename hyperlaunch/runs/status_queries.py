"""What `status` asks Slurm about a list of jobs, in as few calls as it can: per Slurm config in
use, squeue for the queue, one sacct call for the jobs' attempts and one for the states of the
jobs they wait for, and slurmdbd's node events only where an attempt ended in NODE_FAIL. Each
job is then summed up by hyperlaunch.runs.job_status.summarize."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.job.spec import dependencies
from hyperlaunch.runs.dependency_states import Dependency
from hyperlaunch.runs.job_status import JobStatus, summarize
from hyperlaunch.runs.jobs import JobRecord
from hyperlaunch.slurm import accounting as slurm_accounting
from hyperlaunch.slurm import queue as slurm_queue
from hyperlaunch.slurm.accounting import Attempt, NodeEvent


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
