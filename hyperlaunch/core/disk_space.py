"""Room on a filesystem for what hyperlaunch writes there: a checkpoint, an export.

A full filesystem is not a crash another attempt can fix: each attempt would train up to its
next save and fail there again, and on shared storage (FSx, NFS) every other job writing
there fails with it. So the writers check before they write (`check_room`: the size of what
they are about to write against the free space), and a write that still meets ENOSPC or
EDQUOT (another writer filled it meanwhile, a quota) becomes a DiskFull that names the
folder and the figures (`disk_full_error`), never a bare OSError.

Torch-free: DCP's CheckpointException is read by its `failures` mapping, not imported."""

from __future__ import annotations

import errno
import os
import shutil
import typing
from collections.abc import Mapping
from pathlib import Path

from hyperlaunch.core.errors import DiskFull, is_disk_full

CHECKPOINT_BYTES_PER_PARAM = 12
"""A bundled trainer's checkpoint: fp32 weights and AdamW's two moments, 4 bytes each."""
EXPORT_BYTES_PER_PARAM = 4
"""Its `<model>-final` export: fp32 weights."""
MIB = 1 << 20


def format_size(size_bytes: int) -> str:
    """Binary units, as `du -h` shows them."""
    if size_bytes < 1024:
        return f"{size_bytes} B"
    size = float(size_bytes)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            return f"{size:.1f} {unit}"
    return f"{size / 1024:.1f} TiB"


def checkpoints_held(max_steps: int, every: int, keep_last: int) -> int:
    """How many checkpoints a run to `max_steps` has on disk at its fullest: one each `every`
    steps and one at the end (only the end for 0), or with `keep_last` K that many and the
    next (the oldest is removed only once the next is complete)."""
    saves = 1 if every <= 0 else -(-max_steps // every)
    return saves if keep_last <= 0 else min(saves, keep_last + 1)


def free_bytes(folder: Path) -> int | None:
    """Free bytes (for this user) on the filesystem `folder` is or will be on: the nearest
    folder of its that exists; None when that cannot be asked."""
    try:  # exists() too raises where a folder on the way cannot be read
        at = Path(os.path.abspath(folder))
        while not at.exists() and at.parent != at:
            at = at.parent
        return shutil.disk_usage(at).free
    except OSError:
        return None


def check_room(folder: Path, needed: int, what: str, hint: str | None = None) -> None:
    """DiskFull when the filesystem of `folder` has less than `needed` bytes free for `what`
    (a noun: "the export of m-20steps", "checkpoint m-20steps"), with a margin (`slack`: an
    estimate may be low, and the pointer and records follow); nothing when it has, or cannot
    be asked."""
    free = free_bytes(folder)
    if free is not None and free < needed + slack(needed):
        raise DiskFull(f"no room for {what}: it needs about {format_size(needed)} in {folder}, which has {format_size(free)} free", hint=hint)


def slack(needed: int) -> int:
    """The room kept beyond a write's size: 2 % and 1 MiB."""
    return needed // 50 + MIB


def job_reference(environ: Mapping[str, str]) -> str:
    """The running job as hyperlaunch names it (a sweep's element: ARRAY_TASK), for a hint;
    JOB outside Slurm."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return environ.get("SLURM_JOB_ID") or "JOB"


def rank_failures(err: BaseException) -> dict[int, BaseException]:
    """Each rank's exception inside DCP's CheckpointException (`failures`: rank -> (exception,
    trace)); {} for any other error."""
    failures = getattr(err, "failures", None)
    if not isinstance(failures, dict):
        return {}
    found = {rank: failure[0] if isinstance(failure, tuple) and failure else failure for rank, failure in failures.items()}
    return {rank: inner for rank, inner in found.items() if isinstance(inner, BaseException)}


def disk_full_cause(err: BaseException) -> OSError | None:
    """The ENOSPC or EDQUOT OSError behind `err`: itself, its cause or context, or one rank's
    failure inside DCP's CheckpointException (`failures`: rank -> (exception, trace))."""
    seen: set[int] = set()
    pending: list[BaseException] = [err]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if is_disk_full(current):
            return typing.cast(OSError, current)
        pending.extend(rank_failures(current).values())
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def disk_full_error(err: BaseException, folder: Path, what: str, needed: int | None = None, hint: str | None = None) -> DiskFull | None:
    """The DiskFull for a write into `folder` that failed with `err`, when a full disk or quota
    is behind it (disk_full_cause); None for any other failure. No free-space figure: what the
    failed write left, or removed, would make it mean nothing."""
    cause = disk_full_cause(err)
    if cause is None:
        return None
    reason = "disk quota exceeded" if cause.errno == errno.EDQUOT else "no space left on device"
    size = f" (it needs about {format_size(needed)})" if needed else ""
    return DiskFull(f"{what}: {reason} in {folder}{size}", hint=hint)
