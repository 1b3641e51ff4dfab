"""What a job's trainers write for the supervisor and `status`, in one implementation: rank 0's
metrics and events (`<run_dir>/metrics.jsonl`), the progress record of each completed
checkpoint, the request to be requeued after a save. The bundled trainer (train/metrics.py)
writes through these, and so does a user's script through hyperlaunch.runtime; the formats are
hyperlaunch.core.protocol's and hyperlaunch.core.metrics_records'. Where the job names experiment
trackers (HYPERLAUNCH_TRACKERS), every record and every checkpoint commit also reaches them
(hyperlaunch.trackers, imported only then).

Standard library only, Python 3.8+."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperlaunch.core.metrics_records import EventRecord, TrainerEvent, append_line
from hyperlaunch.core.protocol import requeue_request_path, write_progress
from hyperlaunch.core.script_env import ROUND_ENV
from hyperlaunch.core.trackers import TRACKERS_ENV

if TYPE_CHECKING:
    from hyperlaunch.trackers import Trackers


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """The attempt: Slurm leaves SLURM_RESTART_COUNT unset in a job's first."""
    value = _environ(environ).get("SLURM_RESTART_COUNT") or "0"
    return int(value) if value.isdigit() else 0


def job_tags(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Slurm job, attempt and round that write a record: several jobs (a run and its
    resumptions) share a run folder, and `status` shows each job its own part. Empty outside Slurm."""
    env = _environ(environ)
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return {}
    round_ = env.get(ROUND_ENV) or "0"
    return {"job_id": job_id, "restart": restart_count(env), "round": int(round_) if round_.isdigit() else 0}


def append_record(run_dir: Path, record: Mapping[str, Any]) -> None:
    """One metrics.jsonl line (keys sorted, as readers diff them); the folder made if needed.
    The job's trackers get the record too."""
    tracked = trackers(run_dir)  # before the write: they read the lineage's last step from the file
    append_line(run_dir, json.dumps(dict(record), sort_keys=True) + "\n")
    if tracked is not None:
        tracked.record(record)


def trackers(run_dir: Path) -> Trackers | None:
    """This process's experiment trackers (hyperlaunch.trackers), None where the job names none:
    a job without trackers imports nothing of them."""
    if not os.environ.get(TRACKERS_ENV):
        return None
    from hyperlaunch import trackers as chosen

    return chosen.current(run_dir)


def trackers_missing() -> str | None:
    """One line naming the job's trackers whose library is not installed here, else None."""
    if not os.environ.get(TRACKERS_ENV):
        return None
    from hyperlaunch import trackers as chosen

    return chosen.preflight()


def record_progress(run_dir: Path, step: int, environ: Mapping[str, str] | None = None) -> None:
    """This attempt completed the checkpoint of `step`: its requeue uses no restart budget
    (hyperlaunch.core.protocol.PROGRESS_PREFIX; nothing outside Slurm), and the trackers keep
    what this process logged up to it (the trainer and scripts both commit through here:
    hyperlaunch.runtime.checkpoint.commit)."""
    env = _environ(environ)
    if env.get("SLURM_JOB_ID"):
        Path(run_dir).mkdir(parents=True, exist_ok=True)  # a script may commit before it logs
        write_progress(Path(run_dir), env["SLURM_JOB_ID"], restart_count(env), step)
    tracked = trackers(run_dir)
    if tracked is not None:
        tracked.committed(step)


def request_requeue(run_dir: Path, environ: Mapping[str, str] | None = None) -> None:
    """This stop was a save, not a crash (torchrun reports both as exit code 1): the attempt's
    requeue-request file (hyperlaunch.core.protocol). Nothing outside Slurm."""
    env = _environ(environ)
    if env.get("SLURM_JOB_ID"):
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        requeue_request_path(Path(run_dir), env["SLURM_JOB_ID"], restart_count(env)).touch()


class EventLog:
    """Events into metrics.jsonl (the hang watchdog's, a script's): rank 0's only."""

    def __init__(self, run_dir: Path, enabled: bool) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled

    def event(self, event: TrainerEvent, message: str, *, step: int | None = None, **details: Any) -> None:
        if not self.enabled:
            return
        print(f"[hyperlaunch] {message}", flush=True)
        record = EventRecord(event=event.value, message=message, time=time.time(), step=step, details=details, **job_tags())
        append_record(self.run_dir, record.to_json())
