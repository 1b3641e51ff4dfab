"""The protocol between the three programs of a job: the batch script (templates/), the trainer
(train/) and `status`/`logs`. Each vocabulary is declared once here, each record's writer and
reader sit side by side, and the template is rendered with these values.

- Attempt markers: one line the script prints at each attempt's start and end (stdout and
  stderr), `### hyperlaunch attempt-end restart=0 job=12 exit=0 cause=completed action=exit
  time=...`; `status` reads why each attempt ended from them, `logs` splits logs at them.
- Exit codes and request files: how the trainer tells the script "I saved, requeue me".
- Trainer failure records: why the trainer stopped, and whether another attempt can help.
- Progress records and the restart budget: which attempts completed a checkpoint, so that
  max_restarts bounds attempts without progress rather than requeues.
- The checkpoint lock: which Slurm job trains into a checkpoint folder and model.
- Metrics records: rank 0's step and event records in `<run_dir>/metrics.jsonl`.

Torch-free and Jinja-free (the CLI reads logs and metrics on a login node), Python 3.10."""

from __future__ import annotations

import enum
import functools
import json
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hyperlaunch.core.bounded_read import read_regular
from hyperlaunch.core.errors import CheckpointError, ConfigError, DataError, InvalidInput, ModelUnavailable, NodeProblem


class RestartCause(str, enum.Enum):
    """Why an attempt ended, as the batch script writes it into its attempt-end marker."""

    COMPLETED = "completed"
    """The training step exited 0."""
    TIME_LIMIT = "time-limit"
    """The save signal (Slurm's warning before the time limit, or someone's) reached the script."""
    REQUEUE_REQUESTED = "requeue-requested"
    """The trainer saved after a stop signal: its requeue-request file, or REQUEUE_EXIT_CODE."""
    CRASH = "crash"
    """The step failed any other way."""
    NODE_FAILURE = "node-failure"
    """The step failed and some of the job's nodes are down: Slurm requeues the job itself."""
    RESTART_LIMIT = "restart-limit"
    """The attempt found the restart budget spent: more than max_restarts attempts in a row
    made no progress, or the job reached RESTART_CEILING restarts."""
    TRAINER_ERROR = "trainer-error"
    """The trainer recorded a failure no retry can fix (a `final` TrainerFailure): not requeued."""
    CHECKPOINT_LOCKED = "checkpoint-locked"
    """Another live Slurm job holds the checkpoint lock of the job's folder and model: the
    attempt ended before training, not requeued (marker field `holder=<job id>`)."""
    HANG = "hang"
    """The trainers made no step for longer than the hang watchdog allows (the trainer's
    `hang` failure record, which names the step): restarted like a crash."""


class AttemptAction(str, enum.Enum):
    """What the script did after an attempt ended."""

    REQUEUE = "requeue"
    EXIT = "exit"
    SLURM_REQUEUE = "slurm-requeue"
    """Nothing: Slurm requeues a job whose node failed by itself."""
    RESTART_IN_ALLOCATION = "restart-in-allocation"
    """The trainers start again in the same allocation, without a trip through the queue: on
    a spare node in place of a lost one (marker field `spare=`), or on the same nodes after a
    crash or hang on healthy ones (--restarts-in-allocation)."""


CAUSE_TEXT: dict[str, str] = {
    RestartCause.COMPLETED.value: "completed",
    RestartCause.TIME_LIMIT.value: "time limit",
    RestartCause.REQUEUE_REQUESTED.value: "preemption",
    RestartCause.CRASH.value: "crash",
    RestartCause.NODE_FAILURE.value: "node failure",
    RestartCause.RESTART_LIMIT.value: "restart limit",
    RestartCause.TRAINER_ERROR.value: "trainer error",
    RestartCause.CHECKPOINT_LOCKED.value: "checkpoint folder in use",
    RestartCause.HANG.value: "hang",
    # What only Slurm's accounting tells (no marker, or the marker's cause refined by it).
    "preemption": "preemption",
    "cancelled": "cancelled",
    "requeued": "requeued",
}
"""The words `status` shows for why an attempt ended, keyed by a RestartCause value or by a
cause only Slurm reports. A stop the trainer saved for (requeue-requested) reads as a
preemption: nothing but a preemption sends that signal outside the time-limit warning."""


def cause_text(key: str) -> str:
    return CAUSE_TEXT.get(key, key)


