"""`hyperlaunch checkpoints`: what is in the checkpoint folder, model by model, by the rules
of hyperlaunch.core.checkpoints (a `.metadata` file marks a complete checkpoint; `<model>-latest`
names the one a resume loads)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._output import out
from hyperlaunch.core.disk_space import format_size

if TYPE_CHECKING:
    from rich.table import Table

    from hyperlaunch.core.checkpoint_integrity import SetAside
    from hyperlaunch.core.checkpoint_layouts import Found
    from hyperlaunch.core.checkpoints import CheckpointInfo


@dataclass(frozen=True, kw_only=True)
class ModelCheckpoints:
    """One model's checkpoints and what its `-latest` pointer says about them."""

    model: str
    checkpoints: list[CheckpointInfo]
    pointer: str | None
    """Directory name in `<model>-latest`; None when there is none or it is unreadable."""
    warnings: list[str]
    exports: dict[int, list[dict[str, object]]]
    """Hugging Face exports by step (hyperlaunch.core.hf_exports), pruned checkpoints' too."""
    set_aside: list[SetAside]
    """Checkpoints found torn and set aside (`<name>-<N>steps.bad`), with why."""


def checkpoints(
    job_id: Annotated[
        str | None,
        typer.Argument(
            help="A recorded job: its checkpoint folder and model. A sweep: each element's (12), or one element's (12_3, or its own job id).",
            show_default=False,
        ),
    ] = None,
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
    copy_to: Annotated[
        str | None,
        typer.Option(
            "--copy-to", metavar="S3_URI",
            help="Copy one complete checkpoint to s3://BUCKET/PREFIX/<model>-<N>steps/ (multipart, SHA-256 checked, "
            "an interrupted copy resumes; your AWS credentials).",
        ),
    ] = None,
    step: Annotated[int | None, typer.Option("--step", min=0, help="With --copy-to: the checkpoint after this many steps [default: the latest].")] = None,
    prune: Annotated[
        int | None,
        typer.Option(
            "--prune", min=1, metavar="N",
            help="Keep one model's newest N complete checkpoints (a sweep: each element's) and remove the others (never "
            "the one -latest names, never a save under way); says what would go unless --yes.",
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="With --prune: remove them.")] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Check each complete checkpoint against what its commit recorded (every file's size, the small ones' "
            "checksums): a file cut short, missing or changed is named; exit code 6 when one is torn.",
        ),
    ] = False,
) -> None:
    """List checkpoints: step, size, complete or not (DCP's .metadata exists), and which one
    the model's -latest pointer names (the one `resume` loads), and those set aside as torn.
    Warns when the pointer names a missing or incomplete checkpoint.

    Examples:

    \b
      hyperlaunch checkpoints
      hyperlaunch checkpoints --model qwen3_0_6b --checkpoint-dir /fsx/checkpoints
      hyperlaunch checkpoints --json | jq '.models[].latest'
      hyperlaunch checkpoints 42 --copy-to s3://my-bucket/ckpt --step 2000
      hyperlaunch checkpoints 42 --prune 2            # what keeping the newest 2 would remove
      hyperlaunch checkpoints 42 --prune 2 --yes      # remove them
      hyperlaunch checkpoints 42 --verify             # is any of its checkpoints torn?
      hyperlaunch checkpoints 70                      # a sweep: each element's checkpoints
      hyperlaunch checkpoints 70_3 --prune 2          # one element's
    """
    from hyperlaunch.core.checkpoints import list_models
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.job.settings import resolve_checkpoint_dir

    names: list[str] | None = [_checkpoint_name(model)] if model else None
    sweep = False
    script_job: ScriptCheckpoints | None = None
    if job_id is not None:
        if checkpoint_dir is not None or model is not None:
            raise InvalidInput("a job names its checkpoint folder and model: drop --checkpoint-dir and --model, or the job id")
        checkpoint_dir, names, sweep, script_job = _job_checkpoints(job_id)
    if prune is not None and (copy_to is not None or step is not None):
        raise InvalidInput("--prune removes checkpoints and --copy-to/--step copy one: run them one at a time")
    if yes and prune is None:
        raise InvalidInput("--yes confirms --prune N: pass both")
    if copy_to is not None:
        if sweep:
            raise InvalidInput(f"job {job_id} is a sweep: --copy-to copies one element's checkpoint; name one, {job_id}_N ('hyperlaunch checkpoints {job_id}' lists them)")
        _copy_to(copy_to, resolve_checkpoint_dir(checkpoint_dir, profile=profile), names[0] if names else None, step, as_json)
        return
    if prune is not None:
        from hyperlaunch.cli import checkpoints_prune

        root = resolve_checkpoint_dir(checkpoint_dir, profile=profile)
        # A sweep's elements, each by its own name; otherwise the one model named, or the folder's only one.
        chosen = checkpoints_prune.some_models(root, names) if sweep and names else [checkpoints_prune.one_model(root, names[0] if names else None)]
        checkpoints_prune.prune(root, chosen, prune, yes=yes, as_json=as_json, sweep=sweep)
        return
    if step is not None:
        raise InvalidInput("--step chooses the checkpoint --copy-to copies; without --copy-to every step is listed")
    root = resolve_checkpoint_dir(checkpoint_dir, profile=profile)
    if verify:
        from hyperlaunch.cli.checkpoints_verify import verify as verify_checkpoints

        verify_checkpoints(root, names if names is not None else list_models(root), as_json=as_json)
        return
    # A missing folder is only a warning (no job has saved yet); something else at its place
    # is a mistyped path, and listing "no checkpoints" there would hide it.
    if root.exists() and not root.is_dir():
        raise InvalidInput(f"checkpoint folder {root} is not a folder", hint="pass the folder the checkpoints are in to --checkpoint-dir")
    found = [collect(root, name) for name in (names if names is not None else list_models(root))]
    own, newest = script_job.found() if script_job is not None else ([], None)
    for entry in found:
        for message in entry.warnings:
            out.warn(message)
        for aside in entry.set_aside:
            by = f" by job {aside.job}" if aside.job else ""
            out.warn(f"{aside.path.name} was set aside{by}: {aside.reason}")
    if not root.is_dir():
        out.warn(f"checkpoint folder {root} does not exist")
    elif names is not None and not own:  # a script's own checkpoints are listed below
        _warn_none_of(root, [entry.model for entry in found if not entry.checkpoints and entry.pointer is None], sweep=sweep)
    elif not found:
        out.warn(f"no checkpoints in {root}")
    if as_json:
        doc: dict[str, object] = {"checkpoint_dir": str(root), "models": [_document(entry) for entry in found]}
        if script_job is not None:
            doc.update(script_job.document(own, newest))
        out.json(doc)
        return
    if any(entry.checkpoints or entry.set_aside for entry in found):
        out.table(_table(root, found))
    if own and script_job is not None:
        out.table(script_job.table(own, newest))


