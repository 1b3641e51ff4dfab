"""`--export-every N`: a Hugging Face copy of every N-th checkpoint, written by rank 0 in a
background thread once the checkpoint is complete, so training goes on meanwhile.

The thread reads the checkpoint from disk (train/hf_export.py), never the live model, so it
needs no collective and no copy of the weights. The one thing training waits for: before the
next checkpoint moves the pointer and prunes (--keep-last), a previous export still reading
is finished, so pruning never removes a checkpoint under it; that wait is the export's
blocked time, recorded with its event."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Any

from hyperlaunch.core import hf_exports
from hyperlaunch.core.metrics_records import TrainerEvent

from .hf_export import Exported, export_checkpoint
from .metrics import MetricsLog, warn


class PeriodicExport:
    def __init__(self, *, every: int, ckpt_dir: Path, name: str, hf_config: Any, tokenizer: Any, metrics: MetricsLog, enabled: bool) -> None:
        self.every = every
        self.ckpt_dir = Path(ckpt_dir)
        self.name = name
        self.hf_config = hf_config
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.enabled = enabled and every > 0
        self._thread: threading.Thread | None = None
        self._step = 0
        self._started = 0.0
        self._result: Exported | BaseException | None = None

    def after_commit(self, step: int, checkpoint: Path) -> None:
        """A checkpoint is complete: export it in the background when its step is due."""
        if not self.enabled or step % self.every:
            return
        self.finish()  # one export at a time (usually long done)
        self._step, self._started, self._result = step, time.perf_counter(), None
        output = hf_exports.default_output(self.ckpt_dir, self.name, step)
        config = copy.deepcopy(self.hf_config)

        def run() -> None:
            try:
                self._result = export_checkpoint(checkpoint, output, hf_config=config, tokenizer=self.tokenizer, overwrite=True)
            except BaseException as err:  # noqa: BLE001 - reported on the training thread
                self._result = err

        self._thread = threading.Thread(target=run, name=f"hf-export-{step}", daemon=True)
        self._thread.start()

    def poll(self) -> None:
        """Report an export that has ended (non-blocking)."""
        if self._thread is not None and not self._thread.is_alive():
            self.finish()

    def finish(self) -> float:
        """Wait for an export in flight and report it; the seconds training waited."""
        if self._thread is None:
            return 0.0
        waited = time.perf_counter()
        self._thread.join()
        blocked = time.perf_counter() - waited
        self._thread, result = None, self._result
        if isinstance(result, Exported):
            self.metrics.event(
                TrainerEvent.EXPORTED, f"exported step {result.step} as a Hugging Face model to {result.output}",
                step=result.step, path=str(result.output), seconds=result.seconds, bytes=result.bytes, blocked_s=blocked,
            )
        elif result is not None:
            warn(f"--export-every: exporting step {self._step} failed ({type(result).__name__}: {result}); training goes on")
        return blocked
