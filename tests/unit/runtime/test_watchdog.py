"""The hang watchdog (hyperlaunch/runtime/watchdog.py): its limits rule, and a deadline that passes writes a
`hang` failure record, dumps stacks and exits, once; one that does not, nothing. The dump and
the exit are stand-ins here, so a firing watchdog cannot kill pytest."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.trainer_failures import (
    FINAL_FAILURE_KINDS,
    TRAINER_FAILURE_FILE_ENV,
    FailureKind,
    read_trainer_failure,
)
from hyperlaunch.runtime.watchdog import (
    HANG_EXIT_CODE,
    LONG_FACTOR,
    NO_WATCHDOG,
    Backstop,
    HangLimits,
    HangWatchdog,
    Phase,
    dump_stacks,
)
from hyperlaunch.train.config import parse_config
from hyperlaunch.train.metrics import MetricsLog

FLOOR = 30.0


def _limits_after(steps: list[float], multiple: float = 10.0) -> HangLimits:
    limits = HangLimits(multiple, FLOOR)
    for seconds in steps:
        limits.record(Phase.STEP, seconds)
    return limits


def test_a_step_may_take_the_floor_or_the_multiple_of_the_recent_median() -> None:
    assert _limits_after([99.0, 1.0, 1.0, 50.0]).limit(Phase.STEP) == FLOOR, "10 x median 1 s is under the floor"
    assert _limits_after([99.0, 4.0, 5.0, 60.0]).limit(Phase.STEP) == 50.0, "10 x median 5 s; one slow step moves nothing"
    recent = _limits_after([99.0] + [100.0] * 20 + [6.0] * 20)
    assert recent.limit(Phase.STEP) == 60.0, "the median is over the last 20 steps only"


def test_the_first_steps_of_a_process_get_the_long_allowance_and_the_first_is_never_counted() -> None:
    limits = HangLimits(10.0, FLOOR)
    assert limits.limit(Phase.STEP) == LONG_FACTOR * FLOOR
    limits.record(Phase.STEP, 500.0)  # compile, first batches
    assert limits.limit(Phase.STEP) == LONG_FACTOR * FLOOR, "no duration known yet"
    limits.record(Phase.STEP, 4.0)
    assert limits.limit(Phase.STEP) == 40.0, "the 500 s warm-up step is not in the median"


def test_saves_and_validation_get_the_long_allowance_or_the_multiple_of_their_last_duration() -> None:
    limits = _limits_after([9.0, 1.0, 1.0])
    for phase in (Phase.CHECKPOINT, Phase.VALIDATION):
        assert limits.limit(phase) == LONG_FACTOR * FLOOR
    limits.record(Phase.CHECKPOINT, 40.0)
    limits.record(Phase.VALIDATION, 2.0)
    assert limits.limit(Phase.CHECKPOINT) == 400.0 and limits.limit(Phase.VALIDATION) == LONG_FACTOR * FLOOR


def test_the_step_after_a_save_gets_the_saves_limit_and_the_next_one_its_own() -> None:
    limits = _limits_after([9.0, 1.0, 1.0])
    limits.record(Phase.CHECKPOINT, 40.0)
    assert limits.limit(Phase.STEP) == 400.0, "an async save may still be copying what the step waits for"
    limits.record(Phase.STEP, 1.0)
    assert limits.limit(Phase.STEP) == FLOOR
    limits.record(Phase.VALIDATION, 40.0)
    assert limits.limit(Phase.STEP) == FLOOR, "a validation pass leaves nothing behind"


class Spy:
    """The dump and exit functions of a watchdog under test, and what they saw."""

    def __init__(self) -> None:
        self.headers: list[str] = []
        self.exits: list[int] = []
        self.exited = threading.Event()

    def dump(self, header: str) -> None:
        self.headers.append(header)

    def exit(self, code: int) -> None:
        self.exits.append(code)
        self.exited.set()


class FakeTimer:
    """faulthandler's timer, counted rather than armed."""

    def __init__(self) -> None:
        self.armed: list[float] = []
        self.cancelled = 0

    def arm(self, timeout: float, *, exit: bool) -> None:  # noqa: A002 - faulthandler's name
        assert exit
        self.armed.append(timeout)

    def cancel(self) -> None:
        self.cancelled += 1


def _watchdog(spy: Spy, floor: float, *, metrics: MetricsLog | None = None, rank: int = 1) -> tuple[HangWatchdog, FakeTimer]:
    timer = FakeTimer()
    dog = HangWatchdog(
        HangLimits(2.0, floor), rank=rank, host="node2", metrics=metrics, dump=spy.dump, exit=spy.exit,
        backstop=Backstop(arm=timer.arm, cancel=timer.cancel), exit_grace_s=0.0,
    )
    return dog, timer


@pytest.fixture()
def record_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "trainer-failure-12.0"
    monkeypatch.setenv(TRAINER_FAILURE_FILE_ENV, str(path))
    return path