def _job_checkpoints(job_id: str) -> tuple[str, list[str], bool, ScriptCheckpoints | None]:
    """A recorded job's checkpoint folder, the names its trainings' checkpoints go by (a sweep
    element's own, `12_3` or its job id; each element's of a sweep), whether it is a whole
    sweep, and for one script job where its framework's own checkpoints are looked for. A
    sweep's own name is the base model's, which other jobs' checkpoints go by."""
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.runs import sweeps

    record, index = sweeps.split_task(job_id, slurm_env)
    specs = sweeps.trainings(record, index)
    whole_sweep = record.sweep is not None and index is None
    spec = specs[0]
    script_job = None
    if not whole_sweep and spec.work_dir is not None and spec.job.checkpoint_layout != "off":
        script_job = ScriptCheckpoints(spec.work_dir, spec.output.checkpoint_dir, spec.job.checkpoint_layout)
    return spec.output.checkpoint_dir, [str(spec.derived.checkpoint_name) for spec in specs], whole_sweep, script_job


@dataclass(frozen=True)
class ScriptCheckpoints:
    """Where a script job's framework writes its own checkpoints (its working folder and the
    checkpoint folder), and which layouts count (hyperlaunch.core.checkpoint_layouts)."""

    work_dir: str
    checkpoint_dir: str
    layout: str

    def found(self) -> tuple[list[Found], Found | None]:
        """The checkpoints the layout counts, by layout and age, and the one the next start takes."""
        from hyperlaunch.core.checkpoint_layouts import choose, find, of_layout

        every = find([self.work_dir, self.checkpoint_dir])
        return sorted(of_layout(every, self.layout), key=lambda item: (item.layout, item.order())), choose(every, self.layout)

    def document(self, own: list[Found], newest: Found | None) -> dict[str, object]:
        return {
            "work_dir": self.work_dir,
            "checkpoint_layout": self.layout,
            "script_checkpoints": [{**item.__dict__, "resume_point": item == newest} for item in own],
        }

    def table(self, own: list[Found], newest: Found | None) -> Table:
        from rich.table import Table

        table = Table(title=f"Checkpoints the script saved itself (its working folder: {self.work_dir})", title_justify="left")
        for header, justify in (("layout", "left"), ("step", "right"), ("path", "left"), ("resume", "left")):
            table.add_column(header, justify=justify)  # type: ignore[arg-type]
        for item in own:
            shown = os.path.relpath(item.path, self.work_dir) if item.path.startswith(self.work_dir + os.sep) else item.path
            table.add_row(item.layout, "?" if item.step is None else str(item.step), shown, "<- next start" if item == newest else "")
        return table


