"""A script job's checkpoints in its framework's own layout (hyperlaunch.core.checkpoint_layouts:
the Trainer's checkpoint-N, Lightning's .ckpt files, DCP step-N, a torch.save file), looked for
in its working folder and the job's checkpoint folder, so that a script that never calls the
runtime library still counts as progressing:

- while a round runs, a newer complete checkpoint is the attempt's progress record (the restart
  budget resets, as when the runtime library commits) and a `checkpoint_completed` event
  (`status` shows its step);
- at a round's start, where `<name>-latest` names nothing, the newest complete one is the resume
  path (HYPERLAUNCH_RESUME_FROM, `{resume}`), with a `resumed` event naming its layout."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hyperlaunch.core.checkpoint_layouts import OFF, Found, describe, newest
from hyperlaunch.core.metrics_records import METRICS_FILE, EventRecord, TrainerEvent, append_line, metrics_line
from hyperlaunch.core.protocol import write_progress
from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.supervisor.output import err

POLL_S = 5.0
"""How often a round's folders are looked through: a checkpoint every few minutes is the norm."""


class FrameworkCheckpoints:
    """The newest framework checkpoint an attempt has seen, and what it tells of it."""

    def __init__(self, options: SupervisorOptions, job: str, restart: int) -> None:
        self.layout = options.checkpoint_layout or OFF
        self.roots = [folder for folder in dict.fromkeys([options.work_dir, options.checkpoint_dir]) if folder]
        self.run_dir = Path(options.run_dir)
        self.job = job
        self.restart = restart
        self.seen: Found | None = None
        """The newest one known: at the attempt's start, then each new one."""
        self.next_look = 0.0
        if self.layout != OFF:
            self.seen = self._newest()

    @property
    def enabled(self) -> bool:
        return self.layout != OFF

    def _newest(self) -> Found | None:
        try:
            return newest(self.roots, self.layout)
        except OSError:
            return None

    def resume(self, round_: int) -> Found | None:
        """The checkpoint a round resumes from where `-latest` names none: the newest complete one."""
        if not self.enabled:
            return None
        found = self._newest()
        if found is not None:
            self._event(TrainerEvent.RESUMED, f"resuming from {describe(found)}", found, round_, source=found.layout)
        return found

    def poll(self, round_: int, *, now: bool = False) -> None:
        """Every POLL_S (at once with `now`): a newer complete checkpoint is this attempt's progress."""
        if not self.enabled or (not now and time.monotonic() < self.next_look):
            return
        self.next_look = time.monotonic() + POLL_S
        found = self._newest()
        if found is None or (self.seen is not None and found.order() <= self.seen.order()):
            return
        self.seen = found
        try:
            write_progress(self.run_dir, self.job, self.restart, found.step or 0)
        except OSError as error:
            err(f"hyperlaunch: cannot record the progress of {found.path}: {error.strerror or error}")
        err(f"hyperlaunch: the script completed a checkpoint: {describe(found)}")
        self._event(TrainerEvent.CHECKPOINT_COMPLETED, f"checkpoint {describe(found)}", found, round_)

    def _event(self, event: TrainerEvent, message: str, found: Found, round_: int, **more: Any) -> None:
        details = {"path": found.path, "layout": found.layout, **more}
        record = EventRecord(
            event=event.value, message=message, time=time.time(), step=found.step,
            job_id=self.job, restart=self.restart, round=round_, details=details,
        )
        try:
            append_line(self.run_dir, metrics_line(record))
        except OSError as error:
            err(f"hyperlaunch: cannot write {self.run_dir / METRICS_FILE}: {error.strerror or error}")
