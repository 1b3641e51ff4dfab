"""The checkpoint pointer as a training script meets it: what to resume from, and committing
a complete checkpoint (the pointer moves, the attempt's progress is recorded). The rules of
names, completeness and pruning are hyperlaunch.core.checkpoints'; the bundled trainer
(train/checkpointing.py) commits through `commit` too.

Standard library only, Python 3.8+."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.errors import CheckpointError
from hyperlaunch.runtime import records


def resume_path(ckpt_dir: Path, name: str) -> Path | None:
    """The complete checkpoint `<name>-latest` names, None when there is no pointer. Raises
    CheckpointError for a pointer that names garbage, another model's checkpoint or an
    incomplete one: resuming from the wrong state must never be a guess."""
    named = rules.read_pointer(Path(ckpt_dir), name)
    if named is None:
        return None
    path = Path(ckpt_dir) / named
    if not rules.is_complete(path):
        raise CheckpointError(f"{rules.pointer_path(ckpt_dir, name)} names {named}, which is not a complete checkpoint")
    return path


def commit(
    ckpt_dir: Path,
    name: str,
    path: Path,
    step: int,
    run_dir: Path,
    keep_last: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Path]:
    """Declare `path` (`<ckpt_dir>/<name>-<step>steps`, every rank's part written) complete:
    mark it so where DCP's `.metadata` is not there, point `<name>-latest` at it atomically,
    record the attempt's progress (so its requeue uses no restart budget), then keep only the
    newest `keep_last` checkpoints. Returns the checkpoints removed."""
    path = Path(path)
    expected = rules.checkpoint_path(Path(ckpt_dir), name, step)
    if path.absolute() != expected.absolute():
        raise CheckpointError(f"commit_checkpoint: step {step} of {name!r} is saved at {expected}, not {path}")
    if not path.is_dir():
        raise CheckpointError(f"commit_checkpoint: {path} is not a folder; save the checkpoint into it first")
    if not rules.is_complete(path):
        write_atomically(path / rules.COMMITTED_FILE, f"step={step}\n".encode())
    rules.write_pointer(Path(ckpt_dir), name, path.name)
    records.record_progress(Path(run_dir), step, environ)
    return rules.prune(Path(ckpt_dir), name, keep_last) if keep_last else []
