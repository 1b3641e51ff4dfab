"""The protocol between the three programs of a job: its supervisor (hyperlaunch.supervisor), the trainer
(train/) and `status`/`logs`. Each vocabulary is declared once here, each record's writer and
reader sit side by side, and the supervisor and `status` apply the same rules (the restart budget).

- Attempt markers: one line the supervisor prints at each attempt's start and end (stdout and
  stderr), `### hyperlaunch attempt-end restart=0 job=12 exit=0 cause=completed action=exit
  time=...`; `status` reads why each attempt ended from them, `logs` splits logs at them.
- Exit codes, the save signal and request files: how the trainer tells the supervisor "I saved,
  requeue me".
- Progress records and the restart budget: which attempts completed a checkpoint, so that
  max_restarts bounds attempts without progress rather than requeues.
- The checkpoint lock: which Slurm job trains into a checkpoint folder and model.

The trainer's failure records (why it stopped, and whether another attempt can help) are in
hyperlaunch.core.trainer_failures, rank 0's metrics records in hyperlaunch.core.metrics_records.

Torch-free and Jinja-free (the CLI reads logs and metrics on a login node); Python 3.8 at run
time: the job's supervisor (hyperlaunch.supervisor) applies these rules on the batch host."""

from __future__ import annotations

import enum
import json
import os
import re
from pathlib import Path

from hyperlaunch.core.bounded_read import read_regular


class RestartCause(str, enum.Enum):
    """Why an attempt ended, as the supervisor writes it into its attempt-end marker."""

    COMPLETED = "completed"
    """The training step exited 0."""
    TIME_LIMIT = "time-limit"
    """The save signal (Slurm's warning before the time limit, or someone's) reached the supervisor."""
    REQUEUE_REQUESTED = "requeue-requested"
    """The trainer saved after a stop signal (or, with --no-checkpoints, stopped): its
    requeue-request file, or REQUEUE_EXIT_CODE."""
    CRASH = "crash"
    """The step failed any other way."""
    NODE_FAILURE = "node-failure"
    """Some of the job's nodes were lost: the probe found them gone while the step ran, or Slurm
    lists them down, drained, failed or not responding once it ended."""
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
    CHECKPOINT_TORN = "checkpoint-torn"
    """The checkpoint the round loaded is torn (the trainer's `checkpoint-torn` record names it):
    set aside, and the round started again from the one before inside the allocation, without
    spending the restart budget (marker field `checkpoint=<name>`)."""


class AttemptAction(str, enum.Enum):
    """What the supervisor did after an attempt ended."""

    REQUEUE = "requeue"
    EXIT = "exit"
    SLURM_REQUEUE = "slurm-requeue"
    """Nothing, left to Slurm's own requeue of a job whose node failed: written by supervisors
    before 2026-11-26 (it ended the job FAILED where Slurm did not requeue), still read."""
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
    RestartCause.CHECKPOINT_TORN.value: "torn checkpoint",
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
"""The marker's format: event, restart count, job id, `key=value ...`, UTC time.
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


def json_object(line: str | bytes) -> dict | None:
    """The JSON object on a records file's line; None for a line cut mid-write by a crash, or
    anything else (readers skip those)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def format_attempt_marker(event: str, restart: int, job: str, fields_text: str, time: str) -> str:
    """The line the supervisor prints at an attempt's start and end, and at a new round."""
    return ATTEMPT_MARKER_PRINTF % (event, restart, job, fields_text, time)


def parse_marker_fields(text: str) -> dict[str, str]:
    """A marker's `key=value ...` words."""
    return dict(_MARKER_FIELD.findall(text))


