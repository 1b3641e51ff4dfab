"""The hang watchdog: a trainer that stops making steps fails like a crash, with its Python
stacks in the log, long before the process group's 30-minute timeout (kept as a last resort).

Every rank has its own watchdog, a daemon thread waiting for a deadline the loop sets. Before
each step, and before each checkpoint save or validation pass, the loop arms it with that
phase's limit; with M = --hang-timeout and F = --hang-floor, in seconds:

- a step: max(F, M x the median of this process's last 20 step durations);
- a step while no duration is known yet (the first two steps of a process: start-up of the
  loop, compile, the first batches; the first is never counted, it is all warm-up): 3 F;
- a checkpoint save, or a validation pass: max(3 F, M x this process's last duration of the
  same); the step right after a save gets the save's limit too (an async save may still be
  copying the state it waits for).

A step's duration runs from its arming to its end (the step's last all-reduce), so every rank
measures nearly the same durations and their deadlines fall within moments of each other.
When a deadline passes, the watchdog writes the failure record (FailureKind.HANG: retried like
a crash) naming the last completed step, the one in progress, the seconds waited and the
limit; prints a header (`hyperlaunch: hang watchdog: rank 1 on node2: ...`) and every thread's
Python stack on stderr in one write; on rank 0 adds a `hang` event to metrics.jsonl; waits
EXIT_GRACE_S, so that the other ranks, blocked in a collective on the stuck one, dump their
stacks too before its exit fails their collectives; and exits HANG_EXIT_CODE without any
cleanup. torchrun then sees a failed worker, and the supervisor retries it like a crash.

A main thread stuck in C code holding the GIL starves the watchdog thread: faulthandler's own
timer, armed BACKSTOP_MARGIN_S to twice that after the deadline, then prints `Timeout
(h:mm:ss)!` and every thread's stack and exits 1 (no failure record: that needs the GIL). It
is re-armed only when the deadline leaves that window, since each arming starts a thread.

Not watched: what runs before the loop (data preparation, model build, checkpoint load) and
after it (export, shutdown); their collectives keep the process group's timeout. Cheap by
design: no collective, one thread for the process's life, and arming takes a lock and wakes
the thread only when the deadline moves earlier."""

from __future__ import annotations

import contextlib
import enum
import faulthandler
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from hyperlaunch.core.metrics_records import TrainerEvent
from hyperlaunch.core.trainer_failures import FailureKind, write_trainer_failure


class EventSink(Protocol):
    """Where the watchdog records its `hang` event: the trainer's MetricsLog, the runtime's EventLog."""

    def event(self, event: TrainerEvent, message: str, *, step: int | None = None, **details: Any) -> None: ...

HANG_EXIT_CODE = 124
"""A rank's exit code after its watchdog fired (as timeout(1) exits when time runs out)."""
HISTORY = 20
"""Step durations the median is taken over."""
LONG_FACTOR = 3.0
"""Floors given to warm-up steps, checkpoint saves and validation passes at the least."""
EXIT_GRACE_S = 2.0
"""Seconds a rank that fired waits before exiting, for the other ranks' dumps. Their deadlines
fall within milliseconds of its own (armed after the same collective) and each dump is one
write, so 2 s is ample, also on a loaded node; each second here is a second of every GPU of the
job (it was 5 s: a fifth of a hang's cost from the last step to the next, measured on the dev
cluster with a 15 s floor)."""
BACKSTOP_MARGIN_S = 60.0
_MAX_WAIT_S = 3600.0  # the thread re-checks at least hourly: threading refuses huge timeouts
_MAX_BACKSTOP_S = 1e6  # faulthandler refuses timestamps past time_t; a limit that far is off


class Phase(str, enum.Enum):
    """What the loop is doing under the deadline."""

    STEP = "step"
    CHECKPOINT = "checkpoint"
    VALIDATION = "validation"


_WAITING_FOR = {
    Phase.STEP: "no step completed for",
    Phase.CHECKPOINT: "the checkpoint save has run for",
    Phase.VALIDATION: "the validation pass has run for",
}


