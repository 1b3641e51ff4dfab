"""The bundled trainer's memory snapshots (issue 48): the checkpoint's own state, taken and
restored through the runtime library's snapshots (hyperlaunch.runtime.snapshots), with the
checkpoint's hyperlaunch.json in rank 0's part, so that a snapshot persisted before a requeue
(hyperlaunch.supervisor.snapshot_persist) is a checkpoint like any other."""

from __future__ import annotations

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.memory_snapshots import Layout
from hyperlaunch.runtime.snapshots import MemorySnapshots

from .checkpointing import Checkpointer
from .state import TrainState


class TrainerSnapshots:
    """Snapshots of the trainer's state every `snapshots.every` steps, and the restore of one."""

    def __init__(self, checkpointer: Checkpointer, snapshots: MemorySnapshots) -> None:
        self.checkpointer = checkpointer
        self.snapshots = snapshots

    def due(self, step: int) -> bool:
        return self.snapshots.due(step)

    def take(self, train: TrainState) -> float:
        """Start the snapshot of the state at `train.step`; the seconds training was held. The
        copy goes on beside the next step's forward and backward: before_update() before the
        optimizer's."""
        info = {rules.INFO_FILE: rules.info_text(self.checkpointer.info(train.step)).encode()}
        return self.snapshots.take(train.step, self.checkpointer.state(train), info, overlap_copy=True)

    def before_update(self) -> None:
        self.snapshots.before_update()

    def wait(self) -> None:
        """Until the snapshot in flight is with the keeper: every rank, before the training ends."""
        self.snapshots.wait()

    def close(self) -> None:
        self.snapshots.close()

    def restore(self, step: int, sources: dict[str, str], taken: Layout) -> TrainState:
        """Load snapshot `step` (`taken`: the layout of the round that took it; `sources`: the
        keeper that holds each of its nodes' parts)."""
        state = self.checkpointer.empty_state()
        with self.snapshots.reader(step, sources, taken, state) as reader:
            return self.checkpointer.load_state(reader, state)
