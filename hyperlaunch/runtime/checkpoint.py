"""Committing a complete checkpoint as a training script does it (the pointer moves, the
attempt's progress is recorded). The rules of names, completeness and what the pointer names
are hyperlaunch.core.checkpoints', pruning's hyperlaunch.core.checkpoint_pruning's; the bundled trainer (train/checkpointing.py) commits
through `commit` too.

Standard library only, Python 3.8+."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core import checkpoint_pruning
from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.errors import CheckpointError
from hyperlaunch.runtime import records


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
    mark it so where DCP's `.metadata` is not there, record its files (their sizes, and the
    small ones' checksums: hyperlaunch.core.checkpoint_integrity, which tells a torn checkpoint
    from a whole one before it is loaded), point `<name>-latest` at it atomically,
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
    integrity.write_manifest(path)
    rules.write_pointer(Path(ckpt_dir), name, path.name)
    records.record_progress(Path(run_dir), step, environ)
    return checkpoint_pruning.prune(Path(ckpt_dir), name, keep_last) if keep_last else []