def parse_attempt_marker(line: str) -> dict[str, str] | None:
    """The fields of an attempt marker line ({'event': 'start'|'end', 'restart': ..., ...}),
    or None for any other line."""
    stripped = line.strip()
    if not stripped.startswith(ATTEMPT_MARKER):
        return None
    event, _, rest = stripped[len(ATTEMPT_MARKER) :].partition(" ")
    marker = {"event": event, **parse_marker_fields(rest)}
    # Readers do arithmetic on the restart count: a line whose count is not one (`restart=abc`,
    # another script's digits) is not a marker, and is shown as any other line.
    if "restart" in marker and not _COUNT.fullmatch(marker["restart"]):
        return None
    return marker


REQUEUE_EXIT_CODE = 75
"""Exit code of a training process that received SIGUSR2/SIGTERM, saved a complete checkpoint
and moved the pointer: "saved, please requeue" (75 is sysexits' EX_TEMPFAIL, retry later). A
run with --no-checkpoints saves nothing and asks the same: its requeue starts over."""
SAVE_SIGNAL = "USR2"
"""The signal Slurm's --signal sends before the time limit and the supervisor passes on to the training step; the trainer saves on it."""

REQUEUE_REQUEST_PREFIX = "requeue-request-"
"""After a stop signal, once its checkpoint is complete, rank 0 creates
`<run_dir>/requeue-request-<job id>.<restart count>`; the supervisor reads it to tell a
saved-and-stopped step from a crash, because torchrun reports every worker failure (75
included) as exit code 1."""


def requeue_request_path(run_dir: Path, job_id: str, restart_count: int) -> Path:
    return Path(run_dir) / f"{REQUEUE_REQUEST_PREFIX}{job_id}.{restart_count}"


PROGRESS_PREFIX = "progress-"
"""Rank 0 creates `<run_dir>/progress-<job id>.<restart count>` (holding the step) each time
a checkpoint completes in that attempt and the pointer names it: the attempt made progress.
The supervisor counts back from its attempt over these files: the attempts in a row without
one use the restart budget (--max-restarts), a time-limit or preemption requeue after a save
does not. Written where the checkpoint completes, by the trainer or a script's commit
(hyperlaunch.runtime.checkpoint), with the checkpoint rules of hyperlaunch.core.checkpoints."""

RESTART_CEILING = 1000
"""Requeues of one job, with or without progress, past which the supervisor requeues no more: a
guard against a loop that saves and fails forever. Slurm's own limit (MaxBatchRequeue) bounds
only the requeues of jobs whose batch script failed to launch, not `scontrol requeue`."""


def progress_path(run_dir: Path, job_id: str, restart_count: int) -> Path:
    return Path(run_dir) / f"{PROGRESS_PREFIX}{job_id}.{restart_count}"


def write_progress(run_dir: Path, job_id: str, restart_count: int, step: int) -> Path:
    """Record that attempt `restart_count` of `job_id` completed the checkpoint of `step`."""
    path = progress_path(run_dir, job_id, restart_count)
    path.write_text(f"{step}\n")
    return path


def progress_step(run_dir: Path, job_id: str, restart_count: int) -> int:
    """The step in that attempt's progress record, 0 when there is none (or it holds no step):
    a larger one later in the same attempt means a new checkpoint."""
    raw = read_regular_file(progress_path(run_dir, job_id, restart_count), limit=64)
    first = raw.decode("utf-8", errors="replace").partition("\n")[0].strip() if raw is not None else ""
    return int(first) if _COUNT.fullmatch(first) else 0


def made_progress(run_dir: Path, job_id: str, restart_count: int) -> bool:
    """Whether that attempt completed a checkpoint."""
    return os.path.lexists(progress_path(run_dir, job_id, restart_count))


ENDED_PREFIX = "ended-"
"""The supervisor writes `<run_dir>/ended-<job id>.<restart count>` (holding the RestartCause
value) when an attempt ends; the next attempt tells its trainers why they start again
(hyperlaunch.core.trackers.RESTART_CAUSE_ENV). An attempt whose batch host died writes none."""


def write_attempt_end(run_dir: Path, job_id: str, restart_count: int, cause: str) -> None:
    (Path(run_dir) / f"{ENDED_PREFIX}{job_id}.{restart_count}").write_text(f"{cause}\n")


