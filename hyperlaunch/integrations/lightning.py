"""Lightning in a hyperlaunch job, one line in the script:

    from hyperlaunch.integrations.lightning import HyperlaunchCallback
    trainer = L.Trainer(..., callbacks=[checkpoints, HyperlaunchCallback()])

On top of what the job does for any Lightning script (its `.ckpt` files counted as progress, the
newest handed to the next start through `{resume}`, torchrun's ranks for its world):

- Slurm's warning before the time limit, a preemption or scancel: the step under way ends, a
  checkpoint `epoch=E-step=S.ckpt` is saved beside the ModelCheckpoint's (the trainer's default
  folder where it has none), training stops, and the process ends asking for a requeue (no
  restart budget used); the next start resumes from it.
- each step's logged numbers (`self.log(...)`, the loss) go into the run's metrics, which
  `status`, `plot` and the job's trackers read.

Lightning (`lightning`, else `pytorch_lightning`) is imported when HyperlaunchCallback is first
named, not with this module."""

from __future__ import annotations

import os
from typing import Any

from hyperlaunch import runtime
from hyperlaunch.integrations._lazy_class import LazyClass
from hyperlaunch.integrations._stop import agreed, numbers


def _callback_base() -> type:
    try:
        from lightning.pytorch import Callback

        return Callback
    except ImportError:  # the older package name
        import pytorch_lightning

        return pytorch_lightning.Callback


def stop_checkpoint_path(trainer: Any) -> str:
    """Where the stop's checkpoint goes: the ModelCheckpoint's folder, else the trainer's own."""
    folder = getattr(trainer.checkpoint_callback, "dirpath", None) or os.path.join(trainer.default_root_dir, "checkpoints")
    return os.path.join(folder, f"epoch={trainer.current_epoch}-step={trainer.global_step}.ckpt")


def _build() -> type:
    class HyperlaunchCallback(_callback_base()):  # type: ignore[misc]
        """Save and stop on the job's stop signals, then ask for a requeue; log each step's numbers."""

        def __init__(self) -> None:
            super().__init__()
            self.stopping = False

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            runtime.should_save()  # its signal handlers installed from the first step on

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            values = numbers(dict(trainer.callback_metrics))
            if isinstance(outputs, dict) and "loss" in outputs:
                values.update(numbers({"loss": outputs["loss"]}))
            if values:
                runtime.log(trainer.global_step, **values)
            if not self.stopping and agreed(pl_module.device):
                self.stopping = True
                trainer.save_checkpoint(stop_checkpoint_path(trainer))
                trainer.should_stop = True

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self.stopping:
                runtime.requeue()

    return HyperlaunchCallback


__getattr__ = LazyClass(__name__, "HyperlaunchCallback", _build).attribute
