"""`hyperlaunch submit` and `hyperlaunch resume`: render the job's script and hand it to Slurm."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._job_flags import JobFlags, with_job_flags

if TYPE_CHECKING:
    from hyperlaunch.jobs import JobRecord

_JSON = typer.Option("--json", help="Print one JSON document (job id, paths) instead of text.")
_DRY = typer.Option("--dry-run", help="Print the sbatch script and submit nothing.")


def _report(record: JobRecord, as_json: bool, verb: str) -> None:
    out, err = record.log_paths
    if as_json:
        doc = {
            "job_id": record.job_id,
            "model": record.spec.model,
            "nodes": record.spec.nodes,
            "log": str(out),
            "err": str(err),
            "checkpoint_dir": record.spec.checkpoint_dir,
            "run_dir": record.spec.run_dir,
            "resumed_from": record.resumed_from,
        }
        typer.echo(json.dumps(doc))
        return
    typer.echo(f"{verb} job {record.job_id}: {record.spec.model} on {record.spec.nodes} node(s)")
    typer.echo(f"  log:         {out}")
    typer.echo(f"  checkpoints: {record.spec.checkpoint_dir}")
    typer.echo(f"  follow it:   hyperlaunch status {record.job_id}   |   hyperlaunch logs {record.job_id} -f")


@with_job_flags
def submit(
    job: JobFlags,
    dry_run: Annotated[bool, _DRY] = False,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Render the sbatch script for a training job, submit it and record it.

    Example: hyperlaunch submit --nodes 2 --model qwen3_0_6b --max-steps 100 -- --lr 3e-4
    """
    from hyperlaunch.render import render_sbatch

    spec = job.build()
    script = render_sbatch(spec)
    if dry_run:
        typer.echo(script, nl=False)
        return
    from hyperlaunch.slurm_env import slurm_environment
    from hyperlaunch.submission import submit as submit_job

    record = submit_job(spec, script, env=slurm_environment())
    _report(record, as_json, "submitted")


_RESUME_DROPPED_ARGS = ("--from-scratch",)
_RESUME_DROPPED_WITH_VALUE = ("--resume-from",)


def _resume_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """The trainer resumes from -latest by itself; arguments that say otherwise are dropped."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _RESUME_DROPPED_ARGS or any(arg.startswith(f"{flag}=") for flag in _RESUME_DROPPED_WITH_VALUE):
            continue
        if arg in _RESUME_DROPPED_WITH_VALUE:
            skip = True
            continue
        kept.append(arg)
    return tuple(kept)


def resume(
    job_id: Annotated[str | None, typer.Argument(help="Job to resume [default: the newest recorded job, of --model if given].")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Resume the newest job of this model.")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", "-N", help="Run on a different number of nodes (DCP reshards).")] = None,
    exclude_failed: Annotated[bool, typer.Option("--exclude-failed", help="Keep Slurm off the nodes that failed that job.")] = False,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Train to this many steps instead.")] = None,
    dry_run: Annotated[bool, _DRY] = False,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Submit a recorded job again; the trainer continues from the model's -latest checkpoint.

    Refuses when the job's checkpoint folder holds no complete checkpoint of the model.
    Example: hyperlaunch resume 42 --exclude-failed
    """
    from pathlib import Path

    from hyperlaunch import checkpoints, jobs
    from hyperlaunch.errors import CheckpointError, JobNotFound
    from hyperlaunch.job_status import checkpoint_model_name, collect
    from hyperlaunch.render import render_sbatch
    from hyperlaunch.slurm_env import slurm_environment
    from hyperlaunch.submission import submit as submit_job

    if job_id is not None:
        record = jobs.load(job_id)
    else:
        found = jobs.recent(limit=1, model=model)
        if not found:
            raise JobNotFound("no recorded job" + (f" of model {model}" if model else ""), hint="submit one first")
        record = found[0]
    name = checkpoint_model_name(record)
    ckpt_dir = Path(record.spec.checkpoint_dir)
    if checkpoints.newest_complete(ckpt_dir, name) is None:
        raise CheckpointError(
            f"job {record.job_id} has no complete checkpoint of {name} in {ckpt_dir}; nothing to resume from",
            hint="submit it again to start from scratch",
        )
    changes: dict[str, object] = {"trainer_args": _resume_args(record.spec.trainer_args)}
    if nodes is not None:
        changes["nodes"] = nodes
    if max_steps is not None:
        changes["max_steps"] = max_steps
    env = slurm_environment(record.slurm_conf)
    if exclude_failed:
        bad = list(collect([record], env=env)[0].failed_nodes)
        changes["exclude"] = tuple(dict.fromkeys([*record.spec.exclude, *bad]))
        if bad:
            typer.echo(f"excluding nodes that failed job {record.job_id}: {', '.join(bad)}", err=True)
    spec = record.spec.replace(**changes)
    script = render_sbatch(spec)
    if dry_run:
        typer.echo(script, nl=False)
        return
    new = submit_job(spec, script, env=env, resumed_from=record.job_id)
    _report(new, as_json, f"resuming job {record.job_id} as")

