"""A memory snapshot written to the checkpoint folder as an ordinary checkpoint: what the job does
before its allocation ends and it goes back to the queue (the keepers end with the allocation),
so that the requeued job starts from the snapshot rather than from the last disk checkpoint.

Every rank's part holds its DCP data file; each part holds the save's `.metadata`, and rank 0's
the checkpoint's hyperlaunch.json (train/memory_snapshot.py). Written as the trainer writes a
checkpoint: the data files and hyperlaunch.json, then `.metadata` last (the checkpoint is whole
only once it exists), then the manifest of its files, then `<model>-latest` moves to it, and
the attempt's progress is recorded. A snapshot no newer than what the pointer names is left.

Standard library only, Python 3.8 or later: the supervisor runs it on the batch host."""

from __future__ import annotations

import os
from pathlib import Path

from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.checkpoint_pruning import remove_checkpoint
from hyperlaunch.core.memory_snapshots import KeeperRefused, Layout, read_part_files
from hyperlaunch.core.protocol import write_progress


def persist(
    step: int, sources: dict[str, str], taken: Layout, ckpt_dir: Path, model: str, *, run_dir: Path, job: str, restart: int,
) -> Path | None:
    """Write snapshot `step` (the keeper holding each node's parts: `sources`; the round that
    took it: `taken`) as `<ckpt_dir>/<model>-<step>steps` and point `<model>-latest` at it; the
    folder, or None where the pointer names that step or a later one already. KeeperRefused or
    OSError where a part cannot be read or written: the pointer has not moved."""
    pointed = rules.read_pointer(Path(ckpt_dir), model)
    pointed_step = rules.parse_step(pointed, model) if pointed else None
    if pointed_step is not None and pointed_step >= step:
        return None
    path = rules.checkpoint_path(Path(ckpt_dir), model, step)
    if os.path.lexists(path):
        remove_checkpoint(path)  # a folder of that name from a run that went further, or a killed save
    path.mkdir(parents=True)
    metadata = b""
    for ranks in taken.ranks_of.values():
        for rank in ranks:
            for name, data in read_part_files(sources, taken, step, rank).items():
                if name == rules.METADATA_FILE:
                    metadata = metadata or bytes(data)
                elif "/" not in name and name not in (".", ".."):
                    (path / name).write_bytes(data)
    if not metadata:
        raise KeeperRefused(f"no part of step {step} holds the snapshot's {rules.METADATA_FILE}")
    partial = path / f"{rules.METADATA_FILE}.partial"
    partial.write_bytes(metadata)
    os.replace(partial, path / rules.METADATA_FILE)
    integrity.write_manifest(path)
    rules.write_pointer(Path(ckpt_dir), model, path.name)
    write_progress(Path(run_dir), job, restart, step)
    return path
