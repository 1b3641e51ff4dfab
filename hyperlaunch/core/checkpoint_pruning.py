"""Which checkpoints keeping only a model's newest N removes (the trainer's --keep-last, a
script's commit_checkpoint(keep_last=...), `hyperlaunch checkpoints --prune N`), and their
removal: markers first, so a removal cut short never leaves a checkpoint that looks complete.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hyperlaunch.core.checkpoints import COMMITTED_FILE, METADATA_FILE, CheckpointInfo, list_checkpoints


def prunable(ckpt_dir: Path, model: str, keep_last: int) -> list[CheckpointInfo]:
    """What keeping only the newest `keep_last` complete checkpoints of `model` removes.

    Never the one the pointer names, nor incomplete ones newer than the newest complete
    checkpoint (an async save may still be writing it); incomplete leftovers older than that
    (from a killed save) go. `keep_last` <= 0 keeps everything.
    """
    if keep_last <= 0:
        return []
    infos = list_checkpoints(ckpt_dir, model)
    complete = [info for info in infos if info.complete]
    keep = {info.path for info in complete[-keep_last:]}
    keep |= {info.path for info in infos if info.is_latest}
    newest_step = complete[-1].step if complete else -1
    return [info for info in infos if info.path not in keep and (info.complete or info.step < newest_step)]


def remove_checkpoint(path: Path, ignore_errors: bool = False) -> None:
    """Delete a checkpoint folder, its completeness markers first: a removal that stops half way
    (a permission, a node lost) leaves an incomplete checkpoint, never one that looks complete
    and fails to load. A checkpoint that is a link to a folder elsewhere loses the link only:
    its markers, through the link, are the target's."""
    if os.path.islink(path):
        try:
            os.unlink(path)
        except OSError:
            if not ignore_errors:
                raise
        return
    for marker in (METADATA_FILE, COMMITTED_FILE):
        try:
            (path / marker).unlink()
        except FileNotFoundError:
            pass
        except OSError:
            if not ignore_errors:
                raise
    shutil.rmtree(path, ignore_errors=ignore_errors)


def prune(ckpt_dir: Path, model: str, keep_last: int) -> list[Path]:
    """Delete what `prunable` names; returns the folders removed."""
    removed = []
    for info in prunable(ckpt_dir, model, keep_last):
        remove_checkpoint(info.path, ignore_errors=True)
        removed.append(info.path)
    return removed
