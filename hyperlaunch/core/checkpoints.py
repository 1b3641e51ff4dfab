"""Checkpoint directory and `-latest` pointer rules, shared by the trainer and the CLI.

Layout inside a checkpoint folder (compatible with the HyperPod reference scripts, so several
models can share one folder):

    <ckpt_dir>/<model>-<N>steps/      one DCP sharded checkpoint after N optimizer steps
    <ckpt_dir>/<model>-<N>steps/.metadata   written last by DCP: the completion marker
    <ckpt_dir>/<model>-<N>steps/.hyperlaunch-committed   or this, for a script's own format
    <ckpt_dir>/<model>-<N>steps/hyperlaunch.json   which model/step wrote it (for checks)
    <ckpt_dir>/<model>-latest          one line: the name of the checkpoint to resume from
    <ckpt_dir>/<model>-final/          the Hugging Face export at the end of training
    <ckpt_dir>/.hyperlaunch-data/      raw --data the trainer prepared (hyperlaunch.data.prepare)

Names that start with '.' are hyperlaunch's own (temp files, the data cache) and never a
checkpoint, a pointer or a model: listing, pruning and `-latest` pass them by.

Torch-free on purpose: the CLI lists checkpoints and chooses the resume point on a login node.
Where a run resumes is hyperlaunch.core.checkpoint_resume's; what pruning removes
hyperlaunch.core.checkpoint_pruning's.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.atomic_file import TEMP_SUFFIX, write_atomically
from hyperlaunch.core.bounded_read import NotRegularFile, read_regular
from hyperlaunch.core.errors import CheckpointError, InvalidInput
from hyperlaunch.core.paths import is_dir

METADATA_FILE = ".metadata"
"""DCP writes this file last (via rename): its presence means the checkpoint is complete."""

COMMITTED_FILE = ".hyperlaunch-committed"
"""Written by hyperlaunch.runtime's commit_checkpoint into a checkpoint without DCP's
`.metadata` (torch.save, safetensors: any format a user's script saves): the script declared it
complete, so it counts as one."""

INFO_FILE = "hyperlaunch.json"
"""Small JSON written by the trainer: model name, step, architecture, world size."""

_STEPS_SUFFIX = re.compile(r"^(?P<step>\d+)steps$")
ANY_CHECKPOINT = re.compile(r"^(?P<model>.+)-(?P<step>\d+)steps$")
"""A checkpoint directory name of any model: `<model>-<N>steps`."""
_MAX_POINTER_BYTES = 4096
"""A pointer holds one directory name (at most 255 bytes): anything longer is not one."""
_MAX_INFO_BYTES = 1 << 20


_MODEL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
"""No leading '.': a hidden name is never a checkpoint (see is_own_entry)."""

DATA_CACHE_DIR = ".hyperlaunch-data"
"""Where the trainer keeps raw --data it prepared, inside the checkpoint folder: on the
filesystem every node shares, kept across restarts, hidden from the checkpoint rules."""


def data_cache_dir(ckpt_dir: Path) -> Path:
    """`<ckpt_dir>/.hyperlaunch-data`."""
    return Path(ckpt_dir) / DATA_CACHE_DIR


def is_own_entry(name: str) -> bool:
    """Whether a name in the checkpoint folder is hyperlaunch's own (a hidden temp file, the
    data cache) rather than a checkpoint, pointer or export."""
    return name.startswith(".")


def is_model_directory(model: str) -> bool:
    """Whether --model names a local Hugging Face model directory rather than a preset: not a
    preset name, and either a path (it holds a separator) or an existing directory."""
    from hyperlaunch.core.models import (
        PRESETS,  # here: the runtime library imports this module on Python 3.8, which models' dataclasses need not run on
    )

    return model not in PRESETS and (os.sep in model or is_dir(model))


def checkpoint_name(model: str, model_name: str | None = None) -> str:
    """The one name a model's checkpoints go by (`<name>-<N>steps`, `<name>-latest`), decided
    here for the trainer, `submit`, `status`, `checkpoints` and `resume` alike: a preset's own
    --model-name when given (a sweep's elements name theirs so); else a preset's own name; for a
    model directory, the name of the directory it resolves to (through symlinks, so two paths
    to one model share its checkpoints), with characters a file name should not hold replaced
    by '_'."""
    if not is_model_directory(model):
        from hyperlaunch.core.models import get_preset  # see is_model_directory

        preset = get_preset(model).name  # an unknown preset is refused, named or not
    if model_name is not None:
        if not _MODEL_NAME.match(model_name):
            raise InvalidInput(f"--model-name {model_name!r}: use letters, digits, '_', '.', '-' (not first: '.')")
        return model_name
    if not is_model_directory(model):
        return preset
    return re.sub(r"^\.|[^A-Za-z0-9_.-]", "_", Path(model).resolve().name)


def checkpoint_dir_name(model: str, step: int) -> str:
    """`<model>-<N>steps`, the directory name of the checkpoint after `step` steps."""
    if step < 0:
        raise CheckpointError(f"checkpoint step must be >= 0, got {step}")
    return f"{model}-{step}steps"


def checkpoint_path(ckpt_dir: Path, model: str, step: int) -> Path:
    return Path(ckpt_dir) / checkpoint_dir_name(model, step)


def pointer_path(ckpt_dir: Path, model: str) -> Path:
    """`<ckpt_dir>/<model>-latest`."""
    return Path(ckpt_dir) / f"{model}-latest"


def final_dir(ckpt_dir: Path, model: str) -> Path:
    """`<ckpt_dir>/<model>-final`, where the Hugging Face export goes."""
    return Path(ckpt_dir) / f"{model}-final"


def parse_step(dir_name: str, model: str) -> int | None:
    """The step of `<model>-<N>steps`, or None when the name is not one of this model's."""
    prefix = f"{model}-"
    if is_own_entry(dir_name) or not dir_name.startswith(prefix):
        return None
    match = _STEPS_SUFFIX.match(dir_name[len(prefix) :])
    return int(match.group("step")) if match else None


def is_complete(path: Path) -> bool:
    """A checkpoint counts only once DCP's `.metadata` exists, or, for one a script saved in a
    format of its own, the runtime library's COMMITTED_FILE."""
    return (Path(path) / METADATA_FILE).is_file() or (Path(path) / COMMITTED_FILE).is_file()


def read_info(path: Path) -> dict[str, object] | None:
    """The trainer's `hyperlaunch.json` of a checkpoint, or None when absent or unreadable."""
    try:
        raw = _read_small(Path(path) / INFO_FILE, _MAX_INFO_BYTES)
    except CheckpointError:
        return None
    try:
        data = json.loads(raw) if raw is not None and len(raw) <= _MAX_INFO_BYTES else None
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _read_small(path: Path, limit: int) -> bytes | None:
    """At most `limit`+1 bytes of a small file the trainer writes (a pointer, an info file),
    None when there is none; anything but a readable regular file there is a CheckpointError
    (hyperlaunch.core.bounded_read: a FIFO cannot hang the reader, nor /dev/zero fill its memory)."""
    try:
        return read_regular(Path(path), limit)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NotRegularFile:
        raise CheckpointError(f"{path} is not a regular file", hint="fix or delete it") from None
    except OSError as err:
        raise CheckpointError(f"cannot read {path}: {err.strerror or err}") from None


def info_text(info: dict[str, object]) -> str:
    """INFO_FILE's text for `info`."""
    return json.dumps(info, sort_keys=True) + "\n"


def write_info(path: Path, info: dict[str, object]) -> None:
    _atomic_write_text(Path(path) / INFO_FILE, info_text(info))


@dataclass(frozen=True)  # not kw_only: hyperlaunch.runtime imports this on Python 3.8
class CheckpointInfo:
    """One `<model>-<N>steps` directory as found on disk."""

    model: str
    """Model (preset) name, the directory prefix."""
    step: int
    """Optimizer steps completed when it was saved."""
    path: Path
    """The directory."""
    complete: bool
    """DCP's `.metadata` exists (or the runtime library's COMMITTED_FILE)."""
    size_bytes: int
    """Total size of the files inside."""
    is_latest: bool
    """The model's `-latest` pointer names this directory."""


def dir_size(path: Path) -> int:
    """Bytes in the files under `path` (a checkpoint's size)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass  # a file removed while we walk (pruning, a save in flight)
    return total


def read_pointer(ckpt_dir: Path, model: str) -> str | None:
    """The directory name in `<model>-latest`, None when there is no pointer.

    Raises CheckpointError when the pointer is unreadable garbage or names another model's
    checkpoint: resuming from the wrong state must never be a guess.
    """
    path = pointer_path(ckpt_dir, model)
    raw = _read_small(path, _MAX_POINTER_BYTES)
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        text = ""
    # The reference scripts write just the name; accept a path and keep its last part.
    name = Path(text).name if text else ""
    if len(raw) > _MAX_POINTER_BYTES or not name or "\n" in text:
        raise CheckpointError(
            f"pointer {path} does not hold a checkpoint directory name",
            hint=f"expected one line like {checkpoint_dir_name(model, 50)}; fix or delete the file",
        )
    if parse_step(name, model) is None:
        other = ANY_CHECKPOINT.match(name)
        if other:
            raise CheckpointError(
                f"pointer {path} names {name}, a checkpoint of model {other.group('model')!r}, not {model!r}",
                hint="fix or delete the pointer file",
            )
        raise CheckpointError(
            f"pointer {path} holds {name[:80]!r}, not a checkpoint directory name",
            hint=f"expected one line like {checkpoint_dir_name(model, 50)}; fix or delete the file",
        )
    return name


def write_pointer(ckpt_dir: Path, model: str, dir_name: str) -> None:
    """Point `<model>-latest` at `dir_name` atomically (temp file, fsync, rename).

    Refuses to point at a checkpoint that is not complete.
    """
    if parse_step(dir_name, model) is None:
        raise CheckpointError(f"{dir_name!r} is not a checkpoint directory name of model {model!r}")
    if not is_complete(Path(ckpt_dir) / dir_name):
        raise CheckpointError(f"refusing to point {model}-latest at incomplete checkpoint {dir_name}")
    _atomic_write_text(pointer_path(ckpt_dir, model), dir_name + "\n")


STALE_TEMP_SECONDS = 600.0
"""A pointer or info temp file this old was left by a writer killed before its rename (a write
takes milliseconds); the next writer of the same file removes it."""


def _atomic_write_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all (hyperlaunch.core.atomic_file), created like any file of the
    user's, so the umask decides who can read the result: teammates share checkpoint folders
    and must read the pointer (mkstemp's 0600 shut them out). Then temp files of killed
    writers are removed."""
    write_atomically(path, text.encode("utf-8"))
    _remove_stale_temps(path)


def _remove_stale_temps(path: Path) -> None:
    """Temp files of `path` left by writers killed before their rename. Only old ones: a young
    one may belong to a writer still at work (two jobs sharing a folder)."""
    prefix = f".{path.name}."
    now = time.time()
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(TEMP_SUFFIX)):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMP_SECONDS:
                os.unlink(entry.path)
        except OSError:
            pass  # another writer removed it first, or it is not ours to remove


