"""The checkpoints other trainers write, found without their libraries and without the runtime
library: a script that saves the way its framework does still counts as progress (the restart
budget resets), `status` shows its step, and a requeue resumes from the newest complete one.

    transformers  <dir>/checkpoint-<N>/            Trainer: trainer_state.json, written after
                                                   the model and optimizer, holds global_step
    lightning     <dir>/**/<name>.ckpt             ModelCheckpoint: one torch.save file each,
                                                   `last.ckpt` too; step=<N> in its name or its
                                                   global_step inside
    dcp           <dir>/**/step-<N>/.metadata      torchtitan and plain DCP: .metadata last
    torch-save    <dir>/**/<name>.pt or .pth       one torch.save file (nanoGPT's out/ckpt.pt):
                                                   its iter_num / step / global_step inside

A half-written one is never chosen: a checkpoint folder without its last file is passed by, and
a torch.save file is a zip archive, whose directory is written last (a torn one has none). The
step inside a torch.save file is read from its pickle with every class stubbed: nothing of the
file runs, and torch is not needed. Stdlib only, Python 3.8: the supervisor reads it on the
batch host."""

from __future__ import annotations

import json
import os
import pickle
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

AUTO, OFF = "auto", "off"
LAYOUTS = ("transformers", "lightning", "dcp", "torch-save")
CHOICES = (AUTO, *LAYOUTS, OFF)
"""--checkpoint-layout: auto finds any of LAYOUTS; off counts only what the runtime library
commits (`<name>-latest`)."""

MAX_DEPTH = 4
"""How deep below a folder checkpoints are looked for: Lightning's
lightning_logs/version_0/checkpoints/x.ckpt is 3 below the working folder."""
MAX_ENTRIES = 20_000
"""Entries looked at, at most, in one search: a dataset in the working folder is not walked whole."""
MAX_PICKLE_BYTES = 64 << 20
"""A torch.save file's pickle (its tensors are stored apart): larger is not a checkpoint's."""

_HF_DIR = re.compile(r"^checkpoint-(\d+)$")
_OWN_DIR = re.compile(r"^.+-(\d+steps(\.bad.*)?|latest|final)$")
"""hyperlaunch's own `<name>-<N>steps` (set aside: `.bad`), `-latest` and `-final`: the pointer's
and the runtime library's, whatever files a script saved into them."""
_STEP_DIR = re.compile(r"^step-(\d+)$")
_STEP_IN_NAME = re.compile(r"(?:^|[^A-Za-z])step[=_-]?(\d+)")
_TORCH_SUFFIXES = (".pt", ".pth")
_SKIPPED = ("__pycache__", "node_modules", "wandb", "mlruns")
_STEP_KEYS = ("global_step", "iter_num", "step", "iteration", "num_updates")


@dataclass(frozen=True)
class Found:
    """One complete checkpoint: where, what wrote it, its step where known, when."""

    path: str
    layout: str
    step: int | None
    mtime: float

    def order(self) -> tuple[int, float]:
        """Newer first by step, then by time (last.ckpt and a step-N.ckpt of the same step)."""
        return (self.step if self.step is not None else -1, self.mtime)


def newest(roots: list[str], layout: str = AUTO) -> Found | None:
    """The newest complete checkpoint of `layout` (AUTO: of any) under `roots`, or None."""
    return choose(find(roots) if layout != OFF else [], layout)


def of_layout(found: list[Found], layout: str) -> list[Found]:
    """Those of `found` that `layout` counts (AUTO: all; OFF: none)."""
    return [item for item in found if layout == AUTO or item.layout == layout]


def choose(found: list[Found], layout: str) -> Found | None:
    """The newest of `found` that `layout` counts, or None."""
    found = of_layout(found, layout)
    if not found:
        return None
    if layout == AUTO:
        # Several frameworks' files in one folder: the one written last is the training's.
        latest = max(found, key=lambda item: item.mtime)
        found = [item for item in found if item.layout == latest.layout]
    return max(found, key=Found.order)


