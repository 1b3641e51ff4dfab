"""Telling a torn checkpoint from a whole one, and setting a torn one aside.

A checkpoint's commit (hyperlaunch.runtime.checkpoint.commit, the trainer's and scripts' alike)
writes a manifest of its files: each file's size, and a CRC-32 of the small ones (DCP's
`.metadata`, the info file, a script's own small files). Reading every shard back for a checksum
would cost more than the save's 1 % (a 0.6B model's shards are gigabytes; the copy to disk is
what a save spends), so a shard is checked by its size: a truncated or missing file, the tear
disks, file systems and interrupted copies leave, is found before anything is loaded.

A checkpoint found torn, here or where loading it failed for a reason that lies in its files, is
set aside: renamed to `<name>-<N>steps.bad` (a second one of that step `.bad.2`, ...) with the
reason beside its files, never deleted, and the model's `-latest` pointer moved to the newest
complete checkpoint before it (or removed where none is left), atomically. Nothing else reads a
set-aside folder as a checkpoint: its name is no `<name>-<N>steps`.

Standard library only, Python 3.8+: the supervisor checks the checkpoint a round will load."""

from __future__ import annotations

import json
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.atomic_file import TEMP_SUFFIX, write_atomically
from hyperlaunch.core.bounded_read import NotRegularFile, read_regular
from hyperlaunch.core.checkpoints import (
    is_complete,
    list_checkpoints,
    parse_step,
    pointer_path,
    read_pointer,
    write_pointer,
)

MANIFEST_FILE = ".hyperlaunch-files.json"
"""The commit's record of a checkpoint's files: `{"format": 1, "files": {path: {"size": N,
"crc32": C}}}`, paths relative to the checkpoint, crc32 for files of at most CHECKSUM_MAX_BYTES."""
MANIFEST_FORMAT = 1
CHECKSUM_MAX_BYTES = 1 << 20
"""Files this small get a CRC-32 too: metadata and small state, read back in microseconds."""
SET_ASIDE_SUFFIX = ".bad"
REASON_FILE = ".hyperlaunch-bad.json"
"""Why a set-aside checkpoint was set aside: `{"reason": ..., "file": ..., "at": ..., "job": ...}`."""
_MAX_MANIFEST_BYTES = 16 << 20


def manifest(path: Path) -> dict[str, object]:
    """The manifest of the checkpoint folder `path` as it is now (its regular files, but the
    manifest, the set-aside reason and temporary files)."""
    files: dict[str, dict[str, int]] = {}
    root = Path(path)
    for folder, _dirs, names in os.walk(root):
        for name in sorted(names):
            if name in (MANIFEST_FILE, REASON_FILE) or name.endswith(TEMP_SUFFIX):
                continue
            full = Path(folder) / name
            try:
                size = os.lstat(full).st_size
            except OSError:
                continue  # removed while listed: not part of what is committed
            entry = {"size": size}
            if size <= CHECKSUM_MAX_BYTES:
                try:
                    entry["crc32"] = zlib.crc32(full.read_bytes())
                except OSError:
                    continue
            files[full.relative_to(root).as_posix()] = entry
    return {"format": MANIFEST_FORMAT, "files": dict(sorted(files.items()))}


def write_manifest(path: Path) -> None:
    """Record the files of the complete checkpoint `path` (before its pointer moves)."""
    write_atomically(Path(path) / MANIFEST_FILE, (json.dumps(manifest(path), sort_keys=True) + "\n").encode())


@dataclass(frozen=True)  # not kw_only: the supervisor reads this on Python 3.8
class Problem:
    """Why a checkpoint is torn: the file, and what is wrong with it."""

    file: str
    """Relative to the checkpoint."""
    what: str

    def text(self, checkpoint: Path) -> str:
        return f"{Path(checkpoint).name}/{self.file} {self.what}"


