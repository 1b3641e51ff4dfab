"""Experiment trackers inside the job: rank 0 logs every metrics.jsonl record into the trackers
HYPERLAUNCH_TRACKERS names (TensorBoard, MLflow, W&B), one run per training across attempts,
rounds and `resume`. hyperlaunch.runtime.records.append_record forwards each record here.

The lineage rule (hyperlaunch.trackers.lineage): the first step k a process logs opens its
run, and what the lineage logged at steps >= k before is stale. What a reader sees:
- TensorBoard: each step once, the keeping attempt's values (a restart marker at k in each
  process's event file; the reader purges the earlier events >= k).
- MLflow: the parent run's history holds each step once with the kept values (flushed at each
  checkpoint commit and at a finished training's close); each process is a child run with its
  live values, tagged with its job, attempt, round, first step and, when redone, the step its
  values stopped counting from.
- W&B: one run; online rewound to k-1 when a restart redoes logged steps; offline the stale
  range is recorded in the run's config and summary.

Standard library and hyperlaunch.core only, Python 3.8+ (the job's bundle ships it to scripts);
each tracker's library is imported when its run opens."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

from hyperlaunch.core import trackers as names
from hyperlaunch.trackers.lineage import Tracker, Trackers
from hyperlaunch.trackers.mlflow_runs import MlflowRuns
from hyperlaunch.trackers.tensorboard_log import TensorBoardRun
from hyperlaunch.trackers.wandb_run import WandbRun

__all__ = ["Trackers", "current", "for_environ", "preflight"]

INSTALL_HINT = 'pip install "hyperlaunch[trackers]"'


def preflight(environ: Mapping[str, str] | None = None) -> str | None:
    """One line naming the chosen trackers whose library is missing here, None when all are there."""
    chosen = names.parse_trackers((os.environ if environ is None else environ).get(names.TRACKERS_ENV))
    missing = [name for name in chosen if importlib.util.find_spec(names.MODULES[name]) is None]
    if not missing:
        return None
    packages = " and ".join(names.PACKAGES[name] for name in missing)
    return f"--tracker {','.join(missing)}: {packages} is not installed where the job runs ({INSTALL_HINT}, or {packages})"


def for_environ(run_dir: Path, environ: Mapping[str, str]) -> Trackers | None:
    """Trackers for one process from its environment; None when it names none."""
    chosen = names.parse_trackers(environ.get(names.TRACKERS_ENV))
    if not chosen:
        return None
    run_dir = Path(run_dir)
    built: list[Tracker] = []
    for name in chosen:
        if name == names.TENSORBOARD:
            built.append(TensorBoardRun(Path(environ.get(names.TENSORBOARD_DIR_ENV) or run_dir / "tensorboard")))
        elif name == names.MLFLOW:
            built.append(MlflowRuns(environ.get(names.MLFLOW_URI_ENV) or None, environ.get(names.MLFLOW_RUN_ID_ENV, "")))
        elif name == names.WANDB:
            run_id = environ.get(names.TRACKER_RUN_ID_ENV) or environ.get(names.WANDB_RUN_ID_ENV, "")
            built.append(WandbRun(run_id, Path(environ.get(names.WANDB_DIR_ENV) or run_dir)))
    return Trackers(run_dir, built, environ)


_CURRENT: dict[str, Trackers | None] = {}


def current(run_dir: Path) -> Trackers | None:
    """This process's trackers (built from os.environ on the first call), None without any."""
    if "process" not in _CURRENT:
        _CURRENT["process"] = for_environ(run_dir, os.environ)
    return _CURRENT["process"]
