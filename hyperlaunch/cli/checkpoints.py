"""`hyperlaunch checkpoints`: what is in the checkpoint folder, model by model, by the rules
of hyperlaunch.core.checkpoints (a `.metadata` file marks a complete checkpoint; `<model>-latest`
names the one a resume loads)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from rich.table import Table

    from hyperlaunch.core.checkpoints import CheckpointInfo


@dataclass(frozen=True, kw_only=True)
class ModelCheckpoints:
    """One model's checkpoints and what its `-latest` pointer says about them."""

    model: str
    checkpoints: list[CheckpointInfo]
    pointer: str | None
    """Directory name in `<model>-latest`; None when there is none or it is unreadable."""
    warnings: list[str]


def checkpoints(
    model: Annotated[
        str | None, typer.Option("--model", "-m", "--name", metavar="MODEL", help="Only this model's (or script job's --name) checkpoints [default: every model found].")
    ] = None,
    checkpoint_dir: Annotated[
        str | None,
        typer.Option(
            "--checkpoint-dir",
            metavar="DIR",
            help="Checkpoint folder [default: as submit uses it: hyperlaunch.toml / profile / "
            "HYPERLAUNCH_CHECKPOINT_DIR, else ./checkpoints].",
        ),
    ] = None,
    profile: Annotated[str | None, typer.Option("--profile", metavar="NAME", help="Profile from hyperlaunch.toml ([profile.NAME]).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
) -> None:
    """List checkpoints: step, size, complete or not (DCP's .metadata exists), and which one
    the model's -latest pointer names (the one `resume` loads). Warns when the pointer names a
    missing or incomplete checkpoint.

    Examples:

    \b
      hyperlaunch checkpoints
      hyperlaunch checkpoints --model qwen3_0_6b --checkpoint-dir /fsx/checkpoints
      hyperlaunch checkpoints --json | jq '.models[].latest'
    """
    from hyperlaunch.core.checkpoints import list_models
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.job.settings import resolve_checkpoint_dir

    root = resolve_checkpoint_dir(checkpoint_dir, profile=profile)
    # A missing folder is only a warning (no job has saved yet); something else at its place
    # is a mistyped path, and listing "no checkpoints" there would hide it.
    if root.exists() and not root.is_dir():
        raise InvalidInput(f"checkpoint folder {root} is not a folder", hint="pass the folder the checkpoints are in to --checkpoint-dir")
    if model is not None:
        model = _checkpoint_name(model)
    names = [model] if model else list_models(root)
    found = [collect(root, name) for name in names]
    for entry in found:
        for message in entry.warnings:
            out.warn(message)
    if not root.is_dir():
        out.warn(f"checkpoint folder {root} does not exist")
    elif model and not found[0].checkpoints and found[0].pointer is None:
        others = list_models(root)
        out.warn(f"no checkpoints of {model} in {root}" + (f"; models there: {', '.join(others)}" if others else ""))
    elif not names:
        out.warn(f"no checkpoints in {root}")
    if as_json:
        out.json({"checkpoint_dir": str(root), "models": [_document(entry) for entry in found]})
    elif any(entry.checkpoints for entry in found):
        out.table(_table(root, found))


def collect(root: Path, model: str) -> ModelCheckpoints:
    """A model's checkpoints plus warnings about its pointer (read here, not in
    list_checkpoints, so an unreadable pointer is reported instead of silently ignored)."""
    from hyperlaunch.core.checkpoints import list_checkpoints, pointer_problem, read_pointer
    from hyperlaunch.core.errors import CheckpointError

    infos = list_checkpoints(root, model)
    try:
        pointer = read_pointer(root, model)
    except CheckpointError as err:
        return ModelCheckpoints(model=model, checkpoints=infos, pointer=None, warnings=[err.one_line()])
    problem = pointer_problem(root, model, pointer)
    warnings = []
    if problem is not None and (pointer is not None or any(info.complete for info in infos)):
        warnings.append(f"{problem}; resume would fall back to the newest complete checkpoint")
    return ModelCheckpoints(model=model, checkpoints=infos, pointer=pointer, warnings=warnings)


def _checkpoint_name(model: str) -> str:
    """--model as submit takes it (a preset or a model directory, also through a symlink) is
    turned into the name its checkpoints go by; any other text is taken as that name."""
    import os

    from hyperlaunch.core.checkpoints import checkpoint_name, is_model_directory

    path = os.path.abspath(os.path.expanduser(model))
    return checkpoint_name(path) if is_model_directory(model) and os.path.isdir(path) else model


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


def _document(entry: ModelCheckpoints) -> dict[str, object]:
    return {
        "model": entry.model,
        "latest": entry.pointer,
        "warnings": entry.warnings,
        "checkpoints": [
            {
                "step": info.step,
                "name": info.path.name,
                "path": str(info.path),
                "size_bytes": info.size_bytes,
                "complete": info.complete,
                "latest": info.is_latest,
            }
            for info in entry.checkpoints
        ],
    }


def _table(root: Path, found: list[ModelCheckpoints]) -> Table:
    from rich.table import Table

    table = Table(title=f"Checkpoints in {root}", title_justify="left")
    for header, justify in (("model", "left"), ("step", "right"), ("directory", "left"), ("size", "right"), ("complete", "left"), ("latest", "left")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for entry in found:
        for info in entry.checkpoints:
            table.add_row(
                entry.model,
                str(info.step),
                info.path.name,
                format_size(info.size_bytes),
                "yes" if info.complete else "no",
                "<- latest" if info.is_latest else "",
            )
    return table
