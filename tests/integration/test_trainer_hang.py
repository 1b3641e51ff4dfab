"""A hung rank fails the run in seconds, not at the process group's 30-minute timeout: every
rank's watchdog dumps its Python stacks, one records a `hang` failure, torchrun reports the
failure - real torchrun, two CPU ranks, no Slurm. A normal run with the watchdog on is left alone."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV, read_trainer_failure
from tests.support import fault_entry
from tests.support.train_helpers import launch, tiny_args

# Small enough to be quick, large enough that a loaded 2-core machine never trips it:
# a step may take 5 s, the first steps, saves and validation passes 15 s.
WATCHDOG = ["--hang-timeout", "3", "--hang-floor", "5"]
HEADER = re.compile(r"^hyperlaunch: hang watchdog: rank (\d) on \S+: (.*)$", re.MULTILINE)


def _dumps(stderr: str) -> dict[int, str]:
    """Each rank's watchdog dump: its header's text and the stacks below it, up to the next header."""
    headers = list(HEADER.finditer(stderr))
    ends = [h.start() for h in headers[1:]] + [len(stderr)]
    return {int(h.group(1)): stderr[h.start() : end] for h, end in zip(headers, ends, strict=True)}


def test_a_hung_rank_fails_the_run_with_every_ranks_stacks_and_a_hang_record(tmp_path: Path) -> None:
    record_file = tmp_path / "trainer-failure-7.0"
    run_dir = tmp_path / "run"
    started = time.monotonic()
    run = launch(
        tiny_args(tmp_path / "ckpt", *WATCHDOG, "--checkpoint-every", "0", "--val-every", "0", steps=20),
        run_dir=run_dir, check=False, timeout_s=120,
        env={"HYPERLAUNCH_TEST_HANG_AT_STEP": "5", "HYPERLAUNCH_TEST_HANG_RANK": "1", TRAINER_FAILURE_FILE_ENV: str(record_file)},
    )
    elapsed = time.monotonic() - started
    assert run.returncode != 0, run.stderr[-3000:]
    assert elapsed < 120

    record = read_trainer_failure(record_file)
    assert record is not None and (record.kind, record.final) == ("hang", False), record
    assert record.message.startswith("hang: no step completed for ") and "after step 4 (step 5 in progress)" in record.message
    assert record.message.endswith("stacks of every rank are in the log")

    dumps = _dumps(run.stderr)
    assert sorted(dumps) == [0, 1], run.stderr[-5000:]
    for dump in dumps.values():
        assert "after step 4 (step 5 in progress)" in dump.splitlines()[0]
        assert "most recent call first" in dump
    assert 'fault_entry.py", line' in dumps[1] and "in before_step" in dumps[1], "the hung rank's sleep"
    assert 'loop.py", line' in dumps[0] and "in _train" in dumps[0], "the other rank, waiting for it inside the step"

    (event,) = run.events("hang")
    assert (event["step"], event["in_progress"], event["phase"]) == (4, 5, "step")
    assert max(run.steps()) == 4
    assert (run_dir / ".hyperlaunch-test-fault-hang-at-step-5-rank-1").exists()


def test_a_normal_run_with_a_tight_watchdog_is_not_a_hang(tmp_path: Path) -> None:
    record_file = tmp_path / "trainer-failure-7.0"
    run = launch(
        tiny_args(tmp_path / "ckpt", *WATCHDOG, "--checkpoint-every", "4", "--val-every", "4", steps=12),
        run_dir=tmp_path / "run", env={TRAINER_FAILURE_FILE_ENV: str(record_file)},
    )
    assert "hang watchdog" not in run.stderr and not run.events("hang") and not record_file.exists()
    assert max(run.steps()) == 12 and len(run.events("validation")) == 3


def test_an_injected_crash_or_hang_fires_once_per_job_whatever_the_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPERLAUNCH_TEST_FAULT_KEYS", str(tmp_path))
    monkeypatch.setenv("HYPERLAUNCH_TEST_CRASH_AT_STEP", "3")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    fault_entry.FaultHooks().before_step(3, 1)  # not the crash's attempt: nothing, and its key stays unused
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    with pytest.raises(RuntimeError, match="injected failure at step 3 on rank 1"):
        fault_entry.FaultHooks().before_step(3, 1)
    fault_entry.FaultHooks().before_step(3, 1)  # a restarted trainer of the same attempt goes on
    assert [p.name for p in tmp_path.iterdir()] == [".hyperlaunch-test-fault-crash-at-step-3-rank-1"]