def previous_attempt_cause(run_dir: Path, job_id: str, restart_count: int) -> str | None:
    """Why attempt `restart_count - 1` ended, as it wrote; "requeued" where it wrote nothing (its
    node died, or Slurm requeued it), None for a first attempt."""
    if restart_count <= 0:
        return None
    raw = read_regular_file(Path(run_dir) / f"{ENDED_PREFIX}{job_id}.{restart_count - 1}", limit=64)
    cause = raw.decode("utf-8", errors="replace").strip() if raw is not None else ""
    return cause if cause in CAUSE_TEXT else "requeued"


def failures_in_a_row(run_dir: Path, job_id: str, ended: int) -> int:
    """How many of the attempts 0..ended-1, counted back from the last, made no progress: the
    restart budget used when attempt `ended` starts (the supervisor counts so, and `status`)."""
    failures = 0
    while failures < ended and not made_progress(run_dir, job_id, ended - failures - 1):
        failures += 1
    return failures


def failures_after(made_progress_now: bool, failures: int) -> int:
    """The failures in a row once an attempt (or round) ends without completing its run: none
    when it completed a checkpoint, one more otherwise."""
    return 0 if made_progress_now else failures + 1


def budget_spent(failures: int, max_restarts: int) -> bool:
    """More attempts in a row without progress than --max-restarts allows: no requeue."""
    return failures > max_restarts


def may_requeue(failures: int, restart_count: int, max_restarts: int) -> bool:
    """Whether attempt `restart_count`, ended with `failures` in a row, may go back to the queue."""
    return not budget_spent(failures, max_restarts) and restart_count < RESTART_CEILING


def attempts_text(count: int) -> str:
    """`1 attempt`, `3 attempts`."""
    return f"{count} attempt{'' if count == 1 else 's'}"


def refusal_at_start(failures: int, restart_count: int, max_restarts: int) -> str | None:
    """Why attempt `restart_count` must not train (Slurm requeues a job on a node failure by
    itself, whatever the budget says): the message, or None when it may."""
    if budget_spent(failures, max_restarts):
        return (
            f"restart limit reached: {attempts_text(failures)} in a row made no progress (no new checkpoint);"
            f" --max-restarts allows {max_restarts}"
        )
    if restart_count > RESTART_CEILING:
        return f"restart ceiling reached: this would be restart {restart_count} of at most {RESTART_CEILING}"
    return None


def refusal_to_requeue(failures: int, restart_count: int, max_restarts: int) -> str:
    """Why an attempt that `may_requeue` refused is not requeued."""
    if budget_spent(failures, max_restarts):
        return (
            f"not requeued: {attempts_text(failures)} in a row made no progress (no new checkpoint);"
            f" --max-restarts allows {max_restarts}"
        )
    return f"not requeued: restart {restart_count} reached the ceiling of {RESTART_CEILING}"


CHECKPOINT_LOCK_PREFIX = ".hyperlaunch-lock-"
"""`<checkpoint_dir>/.hyperlaunch-lock-<checkpoint name>`: the Slurm job that trains into the
folder's model. The supervisor takes it before training (hyperlaunch.supervisor.lock): the
lock belongs to a job, not a process, so a requeued attempt of the holder takes it over, and a
holder Slurm no longer runs leaves it stale, to be taken; a live holder ends the attempt
(RestartCause.CHECKPOINT_LOCKED). A hidden name: no checkpoint rule ever counts it. Lines
`job=<id>`, `host=<batch host>`, `time=<UTC>`; the holder is the first `job=` line."""


def checkpoint_lock_path(ckpt_dir: Path, model: str) -> Path:
    return Path(ckpt_dir) / f"{CHECKPOINT_LOCK_PREFIX}{model}"


def format_checkpoint_lock(job_id: str, host: str, time: str) -> str:
    """The lock's text, as the supervisor writes it."""
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
