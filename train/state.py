"""The training progress a checkpoint carries, apart from the modules that save, run and
observe it (checkpointing, loop, hooks), so none of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainState:
    """Progress that must survive a restart, in global terms (independent of world size)."""

    step: int = 0
    tokens_seen: int = 0
    samples_consumed: int = 0
