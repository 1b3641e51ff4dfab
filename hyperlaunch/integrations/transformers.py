"""transformers' Trainer in a hyperlaunch job, one line in the script:

    from hyperlaunch.integrations.transformers import HyperlaunchCallback
    trainer = Trainer(..., callbacks=[HyperlaunchCallback()])

On top of what the job does for any Trainer script (its `checkpoint-N` counted as progress, the
newest handed to the next start through `{resume}`):

- Slurm's warning before the time limit, a preemption or scancel: the Trainer saves a checkpoint
  at the end of the step under way and stops, and the process ends asking for a requeue (no
  restart budget used); the next start resumes from that checkpoint.
- each logged step's numbers (loss, learning rate, grad norm) go into the run's metrics, which
  `status`, `plot` and the job's trackers read.

transformers is imported when HyperlaunchCallback is first named, not with this module."""

from __future__ import annotations

from typing import Any

from hyperlaunch import runtime
from hyperlaunch.integrations._lazy_class import LazyClass
from hyperlaunch.integrations._stop import agreed, numbers


def _build() -> type:
    from transformers import TrainerCallback

    class HyperlaunchCallback(TrainerCallback):
        """Save and stop on the job's stop signals, then ask for a requeue; log each step's numbers."""

        def __init__(self) -> None:
            self.stopping = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            runtime.should_save()  # its signal handlers installed from the first step on

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if not self.stopping and agreed(args.device):
                self.stopping = True
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            values = numbers(dict(logs or {}))
            if "loss" in values:  # a training step's (not evaluation's, not the run's summary)
                runtime.log(state.global_step, **values)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.stopping:
                runtime.requeue()

    return HyperlaunchCallback


__getattr__ = LazyClass(__name__, "HyperlaunchCallback", _build).attribute
