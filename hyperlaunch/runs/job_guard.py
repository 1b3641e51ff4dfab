"""Two hyperlaunch jobs never train into one checkpoint folder and model at the same time: what
`submit` and `resume` check before sbatch. A job that must follow a live one waits for it with
a Slurm dependency (`resume --after-end`); any other is refused in one line naming the live
job. The supervisor's checkpoint lock (hyperlaunch.supervisor.lock) guards against jobs
these checks cannot see (submitted by other means, by other users)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hyperlaunch.core.errors import JobConflict
from hyperlaunch.core.protocol import checkpoint_lock_path, read_checkpoint_lock
from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.job.spec import JobSpec, dependencies
from hyperlaunch.runs import jobs
from hyperlaunch.slurm import commands as slurm


def live_state(job_id: str, *, env: Mapping[str, str] | None = None) -> str | None:
    """Slurm's state of a job that runs or will run (PENDING, RUNNING, REQUEUED, ...); None
    once it ended or Slurm no longer knows it."""
    state = slurm.job_state(job_id, env=env)
    return state if state in ACTIVE_STATES else None


def resume_dependency(record: jobs.JobRecord, *, after_end: bool, env: Mapping[str, str] | None = None) -> str | None:
    """The job a resumed `record` must wait for: None when it has ended; its id when it still
    runs and `after_end` asks to start once it ends; JobConflict otherwise."""
    state = live_state(record.job_id, env=env)
    if state is None:
        return None
    if not after_end:
        raise JobConflict(
            f"job {record.job_id} is {state}: resuming it now would train a second copy into {record.spec.checkpoint_dir}",
            hint=f"wait for it to end, cancel it ('hyperlaunch cancel {record.job_id}'), or pass --after-end to start once it ends",
        )
    return record.job_id


def refuse_shared_checkpoints(spec: JobSpec, *, env: Mapping[str, str]) -> None:
    """JobConflict when a live job other than the ones `spec` waits for (its after_job, and
    what that job waits for in turn) trains `spec`'s model into its checkpoint folder: a
    recorded job of this cluster, or the job the folder's lock names. Asks Slurm only when
    there is such a job to ask about."""
    folder = _folder(spec.checkpoint_dir)
    same = {
        record.job_id: record
        for record in jobs.recent(limit=None)
        if record.spec.checkpoint_name == spec.checkpoint_name
        and _folder(record.spec.checkpoint_dir) == folder
        and (record.slurm_conf or None) == (env.get("SLURM_CONF") or None)
    }
    ahead = set().union(*(_waited_for(job, same) for job, _ in dependencies(spec)))
    others = [job for job in same if job not in ahead]
    if others:
        queued = slurm.my_queue_states(env=env)
        for job in others:
            if queued.get(job) in ACTIVE_STATES:
                raise _conflict(job, queued[job], spec)
    holder = read_checkpoint_lock(checkpoint_lock_path(Path(spec.checkpoint_dir), spec.checkpoint_name))
    if holder is not None and holder not in ahead and holder not in same:
        state = live_state(holder, env=env)
        if state is not None:
            raise _conflict(holder, state, spec)


def _waited_for(job: str, records: Mapping[str, jobs.JobRecord]) -> set[str]:
    """`job` and every job it waits for, through the recorded dependencies."""
    ahead: set[str] = set()
    todo = [job]
    while todo:
        current = todo.pop()
        if current in ahead:
            continue
        ahead.add(current)
        record = records.get(current)
        if record is not None:
            todo += [waited for waited, _ in dependencies(record.spec)]
    return ahead


def _conflict(job: str, state: str, spec: JobSpec) -> JobConflict:
    return JobConflict(
        f"job {job} ({state}) already trains {spec.checkpoint_name} into {spec.checkpoint_dir}; "
        "two jobs must not write one checkpoint folder and model at once",
        hint=f"continue it once it ends with 'hyperlaunch resume {job} --after-end', or cancel it ('hyperlaunch cancel {job}')",
    )


def _folder(path: str) -> str:
    """One name for a folder however it was written (symlinks, `..`), so that two paths to it match."""
    return str(Path(path).resolve())