def _warn_none_of(root: Path, missing: list[str], *, sweep: bool) -> None:
    """Warn about the names asked for that have no checkpoints in `root`: one model, with the
    models there; a sweep's elements, in one line."""
    from hyperlaunch.core.checkpoints import list_models

    if not missing:
        return
    if sweep:
        shown = ", ".join(missing if len(missing) <= 4 else [*missing[:2], "...", *missing[-1:]])
        out.warn(f"no checkpoints in {root} of {len(missing)} of the sweep's elements: {shown}")
        return
    others = list_models(root)
    out.warn(f"no checkpoints of {missing[0]} in {root}" + (f"; models there: {', '.join(others)}" if others else ""))


def _copy_to(uri: str, root: Path, model: str | None, step: int | None, as_json: bool) -> None:
    """One complete checkpoint to S3, under the prefix, in a folder of its own name."""
    from hyperlaunch.aws import s3_copy
    from hyperlaunch.cli._progress import byte_bar
    from hyperlaunch.core.checkpoints import list_models
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.runs.hf_export import choose

    place = s3_copy.parse(uri)
    if model is None:
        models = list_models(root)
        if len(models) != 1:
            raise InvalidInput(f"--copy-to copies one model's checkpoint: pass --model ({', '.join(models) or 'none'} in {root})")
        model = models[0]
    checkpoint = choose(root, model, step=step, output=None).checkpoint
    assert checkpoint is not None  # chosen now, not deferred
    destination = s3_copy.S3Place(place.bucket, place.key(checkpoint.name))
    bar = byte_bar(f"{checkpoint.name} -> {destination}", as_json)
    try:
        copied = s3_copy.copy_folder(checkpoint, destination, progress=bar.update if bar else None)
    finally:
        if bar is not None:
            bar.stop()
    document = {"checkpoint": str(checkpoint), "place": copied.place, "files": copied.files, "bytes": copied.bytes, "parts_skipped": copied.parts_skipped}
    if as_json:
        out.json(document)
    else:
        resumed = f"; {copied.parts_skipped} part(s) an earlier copy had sent" if copied.parts_skipped else ""
        out.text(f"copied {checkpoint.name} ({copied.files} files, {format_size(copied.bytes)}) to {copied.place}{resumed}")


