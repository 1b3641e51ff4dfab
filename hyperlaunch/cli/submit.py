"""`hyperlaunch submit` and `hyperlaunch resume`: render the job's script and hand it to Slurm."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._job_flags import JobFlags, show_settings, with_job_flags
from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from hyperlaunch.job.spec import JobSpec
    from hyperlaunch.runs.jobs import JobRecord
    from hyperlaunch.runs.launch import Launch

_JSON = typer.Option("--json", help="Print one JSON document (job id, paths) instead of text.")
_DRY = typer.Option("--dry-run", help="Print the sbatch script and submit nothing.")


def _report(launched: Launch, planned: JobSpec, as_json: bool, verb: str, *, resumed_from: str | None = None) -> None:
    """What `submit` and `resume` print: the job submitted, or (--dry-run) its script."""
    record = launched.record
    if as_json:
        out.json(_json_doc(launched, planned, resumed_from))
        return
    if record is None:  # --dry-run
        out.raw(launched.script)
        return
    log, _ = record.log_paths
    out.text(f"{verb} job {record.job_id}: {record.spec.what} on {record.spec.nodes_text}")
    out.text(f"  log:         {log}")
    out.text(f"  checkpoints: {record.spec.output.checkpoint_dir}")
    if record.spec.derived.code_dir is not None:
        out.text(f"  code:        {record.spec.derived.code_dir}")
        out.text(f"  runs in:     {record.spec.work_dir} (its relative writes land here)")
    if record.spec.output.tracker:
        out.text(f"  trackers:    {', '.join(record.spec.output.tracker)}, run {record.spec.derived.tracker_run_id} (status says where)")
    # One command a line: several on one line joined by `|` would be a pipeline when pasted.
    out.text(f"  follow it:   hyperlaunch status {record.job_id}")
    out.text(f"               hyperlaunch logs {record.job_id} -f")
    out.text(f"               hyperlaunch plot {record.job_id}")


def _json_doc(launched: Launch, planned: JobSpec, resumed_from: str | None) -> dict[str, object]:
    """--json's one document: the job as submitted (its tracker run ids chosen then) or, with
    --dry-run, the `planned` one with its script, and null for what only sbatch gives (the job
    id, the logs named after it), as `sweep --dry-run --json` does."""
    record = launched.record
    spec = record.spec if record is not None else planned
    log, err = record.log_paths if record is not None else (None, None)
    doc: dict[str, object] = {
        "job_id": record.job_id if record is not None else None,
        "model": spec.job.model,
        "trains": spec.what,
        "name": spec.derived.checkpoint_name,
        "code_dir": spec.derived.code_dir,
        "work_dir": spec.work_dir,
        "nodes": spec.job.nodes,
        "log": str(log) if log is not None else None,
        "err": str(err) if err is not None else None,
        "checkpoint_dir": spec.output.checkpoint_dir,
        "run_dir": spec.output.run_dir,
        "resumed_from": resumed_from,
        "trackers": list(spec.output.tracker),
        "tracker_run_id": spec.derived.tracker_run_id,
        "mlflow_run_id": spec.derived.mlflow_run_id,
    }
    if record is None:
        doc["script"] = launched.script
    return doc


@with_job_flags
def submit(
    job: JobFlags,
    dry_run: Annotated[bool, _DRY] = False,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Render the sbatch script for a training job, submit it and record it.

    \b
    Examples:
      hyperlaunch submit --nodes 2 --model qwen3_0_6b --max-steps 100 -- --lr 3e-4
      hyperlaunch submit --nodes 4 --script train.py -- --lr 3e-4    # your own script
      hyperlaunch submit --nodes 2 --module mypkg.train --name exp1
      hyperlaunch submit -N 2 --script run_clm.py -- --output_dir out '{resume?--resume_from_checkpoint {resume}}'
      hyperlaunch submit -N 2 -m qwen3_0_6b --tracker tensorboard --tracker wandb --env WANDB_API_KEY
    """
    import functools
    import os

    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.runs.launch import (
        continues_from,
        data_unseen,
        launch,
        module_unseen,
        run_dir_shared,
        wandb_unkeyed,
    )

    cluster_env = functools.cache(slurm_env)  # asked once, whether the plan needs it or not
    plan = job.build(cluster_env)
    env = {} if dry_run else cluster_env()
    decided = tuple((d.name, d.source) for d in plan.decided)
    launched = launch(plan.spec, env=env, dry_run=dry_run, decided=decided, notify=out.note)
    show_settings(plan)  # once submitted: a refusal stays one line
    continued = continues_from(plan.spec)
    if continued:
        out.note(continued)
    for unseen in (run_dir_shared(plan.spec), data_unseen(plan.spec), module_unseen(plan.spec), wandb_unkeyed(plan.spec, os.environ)):
        if unseen:
            out.warn(unseen)
    _report(launched, plan.spec, as_json, "submitted")


