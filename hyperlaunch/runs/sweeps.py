"""A sweep's life after `hyperlaunch sweep`: submitted as one Slurm job array, seen as one row
that opens into its elements, resumed element by element.

Each element is a job of its own to Slurm once it starts (its array task's job id, which a
requeue keeps): its record (JobRecord.element) is what `status`, `logs` and the lock rules read
for a single job, so an element fails, requeues and resumes as one does."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hyperlaunch.core.errors import InvalidInput, JobConflict, JobNotFound, RecordUnreadable, SlurmError
from hyperlaunch.core.metrics_records import TrainerEvent
from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.job import sweep as rules
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.spec import JobSpec, dependencies
from hyperlaunch.runs import jobs, tracker_runs
from hyperlaunch.runs.dependency_states import Dependency, blocker_of, never_runs_text
from hyperlaunch.runs.job_status import JobStatus
from hyperlaunch.runs.status_queries import collect
from hyperlaunch.script.render_sweep import SweepScript, render_sweep
from hyperlaunch.slurm import arrays as slurm_arrays


@dataclass(frozen=True)
class SweepLaunch:
    rendered: SweepScript
    record: jobs.JobRecord | None
    """None for --dry-run."""


@dataclass(frozen=True)
class ElementStatus:
    """One element of a sweep now."""

    sweep_id: str
    index: int
    name: str
    values: tuple[tuple[str, str], ...]
    state: str
    status: JobStatus | None
    """Its job's status once its task started (it has a job id of its own); None before."""
    pending_reason: str = ""
    """Before it started: squeue's reason the array's waiting tasks wait (JobArrayTaskLimit,
    Resources, ...)."""

    @property
    def task(self) -> str:
        """`12_3`: how Slurm (scancel, squeue -j) and hyperlaunch name the element."""
        return f"{self.sweep_id}_{self.index}"

    @property
    def best_val_loss(self) -> float | None:
        if self.status is None:
            return None
        losses = [e.get("val_loss") for e in self.status.progress.events if e.event == TrainerEvent.VALIDATION.value]
        finite = [float(v) for v in losses if isinstance(v, (int, float)) and math.isfinite(v)]
        return min(finite) if finite else None

    def to_json(self) -> dict[str, object]:
        job = self.status.to_json() if self.status is not None else {}
        return {
            **job,
            "task": self.task,
            "index": self.index,
            "name": self.name,
            "values": dict(self.values),
            "state": self.state,
            "job_id": self.status.record.job_id if self.status is not None else None,
            "best_val_loss": self.best_val_loss,
            **({} if self.status is not None else {"pending_reason": self.pending_reason or None}),
        }


def launch_sweep(
    base: JobSpec,
    sweep: rules.Sweep,
    *,
    env: Mapping[str, str],
    dry_run: bool = False,
    resumed_from: str | None = None,
    decided: tuple[tuple[str, str], ...] = (),
    submit: Callable[..., jobs.JobRecord] | None = None,
) -> SweepLaunch:
    """Check every element's command line as a single job's would be, render the array job
    and, unless `dry_run`, submit and record it (its elements file written first)."""
    from hyperlaunch.runs.launch import check_trainer_command

    rules.unique_names(base, sweep.elements)
    specs = [rules.element_spec(base, element) for element in sweep.elements]
    for element, spec in zip(sweep.elements, specs, strict=True):
        try:
            check_trainer_command(spec)
        except InvalidInput as err:
            raise InvalidInput(f"sweep element {element.index} ({spec.derived.checkpoint_name}): {err}") from None
    if dry_run:
        return SweepLaunch(render_sweep(base, sweep), None)
    from hyperlaunch.runs.job_guard import refuse_shared_checkpoints
    from hyperlaunch.runs.partition_fit import refuse_more_nodes_than_partition
    from hyperlaunch.runs.submission import forwarded_names
    from hyperlaunch.runs.waits import refuse_unmet

    forwarded_names(base, env)
    refuse_more_nodes_than_partition(base, env=env)
    running = {index: spec for index, spec in zip((e.index for e in sweep.elements), specs, strict=True) if index in sweep.runs}
    refuse_shared_checkpoints(base, env=env, names=[spec.derived.checkpoint_name for spec in running.values()])
    refuse_unmet(dependencies(base), env=env, resumed=resumed_from is not None)
    if submit is None:
        from hyperlaunch.runs.submission import submit as submit_to_slurm

        submit = submit_to_slurm
    with contextlib.ExitStack() as stack:
        tracked = sweep
        if base.output.tracker:
            chosen = []
            for element, spec in zip(sweep.elements, specs, strict=True):
                with_runs = stack.enter_context(tracker_runs.chosen(spec))
                chosen.append(rules.Element(
                    element.index, element.values, with_runs.derived.tracker_run_id, with_runs.derived.mlflow_run_id, with_runs.derived.mlflow_experiment_id,
                ))
            tracked = rules.Sweep(tuple(chosen), sweep.runs, sweep.max_parallel)
        rendered = render_sweep(base, tracked)
        record = submit(
            base, rendered.script, env=env, resumed_from=resumed_from, decided=decided, sweep=tracked,
            files=((rendered.elements_path, rendered.elements_text),),
        )
    return SweepLaunch(rendered, record)