def test_a_stuck_step_records_a_hang_dumps_reports_and_exits_once(tmp_path: Path, record_file: Path) -> None:
    spy = Spy()
    metrics = MetricsLog(tmp_path / "run", enabled=True)
    dog, timer = _watchdog(spy, 0.1, metrics=metrics, rank=0)
    for step in (1, 2, 3):
        dog.step_starts(step)
        dog.step_done(step)
    started = time.monotonic()
    dog.step_starts(4)  # and never done
    assert spy.exited.wait(10), "the watchdog did not fire"
    waited = time.monotonic() - started
    time.sleep(0.5)
    dog.close()
    assert spy.exits == [HANG_EXIT_CODE], "fires once"
    assert 0.1 <= waited < 5
    record = read_trainer_failure(record_file)
    assert record is not None and (record.kind, record.final, record.rank) == ("hang", False, 0)
    assert record.message.startswith("hang: no step completed for 0.") and "(limit 0.1 s) after step 3 (step 4 in progress)" in record.message
    assert record.message.endswith("; rank 0 on node2; stacks of every rank are in the log")
    (header,) = spy.headers
    assert header.startswith("hyperlaunch: hang watchdog: rank 0 on node2: no step completed for ") and "after step 3" in header
    (event,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert (event["event"], event["step"], event["in_progress"], event["phase"]) == ("hang", 3, 4, "step")
    assert event["limit_s"] == pytest.approx(0.1) and event["rank"] == 0
    assert timer.armed and timer.cancelled >= 1, "the faulthandler backstop is cancelled once the watchdog reports"


def test_a_stuck_save_names_the_save_and_its_step(record_file: Path) -> None:
    spy = Spy()
    dog, _timer = _watchdog(spy, 0.1)
    dog.step_starts(1)
    dog.step_done(1)
    with dog.allowance(Phase.CHECKPOINT):
        assert spy.exited.wait(10)
    dog.close()
    record = read_trainer_failure(record_file)
    assert record is not None and record.rank == 1
    assert record.message.startswith("hang: the checkpoint save has run for 0.") and "(limit 0.3 s) after step 1;" in record.message


def test_normal_steps_saves_and_validation_never_fire_and_close_disarms(record_file: Path) -> None:
    spy = Spy()
    dog, timer = _watchdog(spy, 0.3)
    for step in range(1, 40):
        dog.step_starts(step)
        time.sleep(0.01)
        dog.step_done(step)
        if step % 10 == 0:
            with dog.allowance(Phase.VALIDATION):
                time.sleep(0.05)
            with dog.allowance(Phase.CHECKPOINT):
                time.sleep(0.1)
    dog.close()
    time.sleep(1.0)  # three times the step limit: a deadline left armed would have passed
    assert spy.exits == [] and spy.headers == [] and not record_file.exists()
    assert len(timer.armed) < 39, "faulthandler's timer (a thread per arming) is not re-armed every step"
    assert timer.cancelled >= 1, "close() cancels it"


def test_the_backstop_is_rearmed_only_when_the_deadline_leaves_its_window() -> None:
    now = [1000.0]
    timer = FakeTimer()
    backstop = Backstop(60.0, arm=timer.arm, cancel=timer.cancel, clock=lambda: now[0])
    for _ in range(100):  # a step a second, each with a 300 s limit
        backstop.cover(now[0] + 300)
        now[0] += 1
    assert timer.armed == [420.0, 420.0], "armed for deadline + 2 margins, again once the deadline moved a margin"
    backstop.cover(now[0] + 30)  # a shorter limit: re-armed at once, or it would fire late
    assert len(timer.armed) == 3 and timer.armed[-1] == 150.0
    backstop.cover(now[0] + 1e9)  # a limit faulthandler cannot time: no backstop rather than an early one
    assert timer.cancelled == 1


def test_the_dump_is_the_header_then_every_threads_stack(capfd: pytest.CaptureFixture[str]) -> None:
    parked = threading.Event()
    helper = threading.Thread(target=parked.wait, name="parked")
    helper.start()
    try:
        dump_stacks("hyperlaunch: hang watchdog: rank 3 on node9: test")
    finally:
        parked.set()
        helper.join()
    err = capfd.readouterr().err
    assert err.startswith("hyperlaunch: hang watchdog: rank 3 on node9: test\n")
    assert "in test_the_dump_is_the_header_then_every_threads_stack" in err, "the main thread's stack"
    assert err.count("Thread 0x") + err.count("Current thread 0x") >= 2 and "in wait" in err, "and the others'"


def test_the_disabled_watchdog_does_nothing() -> None:
    NO_WATCHDOG.step_starts(1)
    with NO_WATCHDOG.allowance(Phase.CHECKPOINT):
        pass
    NO_WATCHDOG.step_done(1)
    assert not NO_WATCHDOG.enabled and NO_WATCHDOG._thread is None


def test_a_hang_is_retried_like_a_crash() -> None:
    assert FailureKind.HANG.value == "hang" and FailureKind.HANG not in FINAL_FAILURE_KINDS


REQUIRED = ["--model", "qwen3_tiny", "--checkpoint-dir", "/c"]


def test_the_flags_default_to_a_watchdog_and_0_turns_it_off() -> None:
    cfg = parse_config(REQUIRED)
    assert (cfg.hang_timeout, cfg.hang_floor) == (10.0, 300.0)
    assert parse_config([*REQUIRED, "--hang-timeout", "0", "--hang-floor", "12.5"]).hang_timeout == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hang-timeout", "-1"], r"^--hang-timeout must be 0 \(no watchdog\) or a multiple >= 1 of the recent step time, got -1.0$"),
        (["--hang-timeout", "0.5"], "--hang-timeout must be 0"),
        (["--hang-timeout", "inf"], "--hang-timeout must be 0"),
        (["--hang-floor", "-5"], r"^--hang-floor must be a number of seconds > 0, got -5.0$"),
        (["--hang-floor", "0"], "--hang-floor must be"),
        (["--hang-floor", "nan"], "--hang-floor must be"),
        (["--hang-floor", "soon"], "invalid float value: 'soon'"),
    ],
)
def test_bad_hang_flags_are_one_line_errors(args: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_config([*REQUIRED, *args])
