"""Experiment trackers: the names both sides share. The launcher (`submit --tracker`) chooses a
training's run ids and exports them; inside the job, hyperlaunch.trackers logs every attempt,
round and `resume` of that training into the same run; `status` reads back where the runs are.

Standard library only, Python 3.8+ (the job's bundle ships it)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.bounded_read import read_regular


class Ending(str, Enum):
    """How one process's part of a training ended, as its trackers' runs record it."""

    FINISHED = "finished"
    """The training reached its last step: every run closes as finished."""
    REQUEUED = "requeued"
    """A stop signal (time limit, preemption) after a save: this attempt's runs close as
    finished, and the training's own goes on in the requeued attempt."""
    FAILED = "failed"
    """An error."""


TENSORBOARD = "tensorboard"
MLFLOW = "mlflow"
WANDB = "wandb"
TRACKERS = (TENSORBOARD, MLFLOW, WANDB)
"""What `--tracker` accepts, in the order they are set up."""

PACKAGES = {TENSORBOARD: "tensorboard", MLFLOW: "mlflow-skinny", WANDB: "wandb"}
"""The package each tracker needs where the job runs (`pip install "hyperlaunch[trackers]"` has all three)."""
MODULES = {TENSORBOARD: "tensorboard", MLFLOW: "mlflow", WANDB: "wandb"}
"""The module the job imports for each."""

TRACKERS_ENV = "HYPERLAUNCH_TRACKERS"
"""The job's trackers, comma-separated (`tensorboard,mlflow`); unset: none."""
TRACKER_RUN_ID_ENV = "HYPERLAUNCH_TRACKER_RUN_ID"
"""The training's run id, chosen at submit and kept by requeues and `resume`: W&B's run id,
the TensorBoard run's name, the MLflow run's `hyperlaunch.run_id` tag."""
TENSORBOARD_DIR_ENV = "HYPERLAUNCH_TENSORBOARD_DIR"
"""The TensorBoard log folder (`--tensorboard-dir`, default `<run_dir>/tensorboard`)."""
RESTART_CAUSE_ENV = "HYPERLAUNCH_RESTART_CAUSE"
"""Why this round of trainers started again (a hyperlaunch.core.protocol.RestartCause value),
set by the supervisor for a round after a restart in the allocation and for a requeued attempt
whose previous one said why it ended; the trackers log it with the restart."""

MLFLOW_URI_ENV = "MLFLOW_TRACKING_URI"
MLFLOW_RUN_ID_ENV = "MLFLOW_RUN_ID"
MLFLOW_ALLOW_FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"
"""MLflow's opt-in (3.x) to a file: tracking URI, which it otherwise refuses as in maintenance mode."""
WANDB_RUN_ID_ENV = "WANDB_RUN_ID"
WANDB_RESUME_ENV = "WANDB_RESUME"
WANDB_DIR_ENV = "WANDB_DIR"
WANDB_SETTINGS_FORWARDED = ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_MODE", "WANDB_BASE_URL")
"""W&B's own settings a `--tracker wandb` job takes from the submitting environment (by name,
as `--env NAME`); secrets such as WANDB_API_KEY only where the user forwards them (`--env WANDB_API_KEY`)."""

NAMES_SET = (TRACKERS_ENV, TRACKER_RUN_ID_ENV, TENSORBOARD_DIR_ENV, RESTART_CAUSE_ENV)
"""What the job script and the supervisor export for the trackers: reserved (`--env` refuses them)."""
NAMES_CHOSEN = {MLFLOW: (MLFLOW_URI_ENV, MLFLOW_RUN_ID_ENV), WANDB: (WANDB_RUN_ID_ENV, WANDB_RESUME_ENV)}
"""The tracker's own variables a job with that tracker sets to its run: `--env` refuses them there."""

_LOCATIONS_LIMIT = 64 * 1024
LOCATIONS_FILE = ".hyperlaunch/trackers.json"
"""Under the run dir: where each tracker's run is ({"tensorboard": dir, "mlflow": url, "wandb":
path or offline folder}), written by the job once each tracker's run is open; `status` shows it."""


def parse_trackers(value: str | None) -> tuple[str, ...]:
    """The trackers HYPERLAUNCH_TRACKERS names, known ones only, in TRACKERS' order."""
    named = {item.strip() for item in (value or "").split(",")}
    return tuple(name for name in TRACKERS if name in named)


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page in the MLflow UI (an http(s) server), else the store and the run id."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    return f"{tracking_uri} run {run_id}"


def read_locations(run_dir: Path) -> dict[str, str]:
    """What LOCATIONS_FILE holds ({} when absent or unreadable)."""
    try:  # a FIFO or a huge file there must not hang or swamp `status`
        data = json.loads(read_regular(Path(run_dir) / LOCATIONS_FILE, limit=_LOCATIONS_LIMIT))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}


def write_location(run_dir: Path, tracker: str, where: str) -> None:
    """Add one tracker's location to LOCATIONS_FILE (written whole, atomically)."""
    path = Path(run_dir) / LOCATIONS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    data: Mapping[str, Any] = {**read_locations(run_dir), tracker: where}
    write_atomically(path, json.dumps(dict(data), sort_keys=True).encode())