@dataclass(frozen=True)
class SweepStatus:
    """A sweep now: its elements, and the jobs the whole array waits for (--after)."""

    record: jobs.JobRecord
    members: tuple[ElementStatus, ...]
    waits_for: tuple[Dependency, ...] = ()
    """The jobs the array starts after, with their states now (Slurm holds every task)."""
    blocker: Dependency | None = None
    """While no element has started: a job the sweep waited to complete that ended otherwise."""

    @property
    def never_runs(self) -> str | None:
        return never_runs_text(self.blocker)

    @property
    def waiting(self) -> bool:
        """Every element is pending behind --after's jobs."""
        return bool(self.waits_for) and all(m.state == "PENDING" for m in self.members)

    @property
    def state(self) -> str:
        """One word: COMPLETED, RUNNING, PENDING, FAILED, CANCELLED..."""
        return summary_state(self.members).split(" ")[0]

    @property
    def summary(self) -> str:
        """The state with its counts, or with why it waits or never runs."""
        if self.blocker is not None:
            return f"{self.state} (never runs: job {self.blocker.job} {self.blocker.state})"
        if self.waiting:
            return f"PENDING (after {', '.join(d.job for d in self.waits_for)})"
        return summary_state(self.members)


def sweep_status(record: jobs.JobRecord, *, env: Mapping[str, str] | None = None) -> SweepStatus:
    """The status of each element this sweep job runs (Slurm's array tasks, then, for the ones
    that started, their jobs' statuses) and of the jobs it waits for, in one collect."""
    assert record.sweep is not None
    tasks = slurm_arrays.array_tasks(record.job_id, env=env)
    started = {i: tasks[i].job_id for i in record.sweep.runs if i in tasks and tasks[i].job_id is not None}
    element_records = [record.element(i, str(job)) for i, job in started.items()]
    # The array job itself, last: its waits (the states of --after's jobs) are the sweep's.
    collected = collect([*element_records, dataclasses.replace(record, sweep=None)], env=env)
    statuses = dict(zip(started, collected[:-1], strict=True))
    waiting_reason = collected[-1].pending_reason  # the array's tasks not started, as one
    shown = []
    for index in record.sweep.runs:
        element = record.sweep.element(index)
        status = statuses.get(index)
        # Slurm's word for the task where its job's own records say nothing yet (sacct lags).
        known = tasks[index].state if index in tasks and tasks[index].state else "UNKNOWN"
        if index not in tasks and tasks:
            # Slurm keeps no record of an array task cancelled before it started (squeue lists
            # every pending task, sacct every one that ran): it never ran, and never will.
            known = "CANCELLED"
        state = status.state if status is not None and status.state != "UNKNOWN" else known
        name = rules.element_name(record.spec, element)
        reason = waiting_reason if status is None and state == "PENDING" else ""
        shown.append(ElementStatus(record.job_id, index, name, element.values, state, status, reason))
    waits = collected[-1].waits_for
    attempts = [a for s in statuses.values() for a in s.attempts]
    return SweepStatus(record, tuple(shown), waits, blocker_of(waits, attempts))


