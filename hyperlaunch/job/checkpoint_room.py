"""Whether a bundled-trainer run's checkpoints fit where they go, said at submit: the trainer
refuses a save without room (disk-full, hyperlaunch.core.disk_space), so a folder too small
for the run is better known before the job waits in the queue and trains for hours.

A warning, not a refusal: the login node may see the folder on another filesystem than the
nodes do (a node-local path), and space may be freed before the run needs it."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.core import disk_space
from hyperlaunch.core.disk_space import CHECKPOINT_BYTES_PER_PARAM, EXPORT_BYTES_PER_PARAM, size_text
from hyperlaunch.core.models import ModelSpec
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.spec import JobSpec


def _int_flag(args: tuple[str, ...], flag: str, default: int) -> int:
    value = targs.value_of(args, flag)
    return int(value) if value is not None and value.isdigit() else default


def warning(spec: JobSpec, model: ModelSpec, free: int | None = None) -> str | None:
    """What the run writes into its checkpoint folder at its fullest against the folder's free
    space (`free`: asked of the filesystem when None); None when it fits or cannot be told."""
    if spec.max_steps is None:
        return None
    args = spec.trainer_args
    every = _int_flag(args, "--checkpoint-every", model.checkpoint_every)
    keep = _int_flag(args, "--keep-last", 0)
    held = disk_space.checkpoints_held(spec.max_steps, every, keep)
    each = CHECKPOINT_BYTES_PER_PARAM * model.num_params
    export = 0 if "--no-export" in args else EXPORT_BYTES_PER_PARAM * model.num_params
    needed = held * each + export
    free = disk_space.free_bytes(Path(spec.checkpoint_dir)) if free is None else free
    if free is None or free >= needed:
        return None
    kept = f"--keep-last {keep} keeps {keep} and the next" if keep > 0 else "all kept: --keep-last 0"
    what = f"{held} checkpoint{'s' if held != 1 else ''} of about {size_text(each)} ({kept})"
    if export:
        what += f" and the {size_text(export)} {spec.checkpoint_name}-final export"
    fits = free // each
    if fits >= held:
        end = "the final export would not fit"
    elif fits == 0:
        end = "its first save would end it with disk-full"
    else:
        end = f"it would end with disk-full at its checkpoint of step {(fits + 1) * every}"
    fewer = "pass -- --keep-last N, " if keep == 0 and held > 1 else ""
    return (
        f"checkpoints: the run writes {what}, {size_text(needed)} in all, and {spec.checkpoint_dir} has "
        f"{size_text(free)} free: {end} ({fewer}free space or choose another --checkpoint-dir)"
    )
