"""One training as two attempts, each a fresh process logging through the runtime library
(`runtime.log`, `runtime.commit_checkpoint`), as a script job's rank 0 does, with the job's tracker
settings in its environment: attempt 1 logs steps 1..8, commits step 4 and crashes; attempt 2 (a
requeue, cause "crash") resumes after checkpoint 4, logs 5..10 with other values, commits 8 and
finishes. The trackers' tests (TensorBoard, MLflow, W&B) read what it leaves with each tracker's
own reader."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperlaunch.core import trackers as names

ROOT = Path(__file__).resolve().parents[2]

_DRIVER = textwrap.dedent(
    """
    import sys
    from hyperlaunch import runtime

    first, last, commit, offset, crash = (int(a) for a in sys.argv[1:])
    for step in range(first, last + 1):
        runtime.log(step, loss=step + offset / 10, lr=0.001, tokens_per_s=1000.0 * step, mine=offset)
        if step == commit:
            runtime.checkpoint_path(step).mkdir(parents=True)
            runtime.commit_checkpoint(step)
    if crash:
        raise RuntimeError("attempt crashed")
    """
)


FIRST = {"first": 1, "last": 8, "commit": 4, "offset": 1, "crash": True}
"""Attempt 1: losses step + 0.1; steps 5..8 are lost with the crash."""


SECOND = {"first": 5, "last": 10, "commit": 8, "offset": 2, "crash": False}
"""Attempt 2 (requeued after the crash, resuming after checkpoint 4): losses step + 0.2."""


def loss(step: int) -> float:
    """What the training kept at `step`: attempt 1's values up to 4, attempt 2's from 5."""
    return step + (0.1 if step <= 4 else 0.2)


def job_env(tmp_path: Path, chosen: str, **extra: str) -> dict[str, str]:
    """A script job's environment for one training: trackers, run id, folders; no hang watchdog."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERLAUNCH_", "SLURM_", "WANDB_", "MLFLOW_"))}
    env.update(
        {
            "HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(ROOT),
            names.TRACKERS_ENV: chosen,
            names.TRACKER_RUN_ID_ENV: "lineage1",
            names.TENSORBOARD_DIR_ENV: str(tmp_path / "tensorboard"),
            "HYPERLAUNCH_RUN_DIR": str(tmp_path / "run"),
            "HYPERLAUNCH_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
            "HYPERLAUNCH_NAME": "demo",
            "HYPERLAUNCH_HANG_TIMEOUT": "0",
            "SLURM_JOB_ID": "4242",
        }
    )
    env.update(extra)
    return env


def attempt(env: Mapping[str, str], plan: Mapping[str, Any], *, restart: int = 0, cause: str | None = None) -> subprocess.CompletedProcess[str]:
    """One process of the training (a fresh interpreter, as each attempt is)."""
    env = dict(env)
    env["SLURM_RESTART_COUNT"] = str(restart)
    if cause:
        env[names.RESTART_CAUSE_ENV] = cause
    args = [str(int(plan[key])) for key in ("first", "last", "commit", "offset", "crash")]
    result = subprocess.run([sys.executable, "-c", _DRIVER, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == (1 if plan["crash"] else 0), result.stderr
    assert "warning: trackers" not in result.stderr, result.stderr
    return result


def two_attempts(env: Mapping[str, str]) -> None:
    attempt(env, FIRST)
    attempt(env, SECOND, restart=1, cause="crash")
