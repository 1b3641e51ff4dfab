"""Trainer failure records: why the trainer stopped on an error, and whether another attempt
can help. Rank 0 (or whichever rank failed first) writes one per attempt into the file the
supervisor names in TRAINER_FAILURE_FILE_ENV; the supervisor reads its verdict, `status` its
message. Part of the supervisor/trainer protocol (hyperlaunch.core.protocol).

Torch-free (the CLI reads these on a login node); Python 3.8 at run time (the job's supervisor,
hyperlaunch.supervisor, reads the verdict)."""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.errors import (
    CheckpointError,
    CheckpointTorn,
    ConfigError,
    DataError,
    DiskFull,
    InvalidInput,
    ModelUnavailable,
    NodeProblem,
    is_disk_full,
)
from hyperlaunch.core.protocol import read_regular_file

_COUNT = re.compile(r"[0-9]{1,10}")
_CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,250}")
"""A checkpoint folder's name as a failure record carries it: one word, no path."""


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
    CHECKPOINT_TORN = "checkpoint-torn"
    """The checkpoint this round loads is torn (CheckpointTorn: a shard truncated or missing,
    unreadable metadata): the record names it (`checkpoint=`); the supervisor sets it aside and
    starts the round again from the one before, without spending the restart budget."""
    DISK_FULL = "disk-full"
    """No room for a checkpoint or an export on its filesystem (DiskFull), or another write
    that met ENOSPC/EDQUOT: every attempt would meet it again (a checkpoint: after training
    up to the save), so the job ends; free space, then `resume`."""
    NODE_PROBLEM = "node-problem"
    """The node lacks what the job needs, e.g. no GPU for --device cuda (NodeProblem): another
    attempt may land on other nodes, so it is retried."""
    UNEXPECTED = "unexpected"
    """Any other exception: retried like any crash."""
    HANG = "hang"
    """No step (or checkpoint save, or validation pass) finished within the trainer's hang
    limit (hyperlaunch/runtime/watchdog.py): every rank dumped its Python stacks into the log and exited;
    retried like any crash (RestartCause.HANG in the supervisor's markers)."""
    EFA_PLUGIN_MISSING = "efa-plugin-missing"
    """`submit --require-efa`: the training step found no aws-ofi-nccl plugin on a node (written
    by the step script, templates/step.sh.j2): the image or the nodes lack it, no attempt fixes it."""
    SCRIPT_ERROR = "script-error"
    """A user's script called hyperlaunch.runtime.fail(message): its input is wrong, no
    attempt can fix it."""
    SCRIPT_RETRY = "script-retry"
    """A user's script called fail(message, final=False): retried like a crash."""
    SCRIPT_BROKEN = "script-broken"
    """A script job's step output names an error no restart fixes and no rank recorded one:
    Python cannot parse the code or find a module, argparse refuses the arguments, the script
    file is not there (written by the supervisor, hyperlaunch.supervisor.step_errors)."""
    TRAINER_BROKEN = "trainer-broken"
    """The bundled trainer could not start: a Python package missing from the image or the nodes'
    venv. It records this itself for an ImportError it meets (failure_kind); the supervisor
    writes it from the step's output where the trainer died before it could record anything."""


FINAL_FAILURE_KINDS: frozenset[FailureKind] = frozenset(
    {
        FailureKind.INVALID_ARGUMENTS,
        FailureKind.INVALID_DATA,
        FailureKind.MODEL_UNAVAILABLE,
        FailureKind.CHECKPOINT_UNUSABLE,
        FailureKind.DISK_FULL,
        FailureKind.SCRIPT_ERROR,
        FailureKind.SCRIPT_BROKEN,
        FailureKind.TRAINER_BROKEN,
        FailureKind.EFA_PLUGIN_MISSING,
    }
)
"""Failures of the job's own input: every attempt would meet them again, so none is made."""

SCRIPT_FAILURE_KINDS: frozenset[str] = frozenset({FailureKind.SCRIPT_ERROR.value, FailureKind.SCRIPT_BROKEN.value})
"""A user's script's own errors (runtime.fail, or one the supervisor read off its output): shown
as a script error, not the bundled trainer's."""

