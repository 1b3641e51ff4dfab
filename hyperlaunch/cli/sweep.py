"""`hyperlaunch sweep`: one training per point of a grid of trainer options, as one Slurm job array."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._job_flags import JobFlags, show_settings, with_job_flags
from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from hyperlaunch.job.spec import JobSpec
    from hyperlaunch.job.sweep import Sweep
    from hyperlaunch.runs.sweeps import SweepLaunch

_GRID = typer.Option(
    "--grid", metavar="GRID",
    help="KEY=V1,V2: a trainer option (your --script's own) and its values, e.g. lr=1e-4,3e-4 (repeatable: every combination runs).",
)
_GRID_FILE = typer.Option("--grid-file", metavar="FILE", help="The grid from a TOML file: a [grid] table, e.g. lr = [\"1e-4\", \"3e-4\"] and seed = [1, 2].")
_MAX_PARALLEL = typer.Option("--max-parallel", metavar="N", min=1, help="At most N elements run at once (sbatch --array=...%N) [default: as many as Slurm starts].")


@with_job_flags
def sweep(
    job: JobFlags,
    grid: Annotated[list[str] | None, _GRID] = None,
    grid_file: Annotated[Path | None, _GRID_FILE] = None,
    max_parallel: Annotated[int | None, _MAX_PARALLEL] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the elements and the sbatch script; submit nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document (job id, elements) instead of text.")] = False,
) -> None:
    """Train every combination of a grid of trainer options, as one Slurm job array: each
    element is a training of its own, named after its values (qwen3_0_6b-lr3e-4-seed1: its
    checkpoints, -latest pointer, run folder and tracker run). A lost node, crash or time limit
    requeues that element only, with the job's restart budget, spares and locks.

    \b
    Examples:
      hyperlaunch sweep --nodes 1 --model qwen3_0_6b --grid lr=1e-4,3e-4,1e-3 --grid seed=1,2 --max-parallel 2
      hyperlaunch sweep -N 2 -m qwen3_0_6b --grid-file sweep.toml -- --warmup-steps 100
      hyperlaunch sweep --script train.py --grid lr=1e-4,3e-4 --dry-run
      hyperlaunch status 42                 # the sweep's elements: state, step, loss, best validation loss
      hyperlaunch cancel 42_3               # one element
      hyperlaunch resume 42                 # the elements that did not complete
    """
    import functools

    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.job import sweep as rules
    from hyperlaunch.runs.sweeps import launch_sweep

    if grid and grid_file is not None:
        raise InvalidInput("--grid and --grid-file exclude each other: give the grid one way")
    cluster_env = functools.cache(slurm_env)
    plan = job.build(cluster_env)
    script_job = plan.spec.is_script_job
    parsed = rules.read_grid_file(grid_file, script_job=script_job) if grid_file is not None else rules.parse_grid(grid or [], script_job=script_job)
    members = rules.elements(parsed)
    chosen = rules.Sweep(members, tuple(e.index for e in members), max_parallel)
    env = {} if dry_run else cluster_env()
    decided = tuple((d.name, d.source) for d in plan.decided)
    launched = launch_sweep(plan.spec, chosen, env=env, dry_run=dry_run, decided=decided)
    show_settings(plan, trainings=len(chosen.runs))
    _say_continued(plan.spec, chosen)
    report(launched, plan.spec, chosen, as_json=as_json, verb="submitted")


def _say_continued(base: JobSpec, chosen: Sweep) -> None:
    """The elements whose `-latest` is already in the folder (an earlier sweep of the same grid
    there): each continues from it, as `submit` says of one job."""
    from hyperlaunch.job.sweep import element_spec
    from hyperlaunch.runs.launch import behind, continued_checkpoint

    rows = []
    for index in chosen.runs:
        spec = element_spec(base, chosen.element(index))
        found = continued_checkpoint(spec)
        if found is not None:
            pointed, step = found
            rows.append(f"{index}: {pointed}{behind(spec, step)}")
    if rows:
        start = "'-- --from-scratch'" if not base.is_script_job else "another --name"
        out.note_block(
            f"{len(rows)} element(s) continue from a checkpoint already in {base.output.checkpoint_dir}"
            f" (start over with {start}; a sweep of its own: another --checkpoint-dir):",
            rows,
        )


def report(launched: SweepLaunch, base: JobSpec, chosen: Sweep, *, as_json: bool, verb: str) -> None:
    """What `sweep` (and `resume` of a sweep) prints: the elements, then the job or the script."""
    from hyperlaunch.job.sweep import element_spec

    record = launched.record
    specs = {e.index: element_spec(base, e) for e in chosen.elements if e.index in chosen.runs}
    if as_json:
        out.json({
            "job_id": record.job_id if record is not None else None,
            "array": chosen.array,
            "log_dir": base.output.log_dir,
            "checkpoint_dir": base.output.checkpoint_dir,
            "elements": [
                {"task": f"{record.job_id}_{i}" if record is not None else None, "index": i, "name": spec.derived.checkpoint_name,
                 "values": dict(chosen.element(i).values), "run_dir": spec.output.run_dir, "tracker_run_id": spec.derived.tracker_run_id}
                for i, spec in specs.items()
            ],
            **({"script": launched.rendered.script} if record is None else {}),
        })
        return
    width = max(len(spec.derived.checkpoint_name) for spec in specs.values())
    rows = [f"{i:>3}  {spec.derived.checkpoint_name.ljust(width)}  {' '.join(chosen.element(i).flags)}" for i, spec in specs.items()]
    if record is None:
        out.note_block(f"{len(specs)} element(s) (--array={chosen.array}):", rows)
        out.raw(launched.rendered.script)
        return
    out.text(f"{verb} sweep {record.job_id}: {len(specs)} x {base.what} on {base.nodes_text} each (--array={chosen.array})")
    for row in rows:
        out.text(f"  {row}")
    out.text(f"  logs:        {base.output.log_dir}/{base.job.job_name}_<element's job id>.out")
    out.text(f"  checkpoints: {base.output.checkpoint_dir} (<name>-latest for each)")
    out.text(f"  follow it:   hyperlaunch status {record.job_id}")
    out.text(f"               hyperlaunch logs {record.job_id}_{min(specs)} -f")