def elements(record: jobs.JobRecord, *, env: Mapping[str, str] | None = None) -> tuple[ElementStatus, ...]:
    """The status of each element this sweep job runs."""
    return sweep_status(record, env=env).members


def summary_state(members: Sequence[ElementStatus]) -> str:
    """The sweep's state in one word and counts: `RUNNING (2 running, 1 pending, 1 completed)`,
    COMPLETED when every element did."""
    counts: dict[str, int] = {}
    for member in members:
        counts[member.state] = counts.get(member.state, 0) + 1
    if set(counts) == {"COMPLETED"}:
        return "COMPLETED"
    active = [state for state in ("RUNNING", "REQUEUED", "PENDING", *sorted(ACTIVE_STATES)) if state in counts]
    word = active[0] if active else ("FAILED" if "FAILED" in counts else next(iter(sorted(counts)), "UNKNOWN"))
    return f"{word} ({', '.join(f'{count} {state.lower()}' for state, count in sorted(counts.items()))})"


def to_resume(record: jobs.JobRecord, members: Sequence[ElementStatus], *, only: int | None = None, further: bool = False) -> tuple[int, ...]:
    """The elements `resume` submits again: the ones that ended without completing, or element
    `only` alone; with `further` (a new --max-steps), the completed ones too. Refused while one
    of them is still in the queue (it would train beside its own resumed copy) or when none is
    left to train."""
    assert record.sweep is not None
    chosen = [m for m in members if only is None or m.index == only]
    if only is not None and not chosen:
        ran = ", ".join(f"{record.job_id}_{i}" for i in record.sweep.runs)
        source = f" (resume {record.resumed_from}_{only} goes on from the sweep it came from)" if record.resumed_from else ""
        raise InvalidInput(f"sweep {record.job_id} did not run element {only}: it ran {ran}{source}")
    live = [m.task for m in chosen if m.state in ACTIVE_STATES]
    if live:
        what = f"element {live[0]} is still in the queue" if only is not None else (
            f"sweep {record.job_id} still has element(s) in the queue: {', '.join(live[:8])}{' ...' if len(live) > 8 else ''}"
        )
        them = "it" if only is not None else "them"
        raise JobConflict(what, hint=f"wait for {them} to end, or cancel {them} ('hyperlaunch cancel {live[0]}')")
    indices = tuple(m.index for m in chosen if further or m.state != "COMPLETED")
    if not indices:
        what = f"element {record.job_id}_{only}" if only is not None else f"every element of sweep {record.job_id}"
        raise InvalidInput(f"{what} completed; nothing to resume", hint=None if record.spec.is_script_job else "--max-steps N trains further")
    return indices


def plan_resume(record: jobs.JobRecord, indices: Sequence[int]) -> tuple[JobSpec, rules.Sweep]:
    """The sweep job that continues `indices` of `record`: each element follows its own
    -latest pointer (the trainer does, when it starts), its tracker run kept."""
    assert record.sweep is not None
    spec = record.spec
    if not spec.is_script_job:
        spec = spec.replace(trainer_args=targs.without(spec.job.trainer_args, targs.RESUME_OVERRIDES), after_job=None)
    return spec, rules.Sweep(record.sweep.elements, tuple(indices), record.sweep.max_parallel)


EnvFor = Callable[[str | None], Mapping[str, str]]
"""`env_for(slurm_conf)`: the Slurm environment to ask in, for a record's SLURM_CONF (None:
no record's)."""


