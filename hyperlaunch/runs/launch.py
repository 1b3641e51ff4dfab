"""The one way a job reaches Slurm, for `submit` and `resume` alike: plan the JobSpec, render
it, submit it with the cluster's environment, record it. The CLI only parses and prints."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.aws import hyperpod, hyperpod_lookup
from hyperlaunch.core import checkpoint_resume, checkpoints, hf_exports, trackers
from hyperlaunch.core.errors import CheckpointError, InvalidInput, JobNotFound
from hyperlaunch.core.script_env import RESUME_FROM_ENV
from hyperlaunch.job import code_snapshot
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.spec import JobSpec, dependencies
from hyperlaunch.runs import jobs, tracker_runs


@dataclass(frozen=True, kw_only=True)
class Launch:
    """What launching a spec produced: the script, and the record unless it was a dry run."""

    script: str
    record: jobs.JobRecord | None


def newest_record(model: str | None) -> jobs.JobRecord:
    """The recorded job `resume` starts from when none is named: the newest (of `model`)."""
    found = jobs.recent(limit=1, model=model)
    if not found:
        raise JobNotFound("no recorded job" + (f" of model {model}" if model else ""), hint="submit one first")
    return found[0]


def plan_resume(
    record: jobs.JobRecord,
    *,
    nodes: int | None = None,
    max_steps: int | None = None,
    exclude_failed: bool = False,
    env: Mapping[str, str] | None = None,
    notify: Callable[[str], None] | None = None,
    after_job: str | None = None,
    refresh_code: bool = False,
) -> JobSpec:
    """The spec of a job that continues `record` from its model's -latest checkpoint: the same
    job, without the trainer flags that would start it elsewhere (the trainer follows -latest by
    itself, when it starts), on `nodes` (DCP reshards), with `exclude_failed` away from the nodes
    that failed it (asked of Slurm with `env`) but for those HyperPod has replaced since (said to
    `notify`), starting only after `after_job` ends when given (see
    hyperlaunch.runs.job_guard.resume_dependency). A script job runs its recorded code snapshot
    again, or with `refresh_code` a new one of its project as it is now. Refused when the
    checkpoint folder holds no complete checkpoint of the model, unless it waits for a job that
    may still save one."""
    spec = record.spec
    if refresh_code and not spec.is_script_job:
        raise InvalidInput(f"--refresh-code: job {record.job_id} runs the bundled trainer, which has no code snapshot")
    ckpt_dir = Path(spec.output.checkpoint_dir)
    # A script job may keep checkpoints of its own kind (torch.save files the library never
    # committed): it resumes however its script does, so nothing is refused here.
    if not spec.saves_checkpoints:  # a checkpoint in its folder would be another run's
        raise CheckpointError(
            f"job {record.job_id} ran with {targs.NO_CHECKPOINTS}, which keeps no checkpoint: nothing to resume from",
            hint="submit it again to start from scratch",
        )
    if after_job is None and not spec.is_script_job and checkpoints.newest_complete(ckpt_dir, spec.derived.checkpoint_name) is None:
        raise CheckpointError(
            f"job {record.job_id} has no complete checkpoint of {spec.derived.checkpoint_name} in {ckpt_dir}; nothing to resume from",
            hint="submit it again to start from scratch",
        )
    if after_job is None and not spec.is_script_job:
        _refuse_nothing_to_do(record, max_steps if max_steps is not None else spec.job.max_steps)
    changes: dict[str, object] = {"after_job": after_job}
    if not spec.is_script_job:  # a script's own arguments are kept as they are
        changes["trainer_args"] = targs.without(spec.job.trainer_args, targs.RESUME_OVERRIDES)
    if refresh_code and spec.derived.code_root is not None:
        snapshot = code_snapshot.take_for(spec, Path(spec.derived.code_root))
        changes["code_dir"] = code_snapshot.snapshot_dir(spec.output.run_dir, snapshot)
    if nodes is not None:
        changes["nodes"] = nodes
    if max_steps is not None:
        changes["max_steps"] = max_steps
    if exclude_failed:
        from hyperlaunch.runs.status_queries import collect

        failed = collect([record], env=env)[0].failed_nodes
        failed = not_replaced(record, failed, notify or (lambda _: None))
        changes["exclude"] = tuple(dict.fromkeys([*spec.cluster.exclude, *failed]))
    return spec.replace(**changes)


def _refuse_nothing_to_do(record: jobs.JobRecord, max_steps: int | None) -> None:
    """A job whose checkpoint is at --max-steps already, with its -final export of that
    checkpoint whole (or none asked for), would start, load it, train no step and end: refused.
    Without that export (it failed, say on a full disk, and -final is missing or an older
    step's) the resume writes it, and goes ahead."""
    spec = record.spec
    ckpt_dir, name = Path(spec.output.checkpoint_dir), spec.derived.checkpoint_name
    choice = checkpoint_resume.choose_resume(ckpt_dir, name)
    if max_steps is None or choice.path is None or choice.step < max_steps:
        return
    exported = targs.NO_EXPORT in spec.job.trainer_args or hf_exports.is_export_of(checkpoints.final_dir(ckpt_dir, name), choice.path.name)
    if exported:
        raise InvalidInput(
            f"job {record.job_id} has trained its {max_steps} steps already ({choice.path.name}), and resuming it would train none",
            hint=f"hyperlaunch resume {record.job_id} --max-steps N, with N above {choice.step}, trains further",
        )


def not_replaced(record: jobs.JobRecord, failed: Sequence[str], notify: Callable[[str], None]) -> tuple[str, ...]:
    """The failed nodes HyperPod has not replaced since `record` was submitted: a replaced node
    keeps its Slurm name but has a new instance id (read now, from this node's resource config
    or the job's --hyperpod-cluster). Where the ids cannot be compared, every failed node."""
    recorded = dict(record.node_instances)
    if not failed or not recorded:
        return tuple(failed)
    try:
        current = hyperpod_lookup.instance_ids(record.spec.cluster.hyperpod_cluster, os.environ, fresh=True)
    except hyperpod.Unavailable as why:
        notify(f"cannot tell whether HyperPod replaced {', '.join(failed)} ({why}); excluding them")
        return tuple(failed)
    kept = []
    for node in failed:
        old, new = recorded.get(node), (current or {}).get(node)
        if old and new and old != new:
            notify(f"node {node} was replaced by HyperPod ({old} -> {new}); not excluded")
        else:
            kept.append(node)
    return tuple(kept)


def recorded_instance_ids(spec: JobSpec, notify: Callable[[str], None]) -> tuple[tuple[str, str], ...]:
    """On HyperPod, every cluster node's instance id now (the job's candidates among them), for
    the record; () elsewhere, or when they cannot be read (said to `notify`)."""
    try:
        ids = hyperpod_lookup.instance_ids(spec.cluster.hyperpod_cluster, os.environ)
    except hyperpod.Unavailable as why:
        notify(f"HyperPod instance ids not recorded ({why}): resume --exclude-failed will exclude every failed node, replaced or not")
        return ()
    return tuple(sorted((ids or {}).items()))


def check_trainer_command(spec: JobSpec) -> None:
    """Run the trainer's own argument parser and checks (torch-free) on the command line the
    job would start on every node, so a typo after `--` is one line here, not a job that
    fails on every attempt."""
    from hyperlaunch.script.render import trainer_argv
    from hyperlaunch.train.config import parse_config

    if spec.is_script_job:
        return  # the arguments after `--` are the script's own
    owned = targs.owned_flags_given(spec.job.trainer_args)
    if owned:
        flag = owned[0].split("=", 1)[0]
        raise InvalidInput(
            f"{flag} after `--` is set by hyperlaunch from the job's settings; "
            f"pass it to hyperlaunch, before `--`, as {flag}"
        )
    if any(arg in targs.HELP_FLAGS for arg in spec.job.trainer_args):
        raise InvalidInput("--help after `--` is not a training argument; see `hyperlaunch-train --help` for the trainer's options")
    try:
        parse_config(trainer_argv(spec))
    except InvalidInput as err:
        raise InvalidInput(f"trainer arguments: {err}") from None


def continued_checkpoint(spec: JobSpec) -> tuple[str, int | None] | None:
    """The checkpoint a new job will continue from (its folder's `<name>-latest` names it, and
    nothing tells it to start elsewhere), and its step; None when it starts fresh."""
    if not spec.is_script_job and any(arg.split("=", 1)[0] in targs.RESUME_OVERRIDES for arg in spec.job.trainer_args):
        return None
    try:
        pointed = checkpoints.read_pointer(Path(spec.output.checkpoint_dir), spec.derived.checkpoint_name)
    except (CheckpointError, OSError):
        return None  # the trainer refuses a broken pointer with its own error
    if pointed is None:
        return None
    return pointed, checkpoints.parse_step(pointed, spec.derived.checkpoint_name)


def behind(spec: JobSpec, step: int | None) -> str:
    """`; --max-steps N is not past it ...` where the job would train no further, else ''."""
    if spec.job.max_steps is None or step is None or spec.job.max_steps > step:
        return ""
    return f"; --max-steps {spec.job.max_steps} is not past step {step}: it trains no further"


def continues_from(spec: JobSpec) -> str | None:
    """For a new job whose checkpoint folder already holds its `-latest` pointer (the bundled
    trainer's model, a script job's --name): what it will continue from, said at submit. The
    trainer follows the pointer by itself, and a script is handed it (runtime.resume_path()), so
    a new experiment under the same name would otherwise go on from another job's weights
    unnoticed. None when it starts fresh or is told where to start."""
    found = continued_checkpoint(spec)
    if found is None:
        return None
    pointed, step = found
    where = f"step {step}" if step is not None else "it"
    named = f"{spec.output.checkpoint_dir}/{spec.derived.checkpoint_name}-latest names {pointed}"
    if spec.is_script_job:
        return (
            f"{named}: this job's script is handed it to resume from ({where}; runtime.resume_path(), {RESUME_FROM_ENV});"
            " a training of its own: another --name or --checkpoint-dir"
        )
    return (
        f"{named}: this job continues from {where}{behind(spec, step)}"
        " (start over with '-- --from-scratch'; a training of its own: another --checkpoint-dir)"
    )


def run_dir_shared(spec: JobSpec) -> str | None:
    """A warning where the run folder already holds another training's records: a recorded job
    with this run folder and another checkpoint folder or name. The default run folder is
    `runs/<job name>` whatever the checkpoint folder, so a training started in a new checkpoint
    folder under the same name writes its metrics.jsonl, TensorBoard and W&B files beside the
    first one's, and TensorBoard, one curve per folder, drops the earlier steps the new run
    writes again. Said, not refused: the folder may be one the user means to share."""
    for job_id, checkpoint_dir, name in jobs.run_dir_trainings(spec.output.run_dir):
        if (checkpoint_dir, name) != (spec.output.checkpoint_dir, spec.derived.checkpoint_name):
            return (
                f"the run folder {spec.output.run_dir} holds the records of job {job_id}, another training ({name} in {checkpoint_dir}):"
                " this job's metrics and tracker files would mix with them (TensorBoard shows one curve per folder);"
                " pass --run-dir for a folder of its own"
            )
    return None


def data_unseen(spec: JobSpec) -> str | None:
    """A warning for a --data path that does not exist here, unless the job waits for another
    (--after: a prepare-data job may write it first). The nodes may see paths this machine does
    not, so it is said, not refused; the trainer refuses for good a --data it cannot read."""
    if spec.job.data is None or spec.cluster.after or not os.path.isabs(spec.job.data) or os.path.lexists(spec.job.data):
        return None
    return f"--data {spec.job.data}: nothing is there on this machine; the job fails at its start unless its nodes see it"


def wandb_unkeyed(spec: JobSpec, environ: Mapping[str, str]) -> str | None:
    """A warning for `--tracker wandb` where the job gets no way to log in to W&B: no --env
    WANDB_API_KEY, no ~/.netrc entry for W&B, and WANDB_MODE not offline. Its W&B run then
    fails to open on the nodes and the training goes on without it, which `status` showed as
    healthy. Said, not refused: the nodes may hold a key this machine does not."""
    if trackers.WANDB not in spec.output.tracker:
        return None
    values = {name: value if value is not None else environ.get(name, "") for name, value in spec.job.env}
    if values.get("WANDB_MODE", "").lower() in ("offline", "dryrun", "disabled") or "WANDB_API_KEY" in values:
        return None
    netrc = Path(environ.get("NETRC") or os.path.join(environ.get("HOME", os.path.expanduser("~")), ".netrc"))
    try:
        if "wandb" in netrc.read_text(errors="replace"):
            return None
    except OSError:
        pass
    return (
        "--tracker wandb: the job gets no W&B API key (no --env WANDB_API_KEY, no ~/.netrc entry) and WANDB_MODE is not"
        " offline, so its W&B run fails to open and the training goes on without it; pass --env WANDB_API_KEY"
        " (with it set here) or --env WANDB_MODE=offline"
    )


def module_unseen(spec: JobSpec) -> str | None:
    """A warning for a --module that is not in the folder the job runs it from (the snapshot's
    root: the git work tree's top, or the current folder): `python -m` then finds it only where
    the nodes' Python has it installed, which this machine cannot tell, so it is said, not refused."""
    if spec.job.module is None or spec.derived.code_root is None:
        return None
    parts = spec.job.module.split(".")
    base = Path(spec.derived.code_root).joinpath(*parts)
    if base.with_suffix(".py").is_file() or base.is_dir():
        return None
    return (
        f"--module {spec.job.module}: no {'/'.join(parts)}.py or {'/'.join(parts)}/ in {spec.derived.code_root}, the folder the job runs it"
        f" from; it fails at its start unless the nodes' Python has {parts[0]} installed (submit from the folder that holds {parts[0]}/)"
    )


def launch(
    spec: JobSpec,
    *,
    env: Mapping[str, str],
    resumed_from: str | None = None,
    dry_run: bool = False,
    submit: Callable[..., jobs.JobRecord] | None = None,
    decided: tuple[tuple[str, str], ...] = (),
    notify: Callable[[str], None] | None = None,
) -> Launch:
    """Check the trainer's command line, render the spec and, unless `dry_run`, submit and
    record it with where its `decided` settings came from (field, source) and, on HyperPod, the
    nodes' instance ids. `submit` defaults to hyperlaunch.runs.submission.submit (a unit test passes
    its own)."""
    from hyperlaunch.script.render import render_sbatch  # Jinja only when a script is rendered

    check_trainer_command(spec)
    if not dry_run:
        from hyperlaunch.runs.job_guard import refuse_shared_checkpoints
        from hyperlaunch.runs.partition_fit import refuse_more_nodes_than_partition
        from hyperlaunch.runs.submission import forwarded_names
        from hyperlaunch.runs.waits import refuse_unmet

        forwarded_names(spec, env)  # a `--env NAME` not set here is refused before anything is printed
        refuse_more_nodes_than_partition(spec, env=env)  # never a job Slurm would leave pending for good
        refuse_shared_checkpoints(spec, env=env)  # never two live jobs on one checkpoint folder and model
        refuse_unmet(dependencies(spec), env=env, resumed=resumed_from is not None)  # never one Slurm would drop unmet
    script = render_sbatch(spec)
    if dry_run:
        return Launch(script=script, record=None)
    if submit is None:
        from hyperlaunch.runs.submission import submit as submit_to_slurm

        submit = submit_to_slurm
    instances = recorded_instance_ids(spec, notify or (lambda _: None))
    with tracker_runs.chosen(spec) as tracked:
        if tracked is not spec:
            spec, script = tracked, render_sbatch(tracked)  # with the run ids chosen now
        record = submit(spec, script, env=env, resumed_from=resumed_from, decided=decided, node_instances=instances)
    return Launch(script=script, record=record)
