"""Checkpoint folders as the trainer leaves them, laid out by the hyperlaunch.core.checkpoints rules:
a step's folder (complete once its `.metadata` is there) and the `<model>-latest` pointer."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.core.checkpoints import METADATA_FILE, checkpoint_path, pointer_path


def make_checkpoint(root: Path, model: str, step: int, *, complete: bool = True, payload: int = 100) -> Path:
    path = checkpoint_path(root, model, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"x" * payload)
    if complete:
        (path / METADATA_FILE).write_bytes(b"m" * 10)
    return path


def point(root: Path, model: str, name: str) -> None:
    pointer_path(root, model).write_text(name + "\n")
