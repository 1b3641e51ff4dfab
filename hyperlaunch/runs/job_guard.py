"""Two hyperlaunch jobs never train into one checkpoint folder and model at the same time: what
`submit` and `resume` check before sbatch. A job that must follow a live one waits for it with
a Slurm dependency (`resume --after-end`); any other is refused in one line naming the live
job. The supervisor's checkpoint lock (hyperlaunch.supervisor.lock) guards against jobs
these checks cannot see (submitted by other means, by other users)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from hyperlaunch.core.errors import JobConflict
from hyperlaunch.core.protocol import checkpoint_lock_path, read_checkpoint_lock
from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.job.spec import JobSpec, dependencies
from hyperlaunch.job.sweep import element_name
from hyperlaunch.runs import jobs
from hyperlaunch.slurm import arrays as slurm_arrays
from hyperlaunch.slurm import queue as slurm_queue


def live_state(job_id: str, *, env: Mapping[str, str] | None = None) -> str | None:
    """Slurm's state of a job that runs or will run (PENDING, RUNNING, REQUEUED, ...); None
    once it ended or Slurm no longer knows it."""
    state = slurm_queue.job_state(job_id, env=env)
    return state if state in ACTIVE_STATES else None


def resume_dependency(record: jobs.JobRecord, *, after_end: bool, env: Mapping[str, str] | None = None) -> str | None:
    """The job a resumed `record` must wait for: None when it has ended; its id when it still
    runs and `after_end` asks to start once it ends; JobConflict otherwise."""
    state = live_state(record.job_id, env=env)
    if state is None:
        return None
    if not after_end:
        raise JobConflict(
            f"job {record.job_id} is {state}: resuming it now would train a second copy into {record.spec.output.checkpoint_dir}",
            hint=f"wait for it to end, cancel it ('hyperlaunch cancel {record.job_id}'), or pass --after-end to start once it ends",
        )
    return record.job_id


def refuse_shared_checkpoints(spec: JobSpec, *, env: Mapping[str, str], names: Sequence[str] = ()) -> None:
    """JobConflict when a live job other than the ones `spec` waits for (its after_job, and
    what that job waits for in turn) trains `spec`'s model (or any of `names`: a sweep's
    elements) into its checkpoint folder: a recorded job or sweep element of this cluster, or
    the job the folder's lock names. Asks Slurm only when there is such a job to ask about."""
    folder = _folder(spec.output.checkpoint_dir)
    wanted = set(names or [spec.derived.checkpoint_name])
    same: dict[str, tuple[jobs.JobRecord, str]] = {}
    for record in jobs.recent(limit=None):
        if _folder(record.spec.output.checkpoint_dir) != folder or (record.slurm_conf or None) != (env.get("SLURM_CONF") or None):
            continue
        shared = sorted(wanted & set(trained_names(record)))
        if shared:
            same[record.job_id] = (record, shared[0])
    ahead = set().union(*(_waited_for(job, {j: r for j, (r, _) in same.items()}) for job, _ in dependencies(spec)))
    others = [job for job in same if job not in ahead]
    if others:
        queued = slurm_queue.my_queue_states(env=env)
        for job in others:
            record = same[job][0]
            if record.sweep is not None:
                _refuse_live_elements(job, record, wanted, queued, spec.output.checkpoint_dir)
                continue
            state = queued.get(job)
            if state in ACTIVE_STATES:
                raise _conflict(job, state, same[job][1], spec.output.checkpoint_dir)
    for name in sorted(wanted):
        holder = read_checkpoint_lock(checkpoint_lock_path(Path(spec.output.checkpoint_dir), name))
        if holder is not None and holder not in ahead and holder not in same:
            state = live_state(holder, env=env)
            if state is not None:
                raise _conflict(holder, state, name, spec.output.checkpoint_dir)


def trained_names(record: jobs.JobRecord) -> list[str]:
    """The checkpoint names a recorded job trains: its model's, or each of a sweep's elements'."""
    if record.sweep is None:
        return [record.spec.derived.checkpoint_name]
    return [element_name(record.spec, record.sweep.element(i)) for i in record.sweep.runs]


def _refuse_live_elements(job: str, record: jobs.JobRecord, wanted: set[str], queued: Mapping[str, str], checkpoint_dir: str) -> None:
    """JobConflict for the first of sweep `job`'s elements that trains one of `wanted` and is in
    the queue. Only those: the sweep's other elements, running meanwhile, train names of their
    own (and the one that runs under the array's own job id makes `job` itself read RUNNING)."""
    assert record.sweep is not None
    names = {index: element_name(record.spec, record.sweep.element(index)) for index in record.sweep.runs}
    for task, state in queued.items():
        if state not in ACTIVE_STATES:
            continue
        for index in slurm_arrays.array_indices(task, job):
            if names.get(index) in wanted:
                element = f"{job}_{index}"
                raise JobConflict(
                    f"element {element} ({state}) already trains {names[index]} into {checkpoint_dir}; "
                    "two jobs must not write one checkpoint folder and model at once",
                    hint=f"wait for it to end, or cancel it ('hyperlaunch cancel {element}')",
                )


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


def _conflict(job: str, state: str, name: str, checkpoint_dir: str) -> JobConflict:
    return JobConflict(
        f"job {job} ({state}) already trains {name} into {checkpoint_dir}; "
        "two jobs must not write one checkpoint folder and model at once",
        hint=f"continue it once it ends with 'hyperlaunch resume {job} --after-end', or cancel it ('hyperlaunch cancel {job}')",
    )


def _folder(path: str) -> str:
    """One name for a folder however it was written (symlinks, `..`), so that two paths to it match."""
    return str(Path(path).resolve())
