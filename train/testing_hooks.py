"""Fault injection for the integration tests, driven by environment variables that production
never sets. Each one kills the process the way a node failure would (SIGKILL: no cleanup)."""

from __future__ import annotations

import os
import signal
import time


def _step_from_env(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def kill_after_checkpoint(step: int) -> None:
    """HYPERLAUNCH_TEST_KILL_AFTER_CHECKPOINT=N: every rank dies once checkpoint N is complete
    and the pointer names it."""
    if _step_from_env("HYPERLAUNCH_TEST_KILL_AFTER_CHECKPOINT") == step:
        os.kill(os.getpid(), signal.SIGKILL)


def kill_during_save(step: int) -> None:
    """HYPERLAUNCH_TEST_KILL_DURING_SAVE=N: die after the shards of checkpoint N are written but
    before its `.metadata` completion marker exists."""
    if _step_from_env("HYPERLAUNCH_TEST_KILL_DURING_SAVE") == step:
        os.kill(os.getpid(), signal.SIGKILL)


def probe_path() -> str | None:
    """HYPERLAUNCH_TEST_PROBE=FILE: a saved LongTensor batch; the trainer writes loss and logits
    on it at start and end to FILE.out.pt (compared with plain transformers by the tests)."""
    return os.environ.get("HYPERLAUNCH_TEST_PROBE") or None


def crash_at_step(step: int, rank: int) -> None:
    """HYPERLAUNCH_TEST_CRASH_AT_STEP=N (with HYPERLAUNCH_TEST_CRASH_RANK, default 1): that rank
    raises before step N, a crashed rank on a healthy node. Only in the Slurm attempt given by
    HYPERLAUNCH_TEST_CRASH_ATTEMPT (default 0), so the retried job can finish."""
    if _step_from_env("HYPERLAUNCH_TEST_CRASH_AT_STEP") != step:
        return
    if rank != int(os.environ.get("HYPERLAUNCH_TEST_CRASH_RANK") or 1):
        return
    if int(os.environ.get("SLURM_RESTART_COUNT") or 0) != int(os.environ.get("HYPERLAUNCH_TEST_CRASH_ATTEMPT") or 0):
        return
    raise RuntimeError(f"injected failure at step {step} on rank {rank}")


def slow_step() -> None:
    """HYPERLAUNCH_TEST_STEP_SECONDS=S: sleep S seconds in every step, so a test can make a
    run outlast a time limit whatever the machine's speed."""
    seconds = os.environ.get("HYPERLAUNCH_TEST_STEP_SECONDS")
    if seconds:
        time.sleep(float(seconds))