def find(roots: list[str]) -> list[Found]:
    """Every complete checkpoint of any layout under `roots` (each path once)."""
    seen: dict[str, Found] = {}
    budget = [MAX_ENTRIES]
    for root in roots:
        for item in _walk(root, 0, budget):
            seen.setdefault(os.path.realpath(item.path), item)
    return list(seen.values())


def _walk(folder: str, depth: int, budget: list[int]) -> Iterator[Found]:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in sorted(entries, key=lambda e: e.name):
        budget[0] -= 1
        if budget[0] < 0:
            return
        name = entry.name
        if name.startswith(".") or name in _SKIPPED or _OWN_DIR.match(name):
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            item = _checkpoint_folder(entry.path, name)
            if item is not None:
                yield item
            elif depth < MAX_DEPTH and not _HF_DIR.match(name) and not _STEP_DIR.match(name):
                yield from _walk(entry.path, depth + 1, budget)
        elif entry.is_file(follow_symlinks=False):
            item = _checkpoint_file(entry.path, name)
            if item is not None:
                yield item


def _checkpoint_folder(path: str, name: str) -> Found | None:
    hf = _HF_DIR.match(name)
    if hf:
        state = _read_json(os.path.join(path, "trainer_state.json"))
        if state is None:
            return None  # still being written, or torn
        step = state.get("global_step")
        return Found(path, "transformers", step if isinstance(step, int) else int(hf.group(1)), _mtime(path, "trainer_state.json"))
    dcp = _STEP_DIR.match(name)
    if dcp and os.path.isfile(os.path.join(path, ".metadata")):
        return Found(path, "dcp", int(dcp.group(1)), _mtime(path, ".metadata"))
    return None


def _checkpoint_file(path: str, name: str) -> Found | None:
    if name.endswith(".ckpt"):
        layout = "lightning"
    elif name.endswith(_TORCH_SUFFIXES):
        layout = "torch-save"
    else:
        return None
    if not zipfile.is_zipfile(path):
        return None  # torn (its zip directory is written last), or not a torch.save file
    named = _STEP_IN_NAME.search(name)
    step = int(named.group(1)) if named else step_inside(path)
    return Found(path, layout, step, _mtime(path))


def step_inside(path: str) -> int | None:
    """The training step a torch.save file records at its top level (Lightning's global_step,
    nanoGPT's iter_num, ...), read with every class stubbed; None where it holds none."""
    try:
        with zipfile.ZipFile(path) as archive:
            member = next((i for i in archive.infolist() if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"), None)
            if member is None or member.file_size > MAX_PICKLE_BYTES:
                return None
            with archive.open(member) as raw:
                top = _StubUnpickler(raw).load()
    except Exception:  # noqa: BLE001 - any file that does not read as expected has no step
        return None
    if not isinstance(top, dict):
        return None
    for key in _STEP_KEYS:
        value = top.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


class _Stub(dict):
    """Whatever class a pickle names: takes any arguments and state, and holds nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self)

    def __setstate__(self, state: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


_SAFE = {("collections", "OrderedDict"): dict, ("builtins", "set"): set, ("builtins", "frozenset"): frozenset}


class _StubUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _SAFE.get((module, name), _Stub)

    def persistent_load(self, pid: Any) -> Any:
        return None  # a tensor's storage: not read


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(MAX_PICKLE_BYTES).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _mtime(path: str, inner: str = "") -> float:
    try:
        return os.stat(os.path.join(path, inner) if inner else path).st_mtime
    except OSError:
        return 0.0


def describe(item: Found) -> str:
    """`step 40 (transformers, /runs/x/checkpoint-40)`."""
    step = f"step {item.step}" if item.step is not None else "step unknown"
    return f"{step} ({item.layout}, {item.path})"
