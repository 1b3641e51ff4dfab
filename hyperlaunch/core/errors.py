"""Typed errors. Every failure a user can cause or meet maps to one of these, and the CLI
turns each into one line on stderr and a documented exit code (see EXIT_CODES)."""

from __future__ import annotations

import errno


class HyperlaunchError(Exception):
    """Base class: `str(err)` is the one line shown to the user."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        text = " ".join(str(self).split())
        return f"{text} ({self.hint})" if self.hint else text


class InvalidInput(HyperlaunchError):
    """A flag, preset name or value is not valid; the message lists what is."""

    exit_code = 2


class DataError(InvalidInput):
    """The trainer's --data cannot be read, or a record in it is malformed (names file and line)."""


class ModelUnavailable(InvalidInput):
    """The trainer cannot load the model (its config or weights) or its tokenizer."""


class CodeSnapshotTooLarge(InvalidInput):
    """The code a job would run from is over --code-limit-mb: the message names the largest
    files, which are most often data or checkpoints that belong outside the code's folder."""


class ConfigError(HyperlaunchError):
    """A hyperlaunch.toml (or profile in it) cannot be read or holds unknown keys."""

    exit_code = 3


class SlurmError(HyperlaunchError):
    """A Slurm command failed or refused: sbatch's own message is carried along."""

    exit_code = 4


class ClusterError(HyperlaunchError):
    """The local dev cluster cannot be brought up, reached or changed."""

    exit_code = 5


class CheckpointError(HyperlaunchError):
    """Checkpoint directory or pointer problems: missing, incomplete, another model's."""

    exit_code = 6


class CheckpointTorn(CheckpointError):
    """A checkpoint that cannot be loaded for a reason that lies in its files (a truncated or
    missing shard, metadata that does not parse, a size or checksum other than its commit
    recorded: hyperlaunch.core.checkpoint_integrity). Not the job's fault: the supervisor sets
    it aside and the training continues from the checkpoint before it."""

    def __init__(self, checkpoint: str, message: str, *, file: str = "") -> None:
        super().__init__(message)
        self.checkpoint = checkpoint
        """The checkpoint folder's name (`<name>-<N>steps`)."""
        self.file = file
        """The file found torn, relative to it ('' when the load named none)."""


class DiskFull(CheckpointError):
    """A checkpoint or an export does not fit in the free space of its filesystem, or met
    ENOSPC/EDQUOT while writing (hyperlaunch.core.disk_space): the message names the folder
    and the figures. The trainer ends the job on it (another attempt would meet it again)."""


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""No space left on device; disk quota exceeded: what DiskFull stands for."""


def is_disk_full(err: BaseException | None) -> bool:
    """An OSError for no space left on device or a disk quota exceeded."""
    return isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS


class JobNotFound(HyperlaunchError):
    """No recorded job matches what was asked for."""

    exit_code = 7


class RecordUnreadable(JobNotFound):
    """A job's record exists but cannot be read or no longer validates (the message names the
    file): commands about that job stop; lists show the other jobs and warn about it."""


class ChecksFailed(HyperlaunchError):
    """`hyperlaunch doctor` found at least one failing check (warnings alone exit 0)."""

    exit_code = 8


class NodeProblem(HyperlaunchError):
    """The trainer's node lacks what the job needs (no GPU for --device cuda): not the input's
    fault, so the supervisor retries it, perhaps on other nodes."""

    exit_code = 9


class AwsError(HyperlaunchError):
    """An AWS API call failed (no credentials or region, denied, not found, unreachable):
    AWS's own code and message are carried along."""

    exit_code = 10


class JobConflict(HyperlaunchError):
    """Another live job trains into the same checkpoint folder and model, or the job to resume
    still runs: starting this one now would train a second copy."""

    exit_code = 11


EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "unexpected internal error (set HYPERLAUNCH_DEBUG=1 for the traceback)",
    2: "invalid input: a flag, preset or value (the message lists valid ones); from the trainer also bad --data or a model it cannot load",
    3: "configuration error: hyperlaunch.toml or the user config (unreadable, not a file, unknown keys), or HYPERLAUNCH_HOME not a folder",
    4: "Slurm refused or failed (its message is shown)",
    5: "dev cluster error (the message names the log to read), or `dev-cluster status`: not running",
    6: "checkpoint error, or no room for a checkpoint or an export on its filesystem (the message names the folder and the figures)",
    7: "job not found, or its record cannot be read (the message names the file)",
    8: "doctor: at least one check failed",
    9: "the trainer: this node lacks what the job needs (e.g. no CUDA device for --device cuda)",
    10: "AWS refused or failed (no credentials or region, access denied, no such cluster; AWS's message is shown)",
    11: "another live job trains into the same checkpoint folder and model, or the job to resume still runs (the message names it)",
    130: "interrupted",
}
