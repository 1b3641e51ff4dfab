"""The record of the jobs that run hyperlaunch's own tools on the cluster (`prepare-data
--slurm`, `export --slurm`), so `status`, `logs` and `cancel` know them as they know a training.

<home>/jobs/<job_id>/tool.json   what it does, its log, its output, what it waits for

Beside the training jobs' records (one folder a Slurm job id, hyperlaunch.runs.jobs), written the
same way: only after sbatch accepted the job, staged and renamed into place, private to the user."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core.errors import ConfigError, RecordUnreadable
from hyperlaunch.runs import jobs

TOOL_FILE = jobs.TOOL_FILE
KINDS = ("prepare-data", "export")


@dataclass(frozen=True, kw_only=True)
class ToolJob:
    """One submitted prepare-data or export job."""

    job_id: str
    kind: str
    """prepare-data or export (KINDS)."""
    what: str
    """What it does, in a few words: `3 input(s) -> /fsx/data on 2 node(s)`, `qwen3_0_6b-40steps -> DIR`."""
    output: str
    log: str
    """Its log (stdout and stderr), the job id filled in."""
    submitted_at: float
    waits: tuple[tuple[str, str], ...] = ()
    """The jobs it waits for (--after), each with `ok` (to complete) or `any` (to end)."""
    models: tuple[str, ...] = ()
    """An export's model, by the names `status --model` knows a training by: the name its
    checkpoints go by, and the model it was given (a preset, a model directory)."""
    slurm_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "waits": [list(wait) for wait in self.waits], "models": list(self.models)}

    @classmethod
    def from_json(cls, data: Any) -> ToolJob:
        """The job in a tool.json document; ValueError says why it is not one."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        try:
            texts = {name: data[name] for name in ("job_id", "kind", "what", "output", "log")}
            submitted_at, waits = data["submitted_at"], data.get("waits", [])
        except KeyError as err:
            raise ValueError(f"no {err} field") from None
        if not all(isinstance(value, str) for value in texts.values()) or not jobs.is_job_id(texts["job_id"]):
            raise ValueError("job_id, kind, what, output and log must be text, job_id a Slurm job id")
        if texts["kind"] not in KINDS:
            raise ValueError(f"kind {texts['kind'][:40]!r} is not one of: {', '.join(KINDS)}")
        if not isinstance(waits, list) or not all(
            isinstance(wait, list) and len(wait) == 2 and jobs.is_job_id(str(wait[0])) and wait[1] in ("ok", "any") for wait in waits
        ):
            raise ValueError("waits must be a list of [job id, ok or any]")
        models, slurm_conf = data.get("models", []), data.get("slurm_conf")
        if not isinstance(models, list) or not all(isinstance(name, str) for name in models):
            raise ValueError("models must be a list of names")
        if not isinstance(slurm_conf, (str, type(None))):
            raise ValueError("slurm_conf must be text or null")
        return cls(
            job_id=texts["job_id"], kind=texts["kind"], what=texts["what"], output=texts["output"], log=texts["log"],
            submitted_at=jobs.submitted_time(submitted_at), waits=tuple((str(job), kind) for job, kind in waits), models=tuple(models),
            slurm_conf=slurm_conf,
        )


def save(job: ToolJob) -> None:
    """Record a job sbatch accepted (as jobs.save records a training); ConfigError naming the
    job, which runs, when the record cannot be written (the user would submit it again)."""
    try:
        jobs.place(job.job_id, {TOOL_FILE: json.dumps(job.to_json(), indent=2) + "\n"})
    except OSError as err:
        raise ConfigError(
            f"{job.kind} job {job.job_id} was submitted, but its record could not be written under {jobs.jobs_dir()}: "
            f"{err.strerror or err}",
            hint=f"it runs; its log: {job.log}; 'scancel {job.job_id}' to stop it",
        ) from None


def load(job_id: str) -> ToolJob | None:
    """The tool job recorded as `job_id`, None when there is none (a training's id, or nothing);
    RecordUnreadable when its record cannot be read."""
    path = jobs.jobs_dir() / jobs.check_job_id(job_id) / TOOL_FILE
    if not path.exists():
        return None
    try:
        return ToolJob.from_json(jobs.read_record(path))
    except ValueError as err:
        raise RecordUnreadable(f"the record of job {job_id} is unreadable ({path}): {err}") from None


def recent(limit: int, model: str | None = None) -> tuple[list[ToolJob], list[Path]]:
    """The `limit` newest tool jobs (of `model`'s checkpoints, when given), and the records
    that could not be read (`status JOB` says what is wrong with one)."""
    root = jobs.jobs_dir()
    if not root.is_dir():
        return [], []
    found: list[ToolJob] = []
    unreadable: list[Path] = []
    for path in root.glob(f"[0-9]*/{TOOL_FILE}"):
        try:
            job = ToolJob.from_json(jobs.read_record(path))
        except ValueError:
            unreadable.append(path)
            continue
        if model is None or model in job.models:
            found.append(job)
    found.sort(key=lambda job: (job.submitted_at, int(job.job_id.partition("_")[0])), reverse=True)
    return found[:limit], sorted(unreadable)
