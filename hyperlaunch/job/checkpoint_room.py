"""Whether a bundled-trainer run's checkpoints fit where they go, said at submit: the trainer
refuses a save without room (disk-full, hyperlaunch.core.disk_space), so a folder too small
for the run is better known before the job waits in the queue and trains for hours.

A warning, not a refusal: the login node may see the folder on another filesystem than the
nodes do (a node-local path), and space may be freed before the run needs it."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.core import disk_space
from hyperlaunch.core.disk_space import CHECKPOINT_BYTES_PER_PARAM, EXPORT_BYTES_PER_PARAM, format_size
from hyperlaunch.core.models import ModelSpec
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.spec import JobSpec


def _count(args: tuple[str, ...], flag: str, default: int) -> int:
    value = targs.count_of(args, flag)
    return default if value is None else value


def warning(spec: JobSpec, model: ModelSpec, free: int | None = None, trainings: int = 1) -> str | None:
    """What the run keeps in its checkpoint folder at its fullest (a sweep's `trainings` each
    as much) against the folder's free space (`free`: asked of the filesystem when None); None
    when it fits or cannot be told."""
    if spec.job.max_steps is None or not spec.saves_checkpoints:
        return None
    args = spec.job.trainer_args
    every = _count(args, "--checkpoint-every", model.checkpoint_every)
    keep = _count(args, "--keep-last", 0)
    saves = disk_space.checkpoints_held(spec.job.max_steps, every, 0)
    held = disk_space.checkpoints_held(spec.job.max_steps, every, keep)
    each = CHECKPOINT_BYTES_PER_PARAM * model.num_params
    export = 0 if targs.NO_EXPORT in args else EXPORT_BYTES_PER_PARAM * model.num_params
    # The export follows the last save's pruning: the kept checkpoints and the export.
    after_last = (min(saves, keep) if keep > 0 else saves) * each + export
    needed = max(held * each, after_last) * trainings
    free = disk_space.free_bytes(Path(spec.output.checkpoint_dir)) if free is None else free
    if free is None or free >= needed:
        return None
    kept = f"--keep-last {keep} and the next, at once" if keep > 0 else "all kept: --keep-last 0"
    what = f"{held} checkpoint{'s' if held != 1 else ''} of about {format_size(each)} ({kept})"
    if export:
        what += f" and the {format_size(export)} {spec.derived.checkpoint_name}-final export"
    fits = free // each
    if trainings > 1:
        who, end = f"each of the sweep's {trainings} trainings keeps up to", "the sweep would end with disk-full"
    elif fits >= held:
        who, end = "the run keeps up to", "the final export would not fit"
    elif fits == 0:
        who, end = "the run keeps up to", "its first save would end it with disk-full"
    else:
        step = min((fits + 1) * every, spec.job.max_steps)
        who, end = "the run keeps up to", f"it would end with disk-full at its checkpoint of step {step}"
    fewer = "pass -- --keep-last N, " if keep == 0 and held > 1 else ""
    return (
        f"checkpoints: {who} {what}, {format_size(needed)} in all, and {spec.output.checkpoint_dir} has "
        f"{format_size(free)} free: {end} ({fewer}free space or choose another --checkpoint-dir)"
    )