def split_task(text: str, env_for: EnvFor) -> tuple[jobs.JobRecord, int | None]:
    """`12` or `12_3`: the recorded job, and the element named, checked against the sweep. An
    element's own job id (`13`, as `status 12` and its log name it) is that element."""
    job_id, index = rules.parse_element_id(jobs.check_job_id(text))
    if index is None:
        return _job_or_element(job_id, env_for)
    record = jobs.load(job_id)
    if record.sweep is None:
        raise InvalidInput(f"job {job_id} is not a sweep; {text} names no element of it")
    record.sweep.element(index)
    return record, index


def trainings(record: jobs.JobRecord, index: int | None) -> list[JobSpec]:
    """The spec of each training a job (from split_task) names: a job's own; element `index`
    of a sweep; else each element the sweep job runs. Never a sweep's own spec for what
    belongs to a training: its checkpoint name, the base model's, is no element's (another
    job's checkpoints may go by it)."""
    if record.sweep is None:
        return [record.spec]
    indices = record.sweep.runs if index is None else (index,)
    return [rules.element_spec(record.spec, record.sweep.element(i)) for i in indices]


def _job_or_element(job_id: str, env_for: EnvFor) -> tuple[jobs.JobRecord, int | None]:
    """Job `job_id`'s record; where there is none, the recorded sweep and element whose array
    task ran as `job_id`. Slurm is asked only then, once; when it cannot tell, the job is not
    found as before."""
    try:
        return jobs.load(job_id), None
    except RecordUnreadable:
        raise
    except JobNotFound as err:
        not_found = err
    try:
        task = slurm_arrays.array_task_of(job_id, env=env_for(None))
    except SlurmError:
        task = None  # no Slurm to ask here: the id is just not recorded
    if task is None:
        raise not_found
    array_id, index = task
    try:
        record = jobs.load(array_id)
    except RecordUnreadable:
        raise
    except (JobNotFound, InvalidInput):
        raise JobNotFound(
            f"no recorded job {job_id}: Slurm ran it as task {array_id}_{index} of job array {array_id}, which hyperlaunch has no record of",
            hint="'hyperlaunch status' lists recorded jobs",
        ) from None
    if record.sweep is None or index not in {element.index for element in record.sweep.elements}:
        raise not_found
    return record, index


def element_record(record: jobs.JobRecord, index: int, *, env: Mapping[str, str] | None = None) -> jobs.JobRecord:
    """The record of element `index` of sweep `record` as the job its task became; InvalidInput
    while it has not started (it has no job, log or attempts yet)."""
    tasks = slurm_arrays.array_tasks(record.job_id, env=env)
    task = tasks.get(index)
    if task is None and tasks:  # see sweep_status: Slurm forgets a task cancelled while it waited
        later = resumed_as(record, index)
        raise InvalidInput(
            f"element {record.job_id}_{index} was cancelled before it started: no log or attempts",
            hint=f"it ran as {later}: 'hyperlaunch logs {later}'" if later else f"'hyperlaunch resume {record.job_id}_{index}' submits it again",
        )
    if task is None or task.job_id is None:
        state = task.state if task is not None else "unknown to Slurm"
        raise InvalidInput(f"element {record.job_id}_{index} has not started ({state}): no log or attempts yet", hint=f"'hyperlaunch status {record.job_id}' lists its elements")
    return record.element(index, task.job_id)


def resumed_as(record: jobs.JobRecord, index: int) -> str | None:
    """The element of a later sweep that resumed element `index` of sweep `record` (`80_3`), the
    newest; None when none did."""
    for later in jobs.recent(limit=None):
        if later.sweep is not None and later.resumed_from == record.job_id and index in later.sweep.runs:
            return f"{later.job_id}_{index}"
    return None


def load_job(text: str, env_for: EnvFor) -> jobs.JobRecord:
    """The job `logs` and `status` show for `12` or `12_3` (an element, as the job its task
    became); `env_for(slurm_conf)` is the Slurm environment to ask in."""
    record, index = split_task(text, env_for)
    if index is None:
        return record
    return element_record(record, index, env=env_for(record.slurm_conf))
