"""Why loading a checkpoint failed: in its files (torn: set aside, the training goes on from
the one before) or in the job (another model: the user's to fix, nothing is set aside).

DCP raises one CheckpointException for every rank's failures, a BaseException with each rank's
own error inside (`failures`): a truncated shard's "failed finding central directory" or
EOFError, a missing one's FileNotFoundError, unreadable metadata's "metadata is None"; and for a
model of another shape "Size mismatch" or "Missing key". Only the first kind is the
checkpoint's; an error of neither kind is a crash like any other."""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from pathlib import Path

from hyperlaunch.core.errors import CheckpointError, CheckpointTorn

_TORN_TEXT = re.compile(
    r"PytorchStreamReader|central directory|corrupted|pickle data was truncated|metadata is None|unexpected EOF|"
    r"read (?:only )?\d+ bytes|truncated",
    re.IGNORECASE,
)
_SETTINGS_TEXT = re.compile(r"Size mismatch|size mismatch|Missing key|Unexpected key|shape", re.IGNORECASE)


def load_failure(path: Path, err: BaseException) -> CheckpointError | None:
    """The error to stop on for a failed load of the checkpoint `path`: CheckpointTorn where
    the fault lies in its files, CheckpointError where the job's model does not match it, None
    for anything else (raised as it is)."""
    causes = list(_causes(err))
    for cause in causes:
        if isinstance(cause, (ValueError, RuntimeError, KeyError)) and _SETTINGS_TEXT.search(str(cause)):
            return CheckpointError(f"checkpoint {Path(path).name} does not fit this job's model: {_first_line(cause)}")
    for cause in causes:
        if _is_torn(cause):
            file = _file_of(cause, Path(path))
            where = f" ({file})" if file else ""
            return CheckpointTorn(
                Path(path).name, f"checkpoint {Path(path).name} is torn{where}: {type(cause).__name__}: {_first_line(cause)}", file=file
            )
    return None


def _causes(err: BaseException) -> Iterator[BaseException]:
    """Each rank's own error inside DCP's CheckpointException (its `failures`: rank -> the
    error, or (error, traceback)), else the error and what it was raised from."""
    failures = getattr(err, "failures", None)
    if isinstance(failures, dict):
        for _rank, wrapped in sorted(failures.items()):
            cause = wrapped[0] if isinstance(wrapped, tuple) else wrapped
            if isinstance(cause, BaseException):
                yield cause
        return
    seen = err
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]


def _is_torn(cause: BaseException) -> bool:
    if isinstance(cause, (EOFError, FileNotFoundError, pickle.UnpicklingError)):
        return True
    if isinstance(cause, OSError) and not isinstance(cause, PermissionError):
        return True  # EIO and friends: the file system cannot give the bytes back
    return _TORN_TEXT.search(str(cause)) is not None


def _file_of(cause: BaseException, path: Path) -> str:
    """The checkpoint's file an error names, relative to it; '' when it names none."""
    name = getattr(cause, "filename", None)
    if isinstance(name, str) and name:
        try:
            return Path(name).resolve().relative_to(path.resolve()).as_posix()
        except ValueError:
            return Path(name).name
    return ""


def _first_line(cause: BaseException) -> str:
    text = str(cause).strip().splitlines()
    return text[0][:300] if text else "(no message)"
