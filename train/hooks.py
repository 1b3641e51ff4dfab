"""Where code outside the trainer may act on a run: at its start and end, before each step,
between a checkpoint's shards and its completion marker, and once a checkpoint is complete.
The trainer runs with NO_HOOKS, which does nothing; the integration tests run it through
their own entry module (tests/support/fault_entry.py) with hooks that inject faults."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    import torch
    from torch import nn

    from .data import Batcher
    from .state import TrainState


class TrainerView(Protocol):
    """What hooks see of the trainer (loop.Trainer is one): read-only, no private parts."""

    @property
    def rank(self) -> int: ...

    @property
    def is_main(self) -> bool:
        """Rank 0: the rank that writes the run's shared files."""
        ...

    @property
    def device(self) -> torch.device: ...

    @property
    def run_dir(self) -> Path:
        """Where the run's metrics and records go (--run-dir)."""
        ...

    @property
    def model(self) -> nn.Module: ...

    @property
    def batcher(self) -> Batcher: ...


class TrainerHooks:
    """Subclass and override what you need; every method of the base does nothing."""

    def on_start(self, trainer: TrainerView, state: TrainState) -> None:
        """Before the first step of this process (after any resume), on every rank."""

    def before_step(self, step: int, rank: int) -> None:
        """Before optimizer step `step` (1-based) runs, on every rank."""

    def after_shards_written(self, step: int) -> None:
        """Every shard of checkpoint `step` is written and its `.metadata` completion marker
        is not (yet): the checkpoint is incomplete here."""

    def after_checkpoint(self, step: int) -> None:
        """Checkpoint `step` is complete and `-latest` names it, on every rank."""

    def on_end(self, trainer: TrainerView, state: TrainState) -> None:
        """After the last step and its checkpoint, on every rank (not after a stop signal)."""


NO_HOOKS = TrainerHooks()
