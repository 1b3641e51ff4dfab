"""What a training script calls inside a hyperlaunch job: where to save, what to resume from,
committing a checkpoint, the save signal, metrics and the hang watchdog, failing for good.

    from hyperlaunch import runtime

    start = runtime.resume_path()            # the checkpoint <name>-latest names, or None
    for step in range(first, steps + 1):
        ...
        runtime.log(step, loss=loss, tokens_per_s=tps)   # `status` shows them; feeds the watchdog
        if step % 100 == 0 or stop:              # stop: runtime.should_save(), agreed by all ranks
            path = runtime.checkpoint_path(step)
            with runtime.saving():               # a save may take longer than a step
                save(path)                       # every rank's part, e.g. dcp.save(state, checkpoint_id=path)
            runtime.commit_checkpoint(step, path)  # now <name>-latest names it
            if stop:
                runtime.requeue()                # exits; the job comes back and resumes from it

With `submit --memory-checkpoint-every N`, a failure costs at most N steps, not every step since
the last checkpoint: hand the state to the node's keeper after each step, and restore what a
restarted round is told to (docs/your-script.md#memory-snapshots):

    state = training_state()                     # what you give dcp.save (get_state_dict's dicts)
    first = runtime.restore_snapshot(state)      # loaded in place: its step; None: resume_path()
    ...
        runtime.snapshot(step, training_state()) # every N steps, on every rank; else returns at once

The contract (docs/your-script.md):
- Every function is safe to call on every rank; what only one process may write (the pointer,
  metrics, progress records) rank 0 writes (torchrun's RANK), the others skip.
- The job tells the script where things are in HYPERLAUNCH_CHECKPOINT_DIR, HYPERLAUNCH_RUN_DIR,
  HYPERLAUNCH_NAME and HYPERLAUNCH_RESUME_FROM (hyperlaunch.core.script_env); run outside a job,
  the library falls back to ./checkpoints, ./runs/<name> and the script's name.
- The save signal (Slurm's warning before the time limit, a preemption's TERM) is caught from
  the first call into the library on: call resume_path() early.
- Experiment trackers (`submit --tracker`): every log() and commit reaches them from rank 0
  (hyperlaunch.trackers); a missing tracker library fails the job at the first call, for good.
  The run is closed at the process's end, as a finished training unless the script raised,
  failed or requeued.
- Memory snapshots (snapshot, restore_snapshot) import torch, the rest of the library does not.
- A hang: once log() was called, a process that logs nothing for 10 times the median interval
  between its logs (at least 300 s; HYPERLAUNCH_HANG_TIMEOUT and HYPERLAUNCH_HANG_FLOOR, 0
  turns it off) prints every thread's stack and exits, and the job restarts as after a crash.

Standard library only, Python 3.8 or later: the job ships this package (inside the
supervisor's bundle) and puts it on the script's path, so a container image without
hyperlaunch installed can import it."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.metrics_records import TrainerEvent
from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE
from hyperlaunch.core.script_env import CHECKPOINT_DIR_ENV, NAME_ENV, RUN_DIR_ENV, SNAPSHOTS_ENV
from hyperlaunch.core.trackers import Ending
from hyperlaunch.core.trainer_failures import FailureKind, write_trainer_failure
from hyperlaunch.runtime import checkpoint, records
from hyperlaunch.runtime.signals import StopRequest, ignore_stop_signals
from hyperlaunch.runtime.watchdog import HangLimits, HangWatchdog, Phase

if TYPE_CHECKING:
    from hyperlaunch.runtime.snapshots import MemorySnapshots

__all__ = [
    "checkpoint_dir",
    "checkpoint_path",
    "commit_checkpoint",
    "fail",
    "is_main",
    "log",
    "name",
    "rank",
    "requeue",
    "restore_snapshot",
    "resume_path",
    "run_dir",
    "saving",
    "should_save",
    "snapshot",
]

HANG_TIMEOUT_ENV = "HYPERLAUNCH_HANG_TIMEOUT"
"""The watchdog's multiple of the median interval between logs (0: off), as the trainer's --hang-timeout."""
HANG_FLOOR_ENV = "HYPERLAUNCH_HANG_FLOOR"
"""Seconds between logs that never count as a hang, as the trainer's --hang-floor."""
_DEFAULT_HANG_TIMEOUT = 10.0
_DEFAULT_HANG_FLOOR = 300.0


def rank() -> int:
    """This process's global rank (torchrun's RANK; 0 when run alone)."""
    value = os.environ.get("RANK", "0")
    return int(value) if value.isdigit() else 0


def is_main() -> bool:
    """Rank 0: the process that writes the pointer, metrics and progress records."""
    return rank() == 0


def name() -> str:
    """The run's name (`submit --name`, default the script's stem): checkpoints are
    `<name>-<N>steps`, the pointer `<name>-latest`."""
    given = os.environ.get(NAME_ENV)
    if given:
        return given
    stem = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else ""
    return stem if stem and stem != "__main__" else "script"


