"""The record of every submitted job, under the user's hyperlaunch home, so `status`,
`logs`, `resume` and `cancel` work from any shell on the login node.

<home>/jobs/<job_id>/record.json   spec, paths, submit time, Slurm config in use
<home>/jobs/<job_id>/job.sbatch    the exact script that was submitted
<home>/jobs/<job_id>/tool.json     instead of both, for a prepare-data or export job
                                   (hyperlaunch.runs.tool_jobs)

A record is written only after sbatch accepted the job, into a temporary folder renamed
into place, so a refused or interrupted submit leaves no record behind."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core.bounded_read import NotRegularFile, read_regular
from hyperlaunch.core.errors import HyperlaunchError, InvalidInput, JobNotFound, RecordUnreadable
from hyperlaunch.core.paths import hyperlaunch_home
from hyperlaunch.core.private_files import private_dir, write_private
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec, setting_fields
from hyperlaunch.job.sweep import Sweep, element_spec, sweep_from_json, sweep_to_json

RECORD_FILE = "record.json"
SCRIPT_FILE = "job.sbatch"
TOOL_FILE = "tool.json"
_JOB_ID = re.compile(r"[0-9]{1,10}(_[0-9]{1,10})?")
"""Slurm's job ids (32-bit), with `_N` for an array task: also the name of the job's folder,
so nothing else may reach a path."""
_MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    """One submitted job as hyperlaunch remembers it."""

    job_id: str
    """Slurm's job id (stable across requeues)."""
    spec: JobSpec
    """The spec the script was rendered from."""
    submitted_at: float
    """Unix time of the submission."""
    slurm_conf: str | None = None
    """SLURM_CONF in force at submit time, reused by later commands when none is set."""
    resumed_from: str | None = None
    """The job id this one resumes, for `hyperlaunch resume`."""
    decided: tuple[tuple[str, str], ...] = ()
    """(JobSpec field, where its value came from) for the settings decided for the cluster,
    e.g. ("instance_type", "resource_config.json, worker-group-1: ..."), for `status`."""
    node_instances: tuple[tuple[str, str], ...] = ()
    """On HyperPod, every cluster node's instance id at submit (Slurm name, id): a failed node
    whose id has changed since was replaced, and `resume --exclude-failed` keeps it."""
    sweep: Sweep | None = None
    """A sweep's elements (hyperlaunch.job.sweep): the job is a Slurm job array, one task an
    element, `spec` the job every element is made from."""
    element_of: str | None = None
    """The record of one element of a sweep (JobRecord.element, never saved): its name as the
    sweep's, `12_3`, which `status` and `plot` show beside the element's own job id."""
    element_values: tuple[tuple[str, str], ...] = ()
    """That element's grid values, (key, value) in the grid's order."""

    @property
    def is_sweep(self) -> bool:
        return self.sweep is not None

    def element(self, index: int, task_job_id: str) -> JobRecord:
        """The record of one element of a sweep as the job it is, known to Slurm by its array
        task's own job id (`task_job_id`: its log is `<job name>_<that id>.out`)."""
        assert self.sweep is not None
        element = self.sweep.element(index)
        spec = element_spec(self.spec, element)
        # A resumed sweep resumed each of its elements from the same element of the sweep before
        # (its index is kept): `12_3`, which `status`, `plot` and `logs` read as that element.
        resumed = f"{self.resumed_from}_{index}" if self.resumed_from else None
        return dataclasses.replace(
            self, job_id=task_job_id, spec=spec, sweep=None, resumed_from=resumed,
            element_of=f"{self.job_id}_{index}", element_values=element.values,
        )

    @property
    def log_paths(self) -> tuple[Path, Path]:
        """Slurm's stdout and stderr files of this job (`%x_%j.out` / `.err`). Built as
        text, not with Path.with_suffix: a job name holds dots (`Qwen2.5-0.5B`, `run.v2`)."""
        base = f"{self.spec.job.job_name}_{self.job_id}"
        return Path(self.spec.output.log_dir) / f"{base}.out", Path(self.spec.output.log_dir) / f"{base}.err"

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for name in ("element_of", "element_values"):  # an element's view, never saved
            del data[name]
        data["spec"] = spec_to_json(self.spec)
        data["sweep"] = sweep_to_json(self.sweep) if self.sweep is not None else None
        for name in _PAIR_FIELDS:
            data[name] = dict(getattr(self, name))
        return data

    @classmethod
    def from_json(cls, data: Any) -> JobRecord:
        """The record in a record.json document. ValueError says why it is not one (any
        shape, type or JobSpec validation failure: the file may come from another version,
        or have been edited)."""
        try:
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            job_id = data["job_id"]
            if not isinstance(job_id, (str, int)) or isinstance(job_id, bool) or not is_job_id(str(job_id)):
                raise ValueError(f"job_id {str(job_id)[:40]!r} is not a Slurm job id")
            for name in ("slurm_conf", "resumed_from"):
                if not isinstance(data.get(name), (str, type(None))):
                    raise ValueError(f"{name} must be text or null")
            submitted_at = submitted_time(data["submitted_at"])
            return cls(
                job_id=str(job_id),
                spec=spec_from_json(data["spec"]),
                submitted_at=submitted_at,
                slurm_conf=data.get("slurm_conf"),
                resumed_from=data.get("resumed_from"),
                decided=_text_pairs(data.get("decided"), "decided"),
                node_instances=_text_pairs(data.get("node_instances"), "node_instances"),
                sweep=sweep_from_json(data["sweep"]) if data.get("sweep") is not None else None,
            )
        except KeyError as err:
            raise ValueError(f"no {err} field") from None
        except (TypeError, OverflowError, HyperlaunchError) as err:  # Overflow: a 400-digit number
            raise ValueError(str(err)) from None