# First match wins: the subclasses of InvalidInput and CheckpointError come before them.
_KIND_OF_ERROR: tuple[tuple[type[BaseException], FailureKind], ...] = (
    (DataError, FailureKind.INVALID_DATA),
    (ModelUnavailable, FailureKind.MODEL_UNAVAILABLE),
    (DiskFull, FailureKind.DISK_FULL),
    (CheckpointTorn, FailureKind.CHECKPOINT_TORN),
    (CheckpointError, FailureKind.CHECKPOINT_UNUSABLE),
    (NodeProblem, FailureKind.NODE_PROBLEM),
    (InvalidInput, FailureKind.INVALID_ARGUMENTS),
    (ConfigError, FailureKind.INVALID_ARGUMENTS),
)


LIBRARY_IMPORT = re.compile(r"\.so\b|shared object|\bELF\b|undefined symbol|sys\.meta_path|file too short|DLL load")
"""An ImportError of a compiled library, or of an interpreter shutting down: the node (its
driver, a build racing another rank), not the code, so another attempt may not meet it."""


def failure_kind(err: BaseException) -> FailureKind:
    """The kind of failure an exception the trainer stopped on stands for: an OSError for a
    full disk or quota (itself or what it was raised from), wherever it was met (the data's
    cache, a record), is DISK_FULL too. A Python package the trainer cannot import (missing
    from the image or the nodes' venv, or of a version without the name) is TRAINER_BROKEN:
    every attempt would meet it."""
    kind = next((kind for error_class, kind in _KIND_OF_ERROR if isinstance(err, error_class)), FailureKind.UNEXPECTED)
    if kind is FailureKind.UNEXPECTED and any(is_disk_full(e) for e in (err, err.__cause__, err.__context__)):
        return FailureKind.DISK_FULL
    if kind is FailureKind.UNEXPECTED and isinstance(err, ImportError) and not LIBRARY_IMPORT.search(str(err)):
        return FailureKind.TRAINER_BROKEN
    return kind


class FailureVerdict(str, enum.Enum):
    """The first word of a failure record: what the supervisor should do about it."""

    FINAL = "final"
    """End the job now (cause trainer-error), whatever max_restarts allows."""
    RETRY = "retry"
    """A crash like any other: requeue within max_restarts."""


TRAINER_FAILURE_FILE_ENV = "HYPERLAUNCH_TRAINER_FAILURE_FILE"
"""Set by the supervisor for each round to `<run_dir>/trainer-failure-<job id>.<restart
count>`; a trainer run without it (plain torchrun, tests) records nothing."""
TRAINER_FAILURE_PREFIX = "trainer-failure-"
TRAINER_ERROR_PREFIX = "hyperlaunch.train: error: "
"""How rank 0 starts the one line it prints on stderr when it stops on a typed error."""
_FAILURE_MESSAGE_MAX = 500


_REPEATABLE_KINDS = frozenset({FailureKind.UNEXPECTED.value, FailureKind.SCRIPT_RETRY.value})
"""The retried kinds a record's repeats() may find deterministic (hyperlaunch.supervisor)."""
_MACHINE_WORDS = re.compile(
    r"CUDA error|cuda(?:Error|Malloc)|CUBLAS_STATUS|CUDNN_STATUS|\bECC\b|\bXid\b|NCCL|gloo|\bEFA\b|libfabric"
    r"|Connection (?:closed|reset|refused)|Broken pipe|timed? ?out|Timeout|Input/output error|Stale file handle",
    re.IGNORECASE,
)
"""Words of an error that can be the machine's, not the code's: a GPU, the network, a peer that
died, a file system. Such an error met twice at the same step (the first step after a resume,
on the same bad node) is retried within the budget, never taken for deterministic."""
_RANK_SUFFIX = re.compile(r"\s*\(rank [0-9]+\)$")
"""The bundled trainer's `(rank N)` after an unexpected error: another rank may meet it first."""


@dataclass(frozen=True)  # not kw_only: the job's supervisor reads these on Python 3.8
class TrainerFailure:
    """A failure record: why the trainer stopped, written once per attempt by the rank that
    failed first. Two lines: `final|retry <kind> rank=<r>` (parse_trainer_failure reads it
    for the supervisor and `status`), then the one-line message."""

    kind: str
    """A FailureKind value (kept as text: a newer trainer may write a kind this reader lacks)."""
    final: bool
    """The verdict: True for `final`."""
    rank: int | None
    message: str
    checkpoint: str = ""
    """CHECKPOINT_TORN: the torn checkpoint's folder name (`checkpoint=` on the first line)."""
    step: int | None = None
    """The step the trainer was on when it stopped (`step=`: the last one it completed, plus
    one), where it knew; the supervisor compares two rounds' records by it (repeats())."""

    def repeats(self, earlier: TrainerFailure | None) -> bool:
        """Whether this failure is `earlier` again: a failure no restart fixes although its kind
        is retried (an unexpected exception, runtime.fail(final=False)), at the same step, with
        the same line but for the rank that met it first. Never a node's failure or a hang, nor
        an error that may be the machine's (_MACHINE_WORDS)."""
        return (
            earlier is not None
            and self.kind in _REPEATABLE_KINDS
            and self.kind == earlier.kind
            and self.step is not None
            and self.step == earlier.step
            and _RANK_SUFFIX.sub("", self.message) == _RANK_SUFFIX.sub("", earlier.message)
            and not _MACHINE_WORDS.search(self.message)
        )


