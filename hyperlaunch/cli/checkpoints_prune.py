"""`hyperlaunch checkpoints --prune N`: keep one model's (or each of a sweep's elements') newest N
complete checkpoints and remove the others, by the rule the trainer's --keep-last follows
(hyperlaunch.core.checkpoint_pruning.prunable): never the one `-latest` names, never a save that may
still be under way. Without --yes it says what would go and removes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.cli._output import out
from hyperlaunch.core import checkpoint_pruning
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


def some_models(root: Path, models: list[str]) -> list[str]:
    """The ones of `models` (a sweep's elements) that have checkpoints in `root`; InvalidInput
    when none has."""
    present = set(rules.list_models(root))
    found = [model for model in models if model in present]
    if not found:
        where = f"{root}" + ("" if root.is_dir() else " (no such folder)")
        raise InvalidInput(f"--prune: no checkpoints of the sweep's {len(models)} element(s) in {where}; names: {_shortened(models)}")
    return found


@dataclass(frozen=True)
class Plan:
    """What keeping one model's newest checkpoints removes, and what stays."""

    model: str
    going: list[rules.CheckpointInfo]
    kept: list[rules.CheckpointInfo]

    @property
    def size(self) -> int:
        return sum(info.size_bytes for info in self.going)


def plan(root: Path, model: str, keep: int) -> Plan:
    """What prune would do to `model`'s checkpoints. The pointer names the checkpoint to keep
    whatever its age: one that cannot be read keeps nothing safe, so CheckpointError."""
    try:
        rules.read_pointer(root, model)
    except CheckpointError as err:
        raise CheckpointError(f"--prune: {err}", hint=f"fix or remove {model}-latest first; 'hyperlaunch checkpoints' lists them") from None
    going = checkpoint_pruning.prunable(root, model, keep)
    gone = {info.path for info in going}
    return Plan(model, going, [info for info in rules.list_checkpoints(root, model) if info.path not in gone])


def prune(root: Path, models: list[str], keep: int, *, yes: bool, as_json: bool, sweep: bool = False) -> None:
    """Keep each model's newest `keep` complete checkpoints, removing the others with `yes`;
    every model's plan is made (its pointer read) before anything goes. One model is reported
    as one JSON object; a sweep's elements (`sweep`) under "models"."""
    plans = [plan(root, model, keep) for model in models]
    if yes:
        _remove(plans)
    free = free_bytes(root)
    if as_json:
        if not sweep:
            out.json({"checkpoint_dir": str(root), "model": plans[0].model, "keep": keep, "removed": yes, **_document(plans[0]), "free_bytes": free})
        else:
            out.json({
                "checkpoint_dir": str(root), "keep": keep, "removed": yes, "models": [_document(p) for p in plans],
                "bytes": sum(p.size for p in plans), "free_bytes": free,
            })
        return
    lines = [_line(root, p, yes=yes) for p in plans]
    if yes and any(p.going for p in plans) and free is not None:
        room = f"{root} has {format_size(free)} free now"
        lines = [*lines, room] if sweep else [f"{lines[0]}; {room}"]
    elif not yes and any(p.going for p in plans):
        lines.append("pass --yes as well to remove them")
    for line in lines:
        out.text(line)


def _remove(plans: list[Plan]) -> None:
    """Remove what each plan lets go; CheckpointError names the folder that could not go and
    the ones that went before it."""
    removed: list[str] = []
    for each in plans:
        for info in each.going:
            try:
                checkpoint_pruning.remove_checkpoint(info.path)
            except FileNotFoundError:
                pass  # gone meanwhile (the trainer's own --keep-last): as asked
            except OSError as err:
                done = f" after removing {', '.join(removed)}" if removed else ""
                raise CheckpointError(f"could not remove {info.path}: {err.strerror or err}{done}") from None
            removed.append(info.path.name)


def _document(each: Plan) -> dict[str, object]:
    return {
        "model": each.model, "checkpoints": [info.path.name for info in each.going], "bytes": each.size,
        "kept": [info.path.name for info in each.kept],
    }


def _line(root: Path, each: Plan, *, yes: bool) -> str:
    """`<model>: would remove 2 checkpoints (2.0 KiB): ...; keeps ...`, or removed, or nothing."""
    kept_text = ", ".join(info.path.name + _label(info) for info in each.kept) or "none"
    if not each.going:
        return f"{each.model}: nothing to remove in {root}; it keeps {kept_text}"
    count = f"{len(each.going)} checkpoint{'s' if len(each.going) != 1 else ''} ({format_size(each.size)})"
    names = _shortened([info.path.name for info in each.going])
    return f"{each.model}: removed {count}: {names}; kept {kept_text}" if yes else f"{each.model}: would remove {count}: {names}; keeps {kept_text}"


def _shortened(names: list[str]) -> str:
    """The names, a long list cut in the middle."""
    return ", ".join(names if len(names) <= 6 else [*names[:2], "...", *names[-2:]])


def _label(info: rules.CheckpointInfo) -> str:
    if info.is_latest:
        return " (latest)"
    return "" if info.complete else " (incomplete: a save under way, or one a newer save will replace)"