def verify(path: Path) -> list[Problem] | None:
    """What is torn in the checkpoint `path` against its manifest: missing files, sizes and
    checksums that differ ([] when none). None where there is nothing to check against: no
    manifest (a checkpoint committed before manifests were written), or one unreadable as a
    whole, which is a problem of its own."""
    root = Path(path)
    try:
        raw = read_regular(root / MANIFEST_FILE, _MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None
    except (NotRegularFile, OSError):
        return [Problem(MANIFEST_FILE, "cannot be read")]
    try:
        document = json.loads(raw)
        files = document["files"]
        if not isinstance(files, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return [Problem(MANIFEST_FILE, "is not a manifest (cut short, or written over)")]
    problems = []
    for name, entry in files.items():
        full = root / name
        try:
            size = os.lstat(full).st_size
        except FileNotFoundError:
            problems.append(Problem(name, "is missing"))
            continue
        except OSError as err:
            problems.append(Problem(name, f"cannot be read ({err.strerror or err})"))
            continue
        expected = entry.get("size") if isinstance(entry, dict) else None
        if size != expected:
            problems.append(Problem(name, f"is {size:,} bytes, {expected:,} when committed" if isinstance(expected, int) else "has no size in the manifest"))
            continue
        crc = entry.get("crc32")
        if isinstance(crc, int):
            try:
                if zlib.crc32(full.read_bytes()) != crc:
                    problems.append(Problem(name, "has other bytes than when committed (CRC-32)"))
            except OSError as err:
                problems.append(Problem(name, f"cannot be read ({err.strerror or err})"))
    return problems


def torn_text(path: Path, problems: list[Problem]) -> str:
    """One line for the torn checkpoint `path`: its first problem, and how many more."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"checkpoint {Path(path).name} is torn: {problems[0].text(path)}{more}"


@dataclass(frozen=True)  # not kw_only: the supervisor reads this on Python 3.8
class SetAside:
    """A checkpoint set aside as torn."""

    path: Path
    step: int
    reason: str
    file: str
    """The file found torn ('' when loading failed without naming one)."""
    at: float
    job: str


def set_aside(ckpt_dir: Path, model: str, path: Path, reason: str, *, file: str = "", job: str = "") -> SetAside:
    """Rename the torn checkpoint `path` of `model` out of the checkpoints (`.bad`, `.bad.2`, ...),
    its reason beside its files, and point `<model>-latest` at the newest complete checkpoint
    left (before it, since it was the newest the pointer could name), or remove the pointer
    where none is left. Never deletes a file."""
    root = Path(ckpt_dir)
    path = Path(path)
    step = parse_step(path.name, model)
    target = _free_name(path)
    os.rename(path, target)  # atomic within the folder: loaders see the old name or none
    aside = SetAside(target, step if step is not None else -1, reason, file, time.time(), job)
    document = {"reason": reason, "file": file, "at": aside.at, "job": job, "was": path.name}
    try:
        write_atomically(target / REASON_FILE, (json.dumps(document, sort_keys=True) + "\n").encode())
    except OSError:
        pass  # the rename is what sets it aside; the reason is for people
    if read_pointer(root, model) == path.name:
        kept = [info for info in list_checkpoints(root, model) if info.complete]
        if kept:
            write_pointer(root, model, kept[-1].path.name)
        else:
            try:
                os.unlink(pointer_path(root, model))
            except FileNotFoundError:
                pass
    return aside


def _free_name(path: Path) -> Path:
    candidate = path.with_name(path.name + SET_ASIDE_SUFFIX)
    number = 2
    while os.path.lexists(candidate):
        candidate = path.with_name(f"{path.name}{SET_ASIDE_SUFFIX}.{number}")
        number += 1
    return candidate


def set_aside_checkpoints(ckpt_dir: Path, model: str) -> list[SetAside]:
    """The checkpoints of `model` set aside in `ckpt_dir`, oldest step first."""
    root = Path(ckpt_dir)
    found = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        base, sep, _rest = entry.name.partition(SET_ASIDE_SUFFIX)
        step = parse_step(base, model) if sep else None
        if step is None or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            document = json.loads(read_regular(Path(entry.path) / REASON_FILE, 1 << 16))
        except (OSError, NotRegularFile, ValueError):
            document = {}
        if not isinstance(document, dict):
            document = {}
        found.append(
            SetAside(
                Path(entry.path), step, str(document.get("reason", "set aside")), str(document.get("file", "")),
                float(document.get("at", 0) or 0), str(document.get("job", "")),
            )
        )
    return sorted(found, key=lambda aside: (aside.step, aside.path.name))


def torn_pointed(ckpt_dir: Path, model: str) -> tuple[Path, list[Problem]] | None:
    """The checkpoint `<model>-latest` names and what is torn in it, when its manifest says it
    is torn; None when it is whole, has no manifest, or there is no complete one named."""
    try:
        named = read_pointer(Path(ckpt_dir), model)
    except Exception:  # noqa: BLE001 - a garbage pointer is the loader's to report
        return None
    if named is None:
        return None
    path = Path(ckpt_dir) / named
    if not is_complete(path) or parse_step(named, model) is None:
        return None
    problems = verify(path)
    return (path, problems) if problems else None
