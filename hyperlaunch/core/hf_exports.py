"""Hugging Face exports of checkpoints: where they go by default, how one is known to be whole,
and the record each checkpoint keeps of its exports (so `hyperlaunch checkpoints` shows which
steps have one and where). Torch-free: the CLI reads these on a login node.

    <ckpt_dir>/<model>-<N>steps-hf/            the default place of step N's export
    <ckpt_dir>/<model>-<N>steps/hf-exports.json   every export of that checkpoint: where, dtype, when
    <export>/hyperlaunch-export.json           written last into an export: it is complete
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.bounded_read import NotRegularFile, read_regular
from hyperlaunch.core.checkpoints import checkpoint_dir_name

EXPORTS_FILE = "hf-exports.json"
"""In a checkpoint folder: the exports made of it, newest last."""
EXPORT_MARKER = "hyperlaunch-export.json"
"""In an export folder, written last: which checkpoint it came from, in which dtype."""
_MAX_RECORD_BYTES = 1 << 20
_MAX_RECORDS = 100
"""Exports kept in a checkpoint's record: the newest, enough for any sweep of evaluations."""
DTYPES = ("bf16", "fp32")


def default_output(ckpt_dir: Path | str, model: str, step: int) -> Path:
    """`<ckpt_dir>/<model>-<N>steps-hf`: beside the checkpoint, never taken for one."""
    return Path(ckpt_dir) / f"{checkpoint_dir_name(model, step)}-hf"


def is_complete_export(folder: Path | str) -> bool:
    return (Path(folder) / EXPORT_MARKER).is_file()


def _read_json(path: Path) -> object:
    try:
        raw = read_regular(path, _MAX_RECORD_BYTES)
    except (OSError, NotRegularFile):
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def not_replaceable(output: Path | str) -> str | None:
    """Why --overwrite may not replace the folder `output`, or None. Only an earlier export (its
    marker written) or an empty folder is replaced: anything else may be the user's own files."""
    folder = Path(output)
    try:
        if not folder.is_dir() or is_complete_export(folder) or not any(folder.iterdir()):
            return None
    except OSError as err:
        return f"--output {folder} cannot be read ({err.strerror}), so it cannot be replaced"
    return (
        f"--output {folder} holds files and is not a hyperlaunch export (no {EXPORT_MARKER}): --overwrite replaces only "
        "an earlier export or an empty folder; choose a new folder"
    )


def exports_of(checkpoint: Path | str) -> list[dict[str, object]]:
    """The exports a checkpoint's record names whose folder is still a complete export of it
    (one deleted since, or replaced by another checkpoint's export, drops out; copies in S3 are
    listed as recorded), newest last."""
    records = _read_json(Path(checkpoint) / EXPORTS_FILE)
    if not isinstance(records, list):
        return []
    return [
        r for r in records
        if isinstance(r, dict) and isinstance(r.get("output"), str)
        and (str(r["output"]).startswith("s3://") or is_export_of(str(r["output"]), Path(checkpoint).name))
    ]


def is_export_of(folder: Path | str, checkpoint_name: str) -> bool:
    """Whether `folder` is a complete export of the checkpoint named so (a marker that names no
    checkpoint cannot say otherwise). Compared by name: the login node and the nodes may mount
    the checkpoint folder at different paths."""
    marker = _read_json(Path(folder) / EXPORT_MARKER)
    if not isinstance(marker, dict):
        return False
    source = marker.get("checkpoint")
    return not isinstance(source, str) or Path(source).name == checkpoint_name


def find(ckpt_dir: Path | str, model: str, steps: list[int]) -> dict[int, list[dict[str, object]]]:
    """Every export of `model` known in `ckpt_dir`, by step: those its checkpoints `steps`
    record, and the `<model>-<N>steps-hf` folders beside them (whose checkpoint may be pruned)."""
    found: dict[int, list[dict[str, object]]] = {}
    for step in steps:
        found[step] = exports_of(Path(ckpt_dir) / checkpoint_dir_name(model, step))
    prefix, suffix = f"{model}-", "steps-hf"
    try:
        names = sorted(entry.name for entry in Path(ckpt_dir).iterdir())
    except OSError:
        names = []
    for name in names:
        middle = name[len(prefix):-len(suffix)] if name.startswith(prefix) and name.endswith(suffix) else ""
        folder = Path(ckpt_dir) / name
        if not middle.isdigit() or not is_complete_export(folder):
            continue
        known = found.setdefault(int(middle), [])
        if all(Path(str(r["output"])) != folder.absolute() for r in known):
            marker = _read_json(folder / EXPORT_MARKER)
            dtype = marker.get("dtype") if isinstance(marker, dict) else None
            known.append({"output": str(folder.absolute()), "dtype": dtype, "step": int(middle)})
    return {step: exports for step, exports in sorted(found.items()) if exports}


def record_export(checkpoint: Path | str, output: str, *, dtype: str, step: int) -> None:
    """Add one export to the checkpoint's record (a rewrite of the whole small file; the last
    writer wins when two exports of one checkpoint end at once, and both folders stay whole)."""
    path = Path(checkpoint) / EXPORTS_FILE
    previous = _read_json(path)
    records = [r for r in previous if isinstance(r, dict) and r.get("output") != output] if isinstance(previous, list) else []
    records.append({"output": output, "dtype": dtype, "step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    write_atomically(path, (json.dumps(records[-_MAX_RECORDS:], indent=1) + "\n").encode("utf-8"))