def list_checkpoints(ckpt_dir: Path, model: str) -> list[CheckpointInfo]:
    """This model's checkpoint directories, oldest step first. A garbage pointer is ignored
    here (listing must work to diagnose it); hyperlaunch.core.checkpoint_resume reports it."""
    root = Path(ckpt_dir)
    if not root.is_dir():
        return []
    try:
        latest = read_pointer(root, model)
    except CheckpointError:
        latest = None
    found = []
    for entry in root.iterdir():
        step = parse_step(entry.name, model)
        if step is None or not entry.is_dir():
            continue
        found.append(
            CheckpointInfo(
                model=model,
                step=step,
                path=entry,
                complete=is_complete(entry),
                size_bytes=dir_size(entry),
                is_latest=entry.name == latest,
            )
        )
    return sorted(found, key=lambda info: info.step)


def list_models(ckpt_dir: Path) -> list[str]:
    """Model names that have a pointer or a checkpoint directory in `ckpt_dir`, sorted."""
    root = Path(ckpt_dir)
    if not root.is_dir():
        return []
    models: set[str] = set()
    for entry in root.iterdir():
        if is_own_entry(entry.name):
            continue
        if entry.is_file() and entry.name.endswith("-latest"):
            models.add(entry.name[: -len("-latest")])
        elif entry.is_dir():
            match = ANY_CHECKPOINT.match(entry.name)
            if match:
                models.add(match.group("model"))
    return sorted(models)


def pointed_checkpoint(ckpt_dir: Path, model: str) -> Path | None:
    """The complete checkpoint `<model>-latest` names, None when there is no pointer: what a
    user's script resumes from (hyperlaunch.runtime) and what its supervisor tells each round.
    Stricter than checkpoint_resume.choose_resume, which falls back to the newest complete checkpoint: raises
    CheckpointError for a pointer that names garbage, another model's checkpoint or an
    incomplete one."""
    named = read_pointer(Path(ckpt_dir), model)
    if named is None:
        return None
    path = Path(ckpt_dir) / named
    if not is_complete(path):
        raise CheckpointError(f"{pointer_path(ckpt_dir, model)} names {named}, which is not a complete checkpoint")
    return path


def newest_complete(ckpt_dir: Path, model: str) -> CheckpointInfo | None:
    complete = [info for info in list_checkpoints(ckpt_dir, model) if info.complete]
    return complete[-1] if complete else None


def check_writable(ckpt_dir: Path) -> None:
    """Create `ckpt_dir` if needed and prove a file can be written there."""
    root = Path(ckpt_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise CheckpointError(
            f"checkpoint dir {root} is not writable: {err.strerror or err}"
        ) from None