def checkpoint_dir() -> Path:
    """The checkpoint folder every node shares (`submit --checkpoint-dir`)."""
    _session()
    return Path(os.environ.get(CHECKPOINT_DIR_ENV) or "checkpoints").absolute()


def run_dir() -> Path:
    """The run folder: metrics.jsonl and the records `status` reads."""
    return Path(os.environ.get(RUN_DIR_ENV) or os.path.join("runs", name())).absolute()


def checkpoint_path(step: int) -> Path:
    """Where to save the checkpoint after `step` steps: `<checkpoint_dir>/<name>-<step>steps`."""
    return rules.checkpoint_path(checkpoint_dir(), name(), step)


def resume_path() -> Path | None:
    """The complete checkpoint `<name>-latest` names, None on a fresh start. Raises
    hyperlaunch.core.errors.CheckpointError for a pointer that names something unusable."""
    return rules.pointed_checkpoint(checkpoint_dir(), name())


def commit_checkpoint(step: int, path: Path | str | None = None, keep_last: int | None = None) -> None:
    """Once every rank's part of checkpoint_path(step) is written (after dcp.save returns, or
    rank 0's torch.save): rank 0 points `<name>-latest` at it atomically and records the
    attempt's progress, so `status` shows the step and a requeue after it uses no restart
    budget; with `keep_last`, older checkpoints beyond that many are removed. A folder without
    DCP's `.metadata` is marked complete by this call. Other ranks return at once."""
    chosen = checkpoint_path(step) if path is None else Path(path)
    if is_main():
        checkpoint.commit(checkpoint_dir(), name(), chosen, step, run_dir(), keep_last)


def should_save() -> bool:
    """True once the save signal or a stop (preemption, scancel) reached this process: save,
    commit, then requeue(). Ranks may see it a moment apart: agree on it (an all-reduce of
    the flag, MAX) before acting on it."""
    return _session().stop.signal_name is not None


def requeue() -> NoReturn:
    """End this attempt after a committed save, asking to be requeued: the job goes back to the
    queue and resumes from the checkpoint (the save signal's cause: no restart budget used)."""
    ignore_stop_signals()
    _close_trackers(Ending.REQUEUED)
    if is_main():
        try:
            records.request_requeue(run_dir())
        except OSError as error:  # the exit code says it too (the supervisor reads both)
            print(f"hyperlaunch: cannot write the requeue request: {error}", file=sys.stderr, flush=True)
    _flush()
    raise SystemExit(REQUEUE_EXIT_CODE)


def log(step: int, **metrics: Any) -> None:
    """Metrics of `step` (loss, tokens_per_s, lr, ...: numbers): rank 0 prints them and adds
    them to metrics.jsonl, where `status` reads loss and tokens/s. On every rank, each call
    tells the hang watchdog a step went by."""
    session = _session()
    session.step_logged(step)
    if not is_main():
        return
    values = {key: _plain(value) for key, value in metrics.items()}
    shown = " | ".join(f"{key} {_shown(value)}" for key, value in values.items())
    print(f"step {step} | {shown}" if shown else f"step {step}", flush=True)
    records.append_record(run_dir(), {"type": "step", "step": step, **values, "time": time.time(), **records.job_tags()})
    if not session.closes_trackers and records.trackers(run_dir()) is not None:
        # Once the first step opened the trackers' runs: atexit calls the last registered
        # first, so this close comes before the trackers' own exit handlers (W&B's ends its service).
        atexit.register(_close_trackers_at_exit)
        session.closes_trackers = True


@contextlib.contextmanager
def saving() -> Iterator[None]:
    """Run a checkpoint save (or anything else long between two logs) under the watchdog's
    longer limit for saves."""
    watchdog = _session().watchdog
    if watchdog is None:
        yield
        return
    with watchdog.allowance(Phase.CHECKPOINT):
        yield
    watchdog.step_starts(_session().last_step + 1)


def snapshot(step: int, state: dict[str, Any]) -> bool:
    """Where the job keeps memory snapshots (`submit --memory-checkpoint-every N`) and `step` is
    a multiple of N: hand this rank's part of `state` (what you give dcp.save: a dict of
    Stateful objects and tensors, the same on every rank) to its node's keeper, which copies it
    to a peer node. Call it on every rank after every step (the ranks save together); True where
    a snapshot was taken. A keeper that cannot take it is told once in the metrics, and training
    goes on with the disk checkpoints."""
    snapshots = _session().snapshots()
    if snapshots is None or not snapshots.due(step):
        return False
    with saving():
        # Whole before it returns: a script may end (and destroy its process groups) right after.
        snapshots.take(step, state)
        snapshots.wait()
    return True