def submitted_time(value: Any) -> float:
    """A record's submitted_at, a finite number (ValueError: not one, or an int too large for
    a float: a 400-digit number)."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    except OverflowError:
        pass
    raise ValueError("submitted_at must be a finite number")


_PAIR_FIELDS = ("decided", "node_instances")
"""Record fields kept as JSON objects of text (absent in records older than them)."""


def _text_pairs(value: Any, name: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{name} must be an object of text")
    return tuple(value.items())


def spec_to_json(spec: JobSpec) -> dict[str, Any]:
    """A record's `spec`: every setting by its flat name (hyperlaunch.job.spec.JobSpec.to_flat)."""
    return spec.to_flat()


def spec_from_json(data: Any) -> JobSpec:
    """The JobSpec of a record, validated as any other (InvalidInput when it is not one)."""
    if not isinstance(data, dict):
        raise ValueError("spec is not a JSON object")
    known = {setting.key for setting in setting_fields()}
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name not in known:
            continue  # a field from a newer hyperlaunch: ignore rather than refuse the record
        if name == "env" and isinstance(value, list):
            value = tuple(tuple(pair) if isinstance(pair, list) else pair for pair in value)
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    # Records written before GRES was decided per cluster requested every job's GPUs as GRES.
    values.setdefault("gres_gpus", "on")
    return job_spec(**values)  # a setting an older version did not record is decided as a plan would


def is_job_id(text: str) -> bool:
    return _JOB_ID.fullmatch(text) is not None


def check_job_id(job_id: str) -> str:
    """`job_id` when it is a Slurm job id; InvalidInput otherwise (a path, `../x`, 5,000
    digits: it names a folder under the jobs directory, so nothing else may pass)."""
    if not is_job_id(job_id):
        shown = job_id if len(job_id) <= 40 else job_id[:37] + "..."
        raise InvalidInput(f"{shown!r} is not a job id: Slurm job ids are digits (with _N for an array task)")
    return job_id


def jobs_dir() -> Path:
    return hyperlaunch_home() / "jobs"


def save(record: JobRecord, script: str) -> Path:
    """Write the record and its script atomically, private to the user (both hold the --env
    values); returns the job's folder."""
    return place(record.job_id, {SCRIPT_FILE: script, RECORD_FILE: json.dumps(record.to_json(), indent=2) + "\n"})


def place(job_id: str, files: dict[str, str]) -> Path:
    """The job's folder holding `files` (name: text), written whole or not at all, private to
    the user; returns it."""
    root = private_dir(jobs_dir())
    final = root / check_job_id(job_id)
    staging = Path(tempfile.mkdtemp(prefix=f".{job_id}-", dir=root))  # 0700
    try:
        for name, text in files.items():
            write_private(staging / name, text)
        if final.exists():
            # The same Slurm job id again (a dev cluster started afresh): keep the old record.
            # Unique: the same id can be saved twice within a second (two dev clusters).
            final.rename(root / f".{job_id}-replaced-{int(time.time())}-{uuid.uuid4().hex[:8]}")
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def load(job_id: str) -> JobRecord:
    """The record of one job: JobNotFound when there is none, InvalidInput when the job is a
    prepare-data or export job (no training), RecordUnreadable (naming the file) when it cannot
    be read or no longer validates."""
    path = jobs_dir() / check_job_id(job_id) / RECORD_FILE
    if not os.path.lexists(path):
        if (path.parent / TOOL_FILE).exists():
            kind = _tool_kind(path.parent / TOOL_FILE)
            raise InvalidInput(
                f"job {job_id} is {kind} job, not a training: it has no checkpoints, curves or trainer to resume",
                hint=f"'hyperlaunch status {job_id}' and 'hyperlaunch logs {job_id}' show it",
            )
        raise JobNotFound(f"no recorded job {job_id}", hint="'hyperlaunch status' lists recorded jobs")
    try:
        return JobRecord.from_json(read_record(path))
    except ValueError as err:
        raise RecordUnreadable(f"the record of job {job_id} is unreadable ({path}): {err}") from None