def trainer_failure_path(run_dir: Path, job_id: str, restart_count: int, round_: int = 0) -> Path:
    """The record of one round of trainers: `<prefix><job>.<restart>`, and `.<round>` after it
    for the rounds the supervisor started inside the same allocation (round 1 and on)."""
    suffix = f".{round_}" if round_ else ""
    return Path(run_dir) / f"{TRAINER_FAILURE_PREFIX}{job_id}.{restart_count}{suffix}"


_FAILURE_NAME = re.compile(re.escape(TRAINER_FAILURE_PREFIX) + r"(?P<job>[0-9_]{1,40})\.(?P<restart>[0-9]{1,6})(?:\.(?P<round>[0-9]{1,6}))?")


def trainer_failure_round(name: str) -> tuple[str, int, int] | None:
    """(job, restart count, round) of a record's file name as trainer_failure_path makes it;
    None for any other name (a rank's temporary file, another file of the run dir)."""
    found = _FAILURE_NAME.fullmatch(name)
    return (found["job"], int(found["restart"]), int(found["round"] or 0)) if found else None


def format_trainer_failure(kind: FailureKind, message: str, rank: int | None, checkpoint: str = "", step: int | None = None) -> str:
    """The record's text; `rank` None where no rank wrote it (the supervisor); `checkpoint` the
    torn checkpoint's folder name, for CHECKPOINT_TORN; `step` the step the trainer was on."""
    verdict = FailureVerdict.FINAL if kind in FINAL_FAILURE_KINDS else FailureVerdict.RETRY
    one_line = " ".join(message.split())[:_FAILURE_MESSAGE_MAX]
    by = f" rank={rank}" if rank is not None else ""
    named = f" checkpoint={checkpoint}" if checkpoint and _CHECKPOINT_NAME.fullmatch(checkpoint) else ""
    at = f" step={step}" if step is not None and step >= 0 else ""
    return f"{verdict.value} {kind.value}{by}{named}{at}\n{one_line}\n"


def parse_trainer_failure(text: str) -> TrainerFailure | None:
    """The record in a failure file's text; None for anything else."""
    head, _, rest = text.partition("\n")
    words = head.split()
    if len(words) < 2 or words[0] not in {v.value for v in FailureVerdict}:
        return None
    rank = next((int(w[5:]) for w in words[2:] if w.startswith("rank=") and _COUNT.fullmatch(w[5:])), None)
    checkpoint = next((w[11:] for w in words[2:] if w.startswith("checkpoint=") and _CHECKPOINT_NAME.fullmatch(w[11:])), "")
    step = next((int(w[5:]) for w in words[2:] if w.startswith("step=") and _COUNT.fullmatch(w[5:])), None)
    return TrainerFailure(
        kind=words[1], final=words[0] == FailureVerdict.FINAL.value, rank=rank, message=rest.strip(), checkpoint=checkpoint, step=step,
    )


def write_trainer_failure(
    kind: FailureKind, message: str, rank: int | None, environ: Mapping[str, str] | None = None, checkpoint: str = "",
    step: int | None = None,
) -> Path | None:
    """Record why this rank stops, unless another rank did first; the file named by
    TRAINER_FAILURE_FILE_ENV, None when unset or when another rank's record is there. Never
    raises: a failure to record must not hide the failure itself."""
    target = (os.environ if environ is None else environ).get(TRAINER_FAILURE_FILE_ENV, "")
    if not target:
        return None
    data = format_trainer_failure(kind, message, rank, checkpoint, step).encode("utf-8", "replace")
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
    # a half-written file for a moment (the supervisor reads only after the step has ended).
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
    """The record at `path`, None when there is none (no failure, or a trainer or script that records none)."""
    raw = read_regular_file(Path(path), limit=_FAILURE_MESSAGE_MAX + 1024)
    return parse_trainer_failure(raw.decode("utf-8", errors="replace")) if raw is not None else None