class HangLimits:
    """The limits rule of the module docstring, fed with this process's durations."""

    def __init__(self, multiple: float, floor: float, history: int = HISTORY) -> None:
        self.multiple = multiple
        self.floor = floor
        self._steps: deque[float] = deque(maxlen=history)
        self._last: dict[Phase, float] = {}
        self._steps_seen = 0
        self._saved_since_step = False

    def limit(self, phase: Phase) -> float:
        """Seconds the next `phase` may take."""
        long = LONG_FACTOR * self.floor
        if phase is not Phase.STEP:
            return max(long, self.multiple * self._last.get(phase, 0.0))
        step = max(self.floor, self.multiple * statistics.median(self._steps)) if self._steps else long
        return max(step, self.limit(Phase.CHECKPOINT)) if self._saved_since_step else step

    def record(self, phase: Phase, seconds: float) -> None:
        """A `phase` that finished in `seconds`."""
        if phase is Phase.STEP:
            self._steps_seen += 1
            if self._steps_seen > 1:
                self._steps.append(seconds)
            self._saved_since_step = False
        else:
            self._last[phase] = seconds
            self._saved_since_step |= phase is Phase.CHECKPOINT


@dataclass(frozen=True)
class Hang:
    """What a deadline that passed was for: the failure record's and the header's words."""

    phase: Phase
    last_step: int
    """The last step this process completed."""
    in_progress: int | None
    """The step being run, for Phase.STEP."""
    waited_s: float
    limit_s: float
    rank: int
    host: str

    def what(self) -> str:
        doing = f" (step {self.in_progress} in progress)" if self.in_progress is not None else ""
        return (
            f"{_WAITING_FOR[self.phase]} {_seconds(self.waited_s)} s (limit {_seconds(self.limit_s)} s) "
            f"after step {self.last_step}{doing}"
        )

    def message(self) -> str:
        """The failure record's line."""
        return f"hang: {self.what()}; rank {self.rank} on {self.host}; stacks of every rank are in the log"

    def header(self) -> str:
        """The line above this rank's stacks in the log."""
        return f"hyperlaunch: hang watchdog: rank {self.rank} on {self.host}: {self.what()}; this process's Python stacks follow"


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def dump_stacks(header: str) -> None:
    """`header`, then every thread's Python stack, on stderr in one write: ranks that share a
    log (torchrun's workers inherit its stderr) dump at the same moment, and must not interleave."""
    try:
        with tempfile.TemporaryFile() as scratch:
            faulthandler.dump_traceback(file=scratch, all_threads=True)
            scratch.seek(0)
            data = header.encode("utf-8", "replace") + b"\n" + scratch.read()
    except OSError:  # no room for the scratch file: the same, in several writes
        print(header, file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        return
    sys.stderr.flush()
    while data:
        data = data[os.write(2, data) :]


class Backstop:
    """faulthandler's timer (dump every stack, exit 1), for a main thread that holds the GIL."""

    def __init__(
        self,
        margin_s: float = BACKSTOP_MARGIN_S,
        *,
        arm: Callable[..., None] = faulthandler.dump_traceback_later,
        cancel: Callable[[], None] = faulthandler.cancel_dump_traceback_later,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.margin_s = margin_s
        self._arm, self._cancel, self._clock = arm, cancel, clock
        self._fires_at: float | None = None

    def cover(self, deadline: float) -> None:
        """Fire between `margin_s` and twice that after `deadline` (monotonic seconds)."""
        if self._fires_at is not None and deadline + self.margin_s <= self._fires_at <= deadline + 2 * self.margin_s:
            return
        fires_at = deadline + 2 * self.margin_s
        timeout = fires_at - self._clock()
        if timeout > _MAX_BACKSTOP_S:
            self.cancel()
            return
        self._arm(max(timeout, 0.001), exit=True)
        self._fires_at = fires_at

    def cancel(self) -> None:
        if self._fires_at is not None:
            self._cancel()
            self._fires_at = None


class HangWatchdog:
    """One rank's watchdog. The loop calls step_starts/step_done around each step and runs
    checkpoint saves and validation inside allowance(); close() ends it. Built with limits
    None, every method does nothing (--hang-timeout 0)."""

    def __init__(
        self,
        limits: HangLimits | None,
        *,
        rank: int,
        host: str | None = None,
        metrics: EventSink | None = None,
        dump: Callable[[str], None] = dump_stacks,
        exit: Callable[[int], object] = os._exit,  # noqa: A002 - what it stands for
        backstop: Backstop | None = None,
        exit_grace_s: float = EXIT_GRACE_S,
    ) -> None:
        self.limits = limits
        self.rank = rank
        self.host = host or os.uname().nodename
        self.metrics = metrics
        self._dump, self._exit, self._grace = dump, exit, exit_grace_s
        self._backstop = backstop if backstop is not None else Backstop()
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._wakes_at = math.inf
        self._armed_at = 0.0
        self._phase = Phase.STEP
        self._limit = 0.0
        self._last_step = 0
        self._in_progress: int | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self.fired: Hang | None = None

    @property
    def enabled(self) -> bool:
        return self.limits is not None

    def step_starts(self, step: int) -> None:
        """Step `step` (1-based) begins: arm its limit."""
        if self.limits is not None:
            self._in_progress = step
            self._arm(Phase.STEP, self.limits.limit(Phase.STEP))

    def step_done(self, step: int) -> None:
        """Step `step` ended (its deadline stays until the next arming)."""
        if self.limits is not None:
            self.limits.record(Phase.STEP, time.monotonic() - self._armed_at)
            self._last_step, self._in_progress = step, None

    @contextlib.contextmanager
    def allowance(self, phase: Phase) -> Iterator[None]:
        """Run a checkpoint save or validation pass under its own, longer, limit."""
        if self.limits is None:
            yield
            return
        self._in_progress = None
        self._arm(phase, self.limits.limit(phase))
        started = self._armed_at
        yield
        self.limits.record(phase, time.monotonic() - started)

    def close(self) -> None:
        """Disarm for good (end of training, or an exception on its way out)."""
        with self._cond:
            self._closed = True
            self._deadline = None
            self._cond.notify()
            self._backstop.cancel()

    def _arm(self, phase: Phase, limit: float) -> None:
        now = time.monotonic()
        deadline = now + limit
        with self._cond:
            if self._closed:
                return
            self._phase, self._limit, self._armed_at, self._deadline = phase, limit, now, deadline
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="hyperlaunch-hang-watchdog", daemon=True)
                self._thread.start()
            elif deadline < self._wakes_at:  # a later one: the thread sees it when it wakes
                self._cond.notify()
            self._backstop.cover(deadline)

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._closed:
                    return
                now = time.monotonic()
                if self._deadline is not None and now >= self._deadline:
                    hang = Hang(
                        phase=self._phase, last_step=self._last_step, in_progress=self._in_progress,
                        waited_s=now - self._armed_at, limit_s=self._limit, rank=self.rank, host=self.host,
                    )
                    self._closed = True  # fires once
                    self._backstop.cancel()  # this thread reports it, with the record the timer cannot write
                    break
                self._wakes_at = self._deadline if self._deadline is not None else math.inf
                self._cond.wait(min(self._wakes_at - now, _MAX_WAIT_S))
        self._fire(hang)

    def _fire(self, hang: Hang) -> None:
        self.fired = hang
        message = hang.message()
        write_trainer_failure(FailureKind.HANG, message, hang.rank)
        self._dump(hang.header())
        if self.metrics is not None:
            with contextlib.suppress(Exception):  # a full disk must not keep a hung job alive
                self.metrics.event(
                    TrainerEvent.HANG, message, step=hang.last_step, in_progress=hang.in_progress, phase=hang.phase.value,
                    waited_s=hang.waited_s, limit_s=hang.limit_s, rank=hang.rank, host=hang.host,
                )
        time.sleep(self._grace)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        self._exit(HANG_EXIT_CODE)


NO_WATCHDOG = HangWatchdog(None, rank=0)
"""The watchdog of a run without one (--hang-timeout 0), and the Trainer's default."""