def _tool_kind(path: Path) -> str:
    """`a prepare-data` or `an export`, as its tool.json names it."""
    try:
        kind = read_record(path).get("kind")
    except (ValueError, AttributeError):
        kind = None
    return {"prepare-data": "a prepare-data", "export": "an export"}.get(str(kind), "a prepare-data or export")


def read_record(path: Path) -> Any:
    """The JSON document in a record file; ValueError (with the reason) for anything that is
    not a readable regular file holding JSON. Opened without blocking, so a FIFO cannot hang
    `status`, and read up to a bound no record comes near."""
    try:
        raw = read_regular(path, _MAX_RECORD_BYTES)
    except NotRegularFile as err:
        raise ValueError("a folder, not a file" if err.is_dir else "not a regular file") from None
    except OSError as err:
        raise ValueError(err.strerror or str(err)) from None
    if len(raw) > _MAX_RECORD_BYTES:
        raise ValueError(f"larger than {_MAX_RECORD_BYTES} bytes")
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"not JSON: {err}") from None


def script_of(job_id: str) -> str:
    """The script as submitted, byte for byte (read_text would turn a `\r` in it into `\n`)."""
    return (jobs_dir() / check_job_id(job_id) / SCRIPT_FILE).read_bytes().decode("utf-8")


@dataclass(frozen=True)
class RecentJobs:
    """What `recent_jobs` found: the records, and the record files it could not read."""

    records: list[JobRecord]
    unreadable: list[Path]


def recent(limit: int | None = 20, model: str | None = None) -> list[JobRecord]:
    """Recorded jobs, newest first; unreadable records are skipped (see recent_jobs)."""
    return recent_jobs(limit, model).records


def recent_jobs(limit: int | None = 20, model: str | None = None) -> RecentJobs:
    """Recorded jobs, newest first, and the records that could not be read (one broken file
    must not hide the other jobs). Every record is read as plain JSON to order them, but
    only the `limit` newest become JobRecords (building and validating a JobSpec is most of
    the cost: 1,000 records took 0.27 s, now 0.05 s)."""
    found: list[tuple[float, int, Path, dict[str, Any]]] = []
    unreadable: list[Path] = []
    for path in _record_paths():
        try:
            data = read_record(path)
            spec = data["spec"]
            if model is None or model in (spec.get("model"), spec.get("checkpoint_name")):
                found.append((float(data["submitted_at"]), _numeric(str(data["job_id"])), path, data))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            unreadable.append(path)
    found.sort(key=lambda item: item[:2], reverse=True)
    records: list[JobRecord] = []
    for _, _, path, data in found:
        if limit is not None and len(records) >= limit:
            break
        try:
            records.append(JobRecord.from_json(data))
        except ValueError:
            unreadable.append(path)
    return RecentJobs(records, sorted(unreadable))


def _record_paths() -> Iterator[Path]:
    """Each training job's record file (it may be broken): not staging and replaced records,
    submitit's folder, stray files, nor a prepare-data or export job's (hyperlaunch.runs.tool_jobs)."""
    root = jobs_dir()
    if not root.is_dir():
        return
    for entry in root.iterdir():
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        path = entry / RECORD_FILE
        if not os.path.lexists(path) and (entry / TOOL_FILE).exists():
            continue
        yield path


def run_dir_trainings(run_dir: str) -> list[tuple[str, str, str]]:
    """The recorded jobs whose run folder is `run_dir` (a sweep's elements have folders of their
    own): (job id, checkpoint folder, checkpoint name), oldest first. Read as plain JSON, as
    recent_jobs orders them; a record that cannot be read is skipped."""
    found: list[tuple[int, str, str, str]] = []
    for path in _record_paths():
        try:
            data = read_record(path)
            spec = data["spec"]
            if spec.get("run_dir") == run_dir and not data.get("sweep"):
                job_id = str(data["job_id"])
                found.append((_numeric(job_id), job_id, str(spec["checkpoint_dir"]), str(spec.get("checkpoint_name") or "")))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return [item[1:] for item in sorted(found)]


def _numeric(job_id: str) -> int:
    head = job_id.partition("_")[0]
    return int(head) if is_job_id(job_id) else -1