def collect(root: Path, model: str) -> ModelCheckpoints:
    """A model's checkpoints plus warnings about its pointer (read here, not in
    list_checkpoints, so an unreadable pointer is reported instead of silently ignored)."""
    from hyperlaunch.core import hf_exports
    from hyperlaunch.core.checkpoint_integrity import set_aside_checkpoints
    from hyperlaunch.core.checkpoint_resume import pointer_problem
    from hyperlaunch.core.checkpoints import list_checkpoints, read_pointer
    from hyperlaunch.core.errors import CheckpointError

    infos = list_checkpoints(root, model)
    exports = hf_exports.find(root, model, [info.step for info in infos])
    aside = set_aside_checkpoints(root, model)
    try:
        pointer = read_pointer(root, model)
    except CheckpointError as err:
        return ModelCheckpoints(model=model, checkpoints=infos, pointer=None, warnings=[err.one_line()], exports=exports, set_aside=aside)
    problem = pointer_problem(root, model, pointer)
    warnings = []
    if problem is not None and (pointer is not None or any(info.complete for info in infos)):
        warnings.append(f"{problem}; resume would fall back to the newest complete checkpoint")
    return ModelCheckpoints(model=model, checkpoints=infos, pointer=pointer, warnings=warnings, exports=exports, set_aside=aside)


def _checkpoint_name(model: str) -> str:
    """--model as submit takes it (a preset or a model directory, also through a symlink) is
    turned into the name its checkpoints go by; any other text is taken as that name."""
    import os

    from hyperlaunch.core.checkpoints import checkpoint_name, is_model_directory

    path = os.path.abspath(os.path.expanduser(model))
    return checkpoint_name(path) if is_model_directory(model) and os.path.isdir(path) else model


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
                "hf_exports": entry.exports.get(info.step, []),
            }
            for info in entry.checkpoints
        ],
        "hf_exports": [export for exports in entry.exports.values() for export in exports],
        "set_aside": [
            {"step": a.step, "name": a.path.name, "path": str(a.path), "reason": a.reason, "file": a.file, "job": a.job, "at": a.at}
            for a in entry.set_aside
        ],
    }


def _table(root: Path, found: list[ModelCheckpoints]) -> Table:
    from rich.table import Table

    from hyperlaunch.core.checkpoints import dir_size

    table = Table(title=f"Checkpoints in {root}", title_justify="left")
    columns = [("model", "left"), ("step", "right"), ("directory", "left"), ("size", "right"), ("complete", "left"), ("latest", "left")]
    with_exports = any(entry.exports for entry in found)
    if with_exports:
        columns.append(("hf export", "left"))
    for header, justify in columns:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for entry in found:
        steps = {info.step: info for info in entry.checkpoints}
        for step in sorted(set(steps) | set(entry.exports)):
            info = steps.get(step)
            row = [
                entry.model, str(step), info.path.name if info else "(pruned)", format_size(info.size_bytes) if info else "",
                ("yes" if info.complete else "no") if info else "", "<- latest" if info and info.is_latest else "",
            ]
            if with_exports:
                row.append(", ".join(_shown_export(root, export) for export in entry.exports.get(step, [])))
            table.add_row(*row)
        for aside in entry.set_aside:
            table.add_row(entry.model, str(aside.step), aside.path.name, format_size(dir_size(aside.path)), "set aside", "", *([""] if with_exports else []))
    captions = []
    if any(not info.complete for entry in found for info in entry.checkpoints):
        # A script's own torch.save folders read "no" too, though each is whole to the script.
        captions.append(
            "complete no: neither DCP's .metadata nor a commit (hyperlaunch.runtime.commit_checkpoint): "
            "a save that did not finish, or a script's own that was never committed; resume and export skip it"
        )
    if any(entry.set_aside for entry in found):
        captions.append("set aside: found torn (a file cut short, missing or changed since its commit); kept for you to look at, never loaded")
    if captions:
        table.caption = "\n".join(captions)
        table.caption_justify = "left"
    return table


def _shown_export(root: Path, export: dict[str, object]) -> str:
    """An export's folder, by name when it is in the checkpoint folder, with its dtype."""
    folder = Path(str(export["output"]))
    where = folder.name if folder.parent == root.absolute() else str(folder)
    return f"{where} ({export['dtype']})" if export.get("dtype") else where