ATTEMPT_MARKER = "### hyperlaunch attempt-"
"""Prefix of every attempt marker line."""
ATTEMPT_MARKER_PRINTF = ATTEMPT_MARKER + "%s restart=%s job=%s %s time=%s"
"""The script's printf format: event, restart count, job id, `key=value ...`, UTC time.
Events: `start` and `end` of an attempt (one Slurm run of the job), and `restart` when the
trainers start again inside the attempt's allocation (fields `round=<n>`, the round that
starts, and the cause and nodes of the one that ended; AttemptAction.RESTART_IN_ALLOCATION).
An `end` marker after such restarts names its round too."""
_MARKER_FIELD = re.compile(r"(\w+)=(\S*)")
_COUNT = re.compile(r"[0-9]{1,10}")
_JOB_ID = re.compile(r"[0-9]{1,10}(_[0-9]{1,10})?")


def read_regular_file(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of a regular file (at most `limit`+1 of them, so a caller can tell it is
    too long), None when there is none or it is something else: a folder, a FIFO (opened
    without blocking and never read), a device. What a reader of the files the job writes
    uses, so one odd file there cannot hang or crash `status` or `logs`."""
    try:
        return read_regular(Path(path), limit)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None


def format_attempt_marker(event: str, restart: int, job: str, fields_text: str, time: str) -> str:
    """The line the script prints (its printf does the same with ATTEMPT_MARKER_PRINTF)."""
    return ATTEMPT_MARKER_PRINTF % (event, restart, job, fields_text, time)


def parse_attempt_marker(line: str) -> dict[str, str] | None:
    """The fields of an attempt marker line ({'event': 'start'|'end', 'restart': ..., ...}),
    or None for any other line."""
    stripped = line.strip()
    if not stripped.startswith(ATTEMPT_MARKER):
        return None
    event, _, rest = stripped[len(ATTEMPT_MARKER) :].partition(" ")
    marker = {"event": event, **dict(_MARKER_FIELD.findall(rest))}
    # Readers do arithmetic on the restart count: a line whose count is not one (`restart=abc`,
    # another script's digits) is not a marker, and is shown as any other line.
    if "restart" in marker and not _COUNT.fullmatch(marker["restart"]):
        return None
    return marker


REQUEUE_EXIT_CODE = 75
"""Exit code of a training process that received SIGUSR2/SIGTERM, saved a complete checkpoint
and moved the pointer: "saved, please requeue" (75 is sysexits' EX_TEMPFAIL, retry later)."""

SAVE_SIGNAL = "USR2"
"""The signal Slurm's --signal sends before the time limit and the script forwards; the trainer saves on it."""

REQUEUE_REQUEST_PREFIX = "requeue-request-"
"""After a stop signal, once its checkpoint is complete, rank 0 creates
`<run_dir>/requeue-request-<job id>.<restart count>`; the batch script reads it to tell a
saved-and-stopped step from a crash, because torchrun reports every worker failure (75
included) as exit code 1."""


def requeue_request_path(run_dir: Path, job_id: str, restart_count: int) -> Path:
    return Path(run_dir) / f"{REQUEUE_REQUEST_PREFIX}{job_id}.{restart_count}"


PROGRESS_PREFIX = "progress-"
"""Rank 0 creates `<run_dir>/progress-<job id>.<restart count>` (holding the step) each time
a checkpoint completes in that attempt and the pointer names it: the attempt made progress.
The batch script counts back from its attempt over these files: the attempts in a row without
one use the restart budget (--max-restarts), a time-limit or preemption requeue after a save
does not. Written by the trainer, which runs wherever the job runs (the batch host may have no
Python, inside a container job), with the checkpoint rules of hyperlaunch.core.checkpoints."""

RESTART_CEILING = 1000
"""Requeues of one job, with or without progress, past which the script requeues no more: a
guard against a loop that saves and fails forever. Slurm's own limit (MaxBatchRequeue) bounds
only the requeues of jobs whose batch script failed to launch, not `scontrol requeue`."""


def progress_path(run_dir: Path, job_id: str, restart_count: int) -> Path:
    return Path(run_dir) / f"{PROGRESS_PREFIX}{job_id}.{restart_count}"


def write_progress(run_dir: Path, job_id: str, restart_count: int, step: int) -> Path:
    """Record that attempt `restart_count` of `job_id` completed the checkpoint of `step`."""
    path = progress_path(run_dir, job_id, restart_count)
    path.write_text(f"{step}\n")
    return path


def made_progress(run_dir: Path, job_id: str, restart_count: int) -> bool:
    """Whether that attempt completed a checkpoint (the script tests the same: `-e`)."""
    return os.path.lexists(progress_path(run_dir, job_id, restart_count))


def failures_in_a_row(run_dir: Path, job_id: str, ended: int) -> int:
    """How many of the attempts 0..ended-1, counted back from the last, made no progress: the
    restart budget used when attempt `ended` starts. The script's loop, in Python."""
    failures = 0
    while failures < ended and not made_progress(run_dir, job_id, ended - failures - 1):
        failures += 1
    return failures


CHECKPOINT_LOCK_PREFIX = ".hyperlaunch-lock-"
"""`<checkpoint_dir>/.hyperlaunch-lock-<checkpoint name>`: the Slurm job that trains into the
folder's model. The batch script takes it before training (templates/partials/lock.sh.j2): the
lock belongs to a job, not a process, so a requeued attempt of the holder takes it over, and a
holder Slurm no longer runs leaves it stale, to be taken; a live holder ends the attempt
(RestartCause.CHECKPOINT_LOCKED). A hidden name: no checkpoint rule ever counts it. Lines
`job=<id>`, `host=<batch host>`, `time=<UTC>`; the holder is the first `job=` line."""


def checkpoint_lock_path(ckpt_dir: Path, model: str) -> Path:
    return Path(ckpt_dir) / f"{CHECKPOINT_LOCK_PREFIX}{model}"


def format_checkpoint_lock(job_id: str, host: str, time: str) -> str:
    """The lock's text (the script's printf writes the same)."""
    return f"job={job_id}\nhost={host}\ntime={time}\n"


def read_checkpoint_lock(path: Path) -> str | None:
    """The job id holding the lock at `path`, None when there is none (or no job id in it)."""
    raw = read_regular_file(Path(path), limit=4096)
    if raw is None:
        return None
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if line.startswith("job="):
            holder = line[len("job="):].strip()
            return holder if _JOB_ID.fullmatch(holder) else None
    return None


class FailureKind(str, enum.Enum):
    """Why the trainer stopped on an error, as its failure record names it."""

    INVALID_ARGUMENTS = "invalid-arguments"
    """A flag or value the trainer refuses (InvalidInput, ConfigError, argparse's errors)."""
    INVALID_DATA = "invalid-data"
    """--data cannot be read or holds something malformed (DataError)."""
    MODEL_UNAVAILABLE = "model-unavailable"
    """The model or its tokenizer cannot be loaded (ModelUnavailable)."""
    CHECKPOINT_UNUSABLE = "checkpoint-unusable"
    """The checkpoint folder or its pointer cannot be used (CheckpointError)."""
    NODE_PROBLEM = "node-problem"
    """The node lacks what the job needs, e.g. no GPU for --device cuda (NodeProblem): another
    attempt may land on other nodes, so it is retried."""
    UNEXPECTED = "unexpected"
    """Any other exception: retried like any crash."""
    HANG = "hang"
    """No step (or checkpoint save, or validation pass) finished within the trainer's hang
    limit (train/watchdog.py): every rank dumped its Python stacks into the log and exited;
    retried like any crash (RestartCause.HANG in the batch script's markers)."""


FINAL_FAILURE_KINDS: frozenset[FailureKind] = frozenset(
    {FailureKind.INVALID_ARGUMENTS, FailureKind.INVALID_DATA, FailureKind.MODEL_UNAVAILABLE, FailureKind.CHECKPOINT_UNUSABLE}
)
"""Failures of the job's own input: every attempt would meet them again, so none is made."""

# First match wins: the subclasses of InvalidInput come before it.
_KIND_OF_ERROR: tuple[tuple[type[BaseException], FailureKind], ...] = (
    (DataError, FailureKind.INVALID_DATA),
    (ModelUnavailable, FailureKind.MODEL_UNAVAILABLE),
    (CheckpointError, FailureKind.CHECKPOINT_UNUSABLE),
    (NodeProblem, FailureKind.NODE_PROBLEM),
    (InvalidInput, FailureKind.INVALID_ARGUMENTS),
    (ConfigError, FailureKind.INVALID_ARGUMENTS),
)


def failure_kind(err: BaseException) -> FailureKind:
    """The kind of failure an exception the trainer stopped on stands for."""
    return next((kind for error_class, kind in _KIND_OF_ERROR if isinstance(err, error_class)), FailureKind.UNEXPECTED)


class FailureVerdict(str, enum.Enum):
    """The first word of a failure record: what the batch script should do about it."""

    FINAL = "final"
    """End the job now (cause trainer-error), whatever max_restarts allows."""
    RETRY = "retry"
    """A crash like any other: requeue within max_restarts."""


TRAINER_FAILURE_FILE_ENV = "HYPERLAUNCH_TRAINER_FAILURE_FILE"
"""Set by the batch script for each attempt to `<run_dir>/trainer-failure-<job id>.<restart
count>`; a trainer run without it (plain torchrun, tests) records nothing."""
TRAINER_FAILURE_PREFIX = "trainer-failure-"
TRAINER_ERROR_PREFIX = "hyperlaunch.train: error: "
"""How rank 0 starts the one line it prints on stderr when it stops on a typed error."""
_FAILURE_MESSAGE_MAX = 500


@dataclass(frozen=True, kw_only=True)
class TrainerFailure:
    """A failure record: why the trainer stopped, written once per attempt by the rank that
    failed first. Two lines: `final|retry <kind> rank=<r>` (bash reads it with
    `read -r verdict kind rest`), then the one-line message."""

    kind: str
    """A FailureKind value (kept as text: a newer trainer may write a kind this reader lacks)."""
    final: bool
    """The verdict: True for `final`."""
    rank: int | None
    message: str


def trainer_failure_path(run_dir: Path, job_id: str, restart_count: int, round_: int = 0) -> Path:
    """The record of one round of trainers: `<prefix><job>.<restart>`, and `.<round>` after it
    for the rounds the script started inside the same allocation (round 1 and on)."""
    suffix = f".{round_}" if round_ else ""
    return Path(run_dir) / f"{TRAINER_FAILURE_PREFIX}{job_id}.{restart_count}{suffix}"


def format_trainer_failure(kind: FailureKind, message: str, rank: int) -> str:
    verdict = FailureVerdict.FINAL if kind in FINAL_FAILURE_KINDS else FailureVerdict.RETRY
    one_line = " ".join(message.split())[:_FAILURE_MESSAGE_MAX]
    return f"{verdict.value} {kind.value} rank={rank}\n{one_line}\n"


def parse_trainer_failure(text: str) -> TrainerFailure | None:
    """The record in a failure file's text; None for anything else."""
    head, _, rest = text.partition("\n")
    words = head.split()
    if len(words) < 2 or words[0] not in {v.value for v in FailureVerdict}:
        return None
    rank = next((int(w[5:]) for w in words[2:] if w.startswith("rank=") and _COUNT.fullmatch(w[5:])), None)
    return TrainerFailure(kind=words[1], final=words[0] == FailureVerdict.FINAL.value, rank=rank, message=rest.strip())


def write_trainer_failure(kind: FailureKind, message: str, rank: int, environ: Mapping[str, str] | None = None) -> Path | None:
    """Record why this rank stops, unless another rank did first; the file named by
    TRAINER_FAILURE_FILE_ENV, None when unset or when another rank's record is there. Never
    raises: a failure to record must not hide the failure itself."""
    target = (os.environ if environ is None else environ).get(TRAINER_FAILURE_FILE_ENV, "")
    if not target:
        return None
    data = format_trainer_failure(kind, message, rank).encode("utf-8", "replace")
    # Ranks on different nodes share the run dir, and containers can give them the same pid.
    temp = f"{target}.{os.uname().nodename}.{os.getpid()}.tmp"
    try:
        Path(temp).write_bytes(data)
        # link() fails if the record exists (first writer wins) and shows readers the whole
        # file at once; rename() would replace an earlier rank's record.
        os.link(temp, target)
        return Path(target)
    except FileExistsError:
        return None
    except OSError:
        return _write_exclusive(target, data)
    finally:
        _remove(temp)


def _write_exclusive(target: str, data: bytes) -> Path | None:
    # For file systems without hard links: still first writer wins, though a reader could see
    # a half-written file for a moment (the script reads only after every rank has exited).
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return Path(target)
    except OSError:
        return None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def read_trainer_failure(path: Path) -> TrainerFailure | None:
    """The record at `path`, None when there is none (no failure, or an older script)."""
    raw = read_regular_file(Path(path), limit=_FAILURE_MESSAGE_MAX + 1024)
    return parse_trainer_failure(raw.decode("utf-8", errors="replace")) if raw is not None else None


METRICS_FILE = "metrics.jsonl"
"""Rank 0's step records and events in the run dir, one JSON object a line."""


class TrainerEvent(str, enum.Enum):
    """The events the trainer records (EventRecord.event)."""

    STARTED = "started"
    PRETRAINED_LOADED = "pretrained_loaded"
    RESUMED = "resumed"
    VALIDATION = "validation"
    NON_FINITE_LOSS = "non_finite_loss"
    CHECKPOINT_SAVING = "checkpoint_saving"
    CHECKPOINT_COMPLETED = "checkpoint_completed"
    CHECKPOINT_PRUNED = "checkpoint_pruned"
    SIGNAL_RECEIVED = "signal_received"
    HANG = "hang"
    EXPORTED = "exported"
    EXIT = "exit"


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One logged optimizer step (`"type": "step"`)."""

    step: int
    loss: float
    lr: float = 0.0
    grad_norm: float = 0.0
    tokens_per_s: float = 0.0
    tokens_per_s_per_device: float = 0.0
    tflops_per_device: float = 0.0
    mfu: float | None = None
    """Model FLOPs utilisation; None where the device's peak is unknown (CPU, fp32)."""
    peak_memory_bytes: int = 0
    """The largest of every rank's peak: device memory on GPU, resident set on CPU."""
    peak_memory_bytes_per_rank: tuple[int, ...] = ()
    step_time_s: float = 0.0
    tokens_seen: int = 0
    samples_consumed: int = 0
    world_size: int = 1
    time: float = 0.0
    job_id: str | None = None
    """The Slurm job that wrote it: a run dir is shared by a job and the jobs resuming it."""
    restart: int | None = None
    round: int | None = None
    """The round of trainers within the attempt (restarts inside the allocation), 0 for the first."""

    def to_json(self) -> dict[str, Any]:
        return _without_none({"type": "step", **{f.name: _plain(getattr(self, f.name)) for f in fields(self)}}, keep=("mfu",))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord | None:
        return _build(cls, data)


@dataclass(frozen=True, kw_only=True)
class EventRecord:
    """Something the trainer did or saw (`"type": "event"`), with the event's own fields."""

    event: str
    """A TrainerEvent value."""
    message: str = ""
    time: float = 0.0
    step: int | None = None
    job_id: str | None = None
    restart: int | None = None
    round: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    """The event's own fields (exit_code, val_loss, path, ...), stored at the record's top level."""

    def to_json(self) -> dict[str, Any]:
        known = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "details"}
        return _without_none({"type": "event", **dict(self.details), **known})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EventRecord | None:
        names = {f.name for f in fields(cls)} | {"type"}
        record = _build(cls, data)
        if record is None:
            return None
        return cls(**{**record.__dict__, "details": {k: v for k, v in data.items() if k not in names}})

    def get(self, name: str, default: Any = None) -> Any:
        """A detail field (or a known one) by name."""
        return getattr(self, name) if name in self.__dataclass_fields__ and name != "details" else self.details.get(name, default)


MetricsRecord = StepRecord | EventRecord


def metrics_line(record: MetricsRecord) -> str:
    """The record as one metrics.jsonl line (keys sorted, as readers diff them)."""
    return json.dumps(record.to_json(), sort_keys=True) + "\n"


def parse_metrics_line(line: str) -> MetricsRecord | None:
    """The record on one metrics.jsonl line; None for a line cut mid-write by a crash, or any
    other line (readers skip those)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if data.get("type") == "step":
        return StepRecord.from_json(data)
    if data.get("type") == "event":
        return EventRecord.from_json(data)
    return None


def _build(cls: Any, data: Mapping[str, Any]) -> Any:
    """A record from a metrics line, None when it is not one: a required field missing, or a
    field of the wrong type (`"loss": "abc"`, `"step": true`). A null where the field has a
    default counts as absent; another version's extra fields are kept by the caller."""
    kinds = _field_kinds(cls)
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name not in kinds or (value is None and not _accepts(kinds[name], None)):
            continue
        value = tuple(value) if isinstance(value, list) else value
        if not _accepts(kinds[name], value):
            return None
        values[name] = value
    try:
        return cls(**values)
    except TypeError:  # a required field missing: not a record of this kind
        return None


@functools.cache
def _field_kinds(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _accepts(kind: Any, value: Any) -> bool:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return True
    if origin is tuple:
        return isinstance(value, tuple) and all(_accepts(args[0], item) for item in value)
    if origin in (typing.Union, types.UnionType):  # X | None
        return any(_accepts(arg, value) for arg in args)
    if kind is type(None):
        return value is None
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    if origin is not None:  # Mapping[str, Any]
        return isinstance(value, Mapping)
    return isinstance(value, kind)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _without_none(data: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None or k in keep}