def restore_snapshot(state: dict[str, Any]) -> int | None:
    """Where this round was told to restore a memory snapshot (a restart inside the allocation,
    the snapshot newer than the checkpoint `<name>-latest` names): load it into `state` in place,
    as dcp.load would, and return its step; the next step is that step + 1. None otherwise:
    resume from resume_path() as usual. Call it on every rank, before the first step, with the
    same dict snapshot() is given. A snapshot persisted before a requeue is a DCP checkpoint of
    `state` that resume_path() names."""
    snapshots = _session().snapshots()
    if snapshots is None:
        return None
    from hyperlaunch.runtime.snapshots import told_to_restore

    restore = told_to_restore()
    if restore is None:
        return None
    step, sources, taken = restore
    snapshots.restore(step, sources, taken, state)
    records.EventLog(run_dir(), enabled=is_main()).event(
        TrainerEvent.RESUMED, f"resumed from step {step} (the memory snapshot)", step=step, source="memory",
    )
    return step


def fail(message: str, final: bool = True) -> NoReturn:
    """Stop on an error with `message` as the reason `status` shows. final=True (bad input, a
    missing file): the job ends on this attempt and is never requeued; final=False: retried
    like a crash, within the restart budget. Exits the process (code 1)."""
    ignore_stop_signals()
    kind = FailureKind.SCRIPT_ERROR if final else FailureKind.SCRIPT_RETRY
    # The step in progress, once log() has counted any: the supervisor ends a job whose
    # retried failure comes back at the same step (TrainerFailure.repeats).
    step = _SESSION.last_step + 1 if _SESSION is not None and _SESSION.last_step else None
    written = write_trainer_failure(kind, message, rank(), step=step)
    if written is not None or is_main():  # one line in the log, not one a rank
        print(f"hyperlaunch: error: {message}", file=sys.stderr, flush=True)
    _close_trackers(Ending.FAILED)
    _flush()
    raise SystemExit(1)


class _Session:
    """The process's state: the stop request (its handlers installed once, in the main
    thread) and, from the first log() on, the hang watchdog."""

    def __init__(self) -> None:
        missing = records.trackers_missing()
        if missing:
            fail(missing, final=True)
        self.stop = StopRequest()
        self.watchdog: HangWatchdog | None = None
        self.last_step = 0
        self.closes_trackers = False
        self._snapshots: MemorySnapshots | None = None
        self._snapshots_read = False
        if _in_main_thread():
            self.stop.install()
            # Python gives handled signals back to their default action while it shuts down,
            # and USR2's ends the process: a save signal just after the script's last line
            # would turn a finished run into a failed step.
            atexit.register(ignore_stop_signals)

    def snapshots(self) -> MemorySnapshots | None:
        """This rank's memory snapshots where the job runs keepers (it says where in SNAPSHOTS_ENV), else None."""
        if not self._snapshots_read:
            self._snapshots_read = True
            if os.environ.get(SNAPSHOTS_ENV):  # torch: imported only where the job keeps snapshots
                from hyperlaunch.runtime.snapshots import MemorySnapshots

                snapshots = MemorySnapshots.of_this_round(rank(), records.EventLog(run_dir(), enabled=is_main()))
                self._snapshots = snapshots if snapshots is not None and snapshots.every else None
        return self._snapshots

    def step_logged(self, step: int) -> None:
        if self.watchdog is None:
            limits = _hang_limits()
            if limits is None:
                self.last_step = step
                return
            events = records.EventLog(run_dir(), enabled=is_main())
            self.watchdog = HangWatchdog(limits, rank=rank(), metrics=events)
        else:
            self.watchdog.step_done(step)
        self.last_step = step
        self.watchdog.step_starts(step + 1)


_SESSION: _Session | None = None


def _session() -> _Session:
    global _SESSION
    if _SESSION is None:
        _SESSION = _Session()
    return _SESSION


def _close_trackers(ending: Ending) -> None:
    """The trackers' runs end with this process (rank 0's), as it ended."""
    tracked = records.trackers(run_dir()) if is_main() else None
    if tracked is not None:
        tracked.close(ending)


def _close_trackers_at_exit() -> None:
    # Python sets sys.last_value for an exception that ended the program, before atexit runs;
    # requeue() and fail() have closed them already (a second close does nothing).
    _close_trackers(Ending.FAILED if hasattr(sys, "last_value") else Ending.FINISHED)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _hang_limits() -> HangLimits | None:
    multiple = _number(HANG_TIMEOUT_ENV, _DEFAULT_HANG_TIMEOUT)
    floor = _number(HANG_FLOOR_ENV, _DEFAULT_HANG_FLOOR)
    return HangLimits(multiple, floor) if multiple > 0 and floor > 0 else None


def _number(env: str, default: float) -> float:
    try:
        return float(os.environ.get(env) or default)
    except ValueError:
        return default


def _plain(value: object) -> object:
    """A value JSON can hold: a tensor or numpy scalar as its number (`loss=loss`, no .item()
    needed), anything else unknown as its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