def resume(
    job_id: Annotated[
        str | None, typer.Argument(help="Job to resume, or one element of a sweep (12_3) [default: the newest recorded job, of --model if given].")
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", "--name", help="Resume the newest job of this model (or script job's --name).")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", "-N", help="Run on a different number of nodes (DCP reshards).")] = None,
    exclude_failed: Annotated[bool, typer.Option("--exclude-failed", help="Keep Slurm off the nodes that failed that job.")] = False,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Train to this many steps instead (a sweep: its completed elements train further too).")
    ] = None,
    after_end: Annotated[
        bool,
        typer.Option(
            "--after-end",
            help="If the job is still pending or running, queue the new one to start once it ends "
            "(sbatch --dependency=afterany:JOB); the checkpoint is chosen when the new one starts.",
        ),
    ] = False,
    refresh_code: Annotated[
        bool,
        typer.Option("--refresh-code", help="A --script/--module job: take a new snapshot of its project as it is now [default: run the submitted code again]."),
    ] = False,
    dry_run: Annotated[bool, _DRY] = False,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Submit a recorded job again; the trainer continues from the model's -latest checkpoint.

    Refuses (a bundled-trainer job) when its checkpoint folder holds no complete checkpoint of the model, and
    while the job is still pending or running (unless --after-end).

    \b
    Examples:
      hyperlaunch resume 42 --exclude-failed        # off the nodes that failed it
      hyperlaunch resume 42 --max-steps 2000        # train further than it was told
      hyperlaunch resume 42 --after-end             # queue behind a job still running
      hyperlaunch resume 70                         # a sweep: its elements that did not complete
      hyperlaunch resume 70_3                       # one element of it
    """
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.runs.job_guard import resume_dependency
    from hyperlaunch.runs.launch import launch, newest_record, plan_resume
    from hyperlaunch.runs.sweeps import split_task

    record, element = split_task(job_id, slurm_env) if job_id is not None else (newest_record(model), None)
    if job_id is None:
        # It may be another project's: say which before anything is submitted.
        out.note(f"no job named: the newest recorded{f' of {model}' if model else ''} is job {record.job_id}"
                 f" ({record.spec.what}, checkpoints in {record.spec.output.checkpoint_dir})")
    env = slurm_env(record.slurm_conf)
    if record.sweep is not None:
        _resume_sweep(record, env, element, nodes=nodes, max_steps=max_steps, refused={"--exclude-failed": exclude_failed, "--after-end": after_end, "--refresh-code": refresh_code}, dry_run=dry_run, as_json=as_json)
        return
    after_job = resume_dependency(record, after_end=after_end, env=env)
    if after_job is not None:
        out.note(f"job {record.job_id} is still in the queue: the new job starts once it ends")
    spec = plan_resume(
        record, nodes=nodes, max_steps=max_steps, exclude_failed=exclude_failed, env=env, after_job=after_job, notify=out.note,
        refresh_code=refresh_code,
    )
    added = [node for node in spec.cluster.exclude if node not in record.spec.cluster.exclude]
    if added:
        out.note(f"excluding nodes that failed job {record.job_id}: {', '.join(added)}")
    launched = launch(spec, env=env, resumed_from=record.job_id, dry_run=dry_run, decided=record.decided, notify=out.note)
    _report(launched, spec, as_json, f"resuming job {record.job_id} as", resumed_from=record.job_id)


def _resume_sweep(
    record: JobRecord, env: dict[str, str], element: int | None, *, nodes: int | None, max_steps: int | None, refused: dict[str, bool], dry_run: bool, as_json: bool,
) -> None:
    """A sweep again, as a new job array of the elements that did not complete (or of `element`
    alone): each follows its own -latest pointer."""
    from hyperlaunch.cli.sweep import report
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.runs import sweeps

    given = [flag for flag, on in refused.items() if on]
    if given:
        raise InvalidInput(f"{given[0]} does not apply to a sweep; resume {record.job_id} resubmits the elements that did not complete")
    indices = sweeps.to_resume(record, sweeps.elements(record, env=env), only=element, further=max_steps is not None)
    spec, chosen = sweeps.plan_resume(record, indices)
    changes: dict[str, object] = {name: value for name, value in (("nodes", nodes), ("max_steps", max_steps)) if value is not None}
    if changes:
        spec = spec.replace(**changes)
    launched = sweeps.launch_sweep(spec, chosen, env=env, dry_run=dry_run, resumed_from=record.job_id, decided=record.decided)
    report(launched, spec, chosen, as_json=as_json, verb=f"resuming sweep {record.job_id} as")
