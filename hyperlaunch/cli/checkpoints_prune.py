"""`hyperlaunch checkpoints --prune N`: keep one model's newest N complete checkpoints and remove
the others, by the rule the trainer's --keep-last follows (hyperlaunch.core.checkpoints.prunable):
never the one `-latest` names, never a save that may still be under way. Without --yes it says
what would go and removes nothing."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.cli._output import out
from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.disk_space import format_size, free_bytes
from hyperlaunch.core.errors import CheckpointError, InvalidInput


def one_model(root: Path, model: str | None) -> str:
    """The model whose checkpoints are pruned: the one named, else the folder's only one."""
    models = rules.list_models(root)
    if not models:
        raise InvalidInput(f"--prune: no checkpoints in {root}" + ("" if root.is_dir() else " (no such folder)"))
    if model is not None:
        if model not in models:
            raise InvalidInput(f"--prune: no checkpoints of {model} in {root}; models there: {', '.join(models)}")
        return model
    if len(models) != 1:
        raise InvalidInput(f"--prune keeps one model's newest checkpoints: pass --model ({', '.join(models)} in {root})")
    return models[0]


def prune(root: Path, model: str, keep: int, *, yes: bool, as_json: bool) -> None:
    # The pointer names the checkpoint to keep whatever its age: one that cannot be read keeps
    # nothing safe, so nothing goes until it is fixed.
    try:
        rules.read_pointer(root, model)
    except CheckpointError as err:
        raise CheckpointError(f"--prune: {err}", hint=f"fix or remove {model}-latest first; 'hyperlaunch checkpoints' lists them") from None
    going = rules.prunable(root, model, keep)
    gone = {info.path for info in going}
    kept = [info for info in rules.list_checkpoints(root, model) if info.path not in gone]
    size = sum(info.size_bytes for info in going)
    removed: list[str] = []
    if yes:
        for info in going:
            try:
                rules.remove_checkpoint(info.path)
            except FileNotFoundError:
                pass  # gone meanwhile (the trainer's own --keep-last): as asked
            except OSError as err:
                done = f" after removing {', '.join(removed)}" if removed else ""
                raise CheckpointError(f"could not remove {info.path}: {err.strerror or err}{done}") from None
            removed.append(info.path.name)
    free = free_bytes(root)
    if as_json:
        out.json({
            "checkpoint_dir": str(root), "model": model, "keep": keep, "removed": yes,
            "checkpoints": [info.path.name for info in going], "bytes": size,
            "kept": [info.path.name for info in kept], "free_bytes": free,
        })
        return
    kept_text = ", ".join(info.path.name + _label(info) for info in kept) or "none"
    if not going:
        out.text(f"{model}: nothing to remove in {root}; it keeps {kept_text}")
        return
    shown = [info.path.name for info in going]
    names = ", ".join(shown if len(shown) <= 6 else [*shown[:2], "...", *shown[-2:]])
    count = f"{len(going)} checkpoint{'s' if len(going) != 1 else ''} ({format_size(size)})"
    if not yes:
        out.text(f"{model}: would remove {count}: {names}; keeps {kept_text}")
        out.text("pass --yes as well to remove them")
        return
    room = f"; {root} has {format_size(free)} free now" if free is not None else ""
    out.text(f"{model}: removed {count}: {names}; kept {kept_text}{room}")


def _label(info: rules.CheckpointInfo) -> str:
    if info.is_latest:
        return " (latest)"
    return "" if info.complete else " (incomplete: a save under way, or one a newer save will replace)"
