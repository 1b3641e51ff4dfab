"""`hyperlaunch export`: any checkpoint of the bundled trainer as a Hugging Face model folder."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from hyperlaunch.cli._output import out

_DTYPES = ("fp32", "bf16")


def export(
    job_id: Annotated[str | None, typer.Argument(help="A recorded job (or one element of a sweep, 12_3): its checkpoint folder and model.", show_default=False)] = None,
    step: Annotated[int | None, typer.Option("--step", min=0, help="The checkpoint after this many steps [default: the one <model>-latest names].")] = None,
    latest: Annotated[bool, typer.Option("--latest", help="The checkpoint <model>-latest names (the default).")] = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", metavar="DIR",
            help="Folder to write, or s3://BUCKET/PREFIX to copy the export there (written beside the checkpoint first) "
            "[default: <model>-<N>steps-hf beside the checkpoint].",
        ),
    ] = None,
    checkpoint_dir: Annotated[
        str | None, typer.Option("--checkpoint-dir", metavar="DIR", help="Without a job: the checkpoint folder [default: as submit uses it, else ./checkpoints].")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "--model", "-m", metavar="MODEL", help="Without a job: the model whose checkpoints these are.")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", metavar="TOKENIZER", help="For a checkpoint that does not record its tokenizer (older ones).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", metavar="DTYPE", help="fp32 (the checkpoint's weights exactly) or bf16.")] = "fp32",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier export (or an empty folder) at --output; the old one stays until the new one is whole.")] = False,
    python: Annotated[str | None, typer.Option("--python", metavar="PATH", help="A Python with torch and transformers [default: this one, else the job's venv's].")] = None,
    profile: Annotated[str | None, typer.Option("--profile", metavar="NAME", help="Profile from hyperlaunch.toml ([profile.NAME]).")] = None,
    after: Annotated[
        list[str] | None,
        typer.Option("--after", metavar="JOB", help="With --slurm: start once job JOB completed (JOB:any: however it ended); the checkpoint is chosen then (repeatable)."),
    ] = None,
    slurm: Annotated[bool, typer.Option("--slurm", help="Run the export as a one-node Slurm job instead of here (a login node without torch).")] = False,
    partition: Annotated[str | None, typer.Option("--partition", "-p", metavar="PARTITION", help="With --slurm: the partition (a CPU one will do) [default: the cluster's].")] = None,
    time_limit: Annotated[str | None, typer.Option("--time", "-t", metavar="TIME", help="With --slurm: the time limit (Slurm's forms, or 30m, 2h).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of text.")] = False,
) -> None:
    """Write a checkpoint as a Hugging Face model: config.json, safetensors shards with their
    index, the tokenizer and generation config, loadable with from_pretrained and giving the
    trainer's logits at that step. Streams: memory holds one saved chunk, not the model.
    Needs torch and transformers (the train extra) in this Python or --python's.

    \b
    Examples:
      hyperlaunch export 42                                   # job 42's folder: what <model>-latest names now
      hyperlaunch export 42 --step 2000 --dtype bf16 -o /fsx/eval/step2000
      hyperlaunch export --checkpoint-dir /fsx/checkpoints --name qwen3_0_6b --step 500
      hyperlaunch export 42 --step 2000 -o s3://my-bucket/eval/step2000   # your AWS credentials
      hyperlaunch export 42 --slurm --partition cpu              # on a compute node, as a job
      hyperlaunch export 42 --slurm --after 42                    # queued now, runs once job 42 completed
      hyperlaunch export 43_2 --step 500                          # element 2 of sweep 43
    """
    from hyperlaunch.core.errors import InvalidInput

    if dtype not in _DTYPES:
        raise InvalidInput(f"--dtype {dtype!r} is not one of: {', '.join(_DTYPES)}")
    if latest and step is not None:
        raise InvalidInput("--step and --latest exclude each other: name one checkpoint")
    if not slurm and (partition is not None or time_limit is not None or after):
        raise InvalidInput("--partition, --time and --after are for --slurm: without it the export runs here, now")
    from hyperlaunch.slurm.dependencies import parse_after

    waits = parse_after(after or [])
    place = None
    if output is not None and output.startswith("s3://"):
        if slurm:
            raise InvalidInput("--slurm writes to a folder the nodes see: export there, then copy it with `-o s3://...` from here")
        from hyperlaunch.aws import s3_copy

        place, output = s3_copy.parse(output), None  # written beside the checkpoint, then copied
    target, torchrun = _target(
        job_id, step=step, output=output, checkpoint_dir=checkpoint_dir, name=name, tokenizer=tokenizer, profile=profile, deferred=bool(waits),
    )
    if slurm:
        _submit(target, python, torchrun, dtype=dtype, overwrite=overwrite, partition=partition, time_limit=time_limit, as_json=as_json, waits=waits)
        return
    done = _export(target, python, torchrun, dtype=dtype, overwrite=overwrite or place is not None, quiet=as_json)
    document: dict[str, object] = {"checkpoint": str(target.checkpoint), **{key: value for key, value in done.items() if key != "event"}}
    copied = _copy(target, place, dtype=dtype, quiet=as_json) if place is not None else None
    if copied is not None:
        document["s3"] = copied
    if as_json:
        out.json(document)
        return
    from hyperlaunch.core.disk_space import format_size

    size = int(str(done["bytes"]))
    seconds = float(str(done["seconds"]))
    out.text(
        f"exported {target.checkpoint.name} ({done['dtype']}, {format_size(size)} in {done['shards']} shard(s), "
        f"{seconds:.1f} s, {format_size(int(size / max(seconds, 1e-9)))}/s, peak memory {format_size(int(str(done['peak_rss_bytes'])))}) to {target.output}"
    )
    if copied is not None:
        out.text(f"copied to {place} ({copied['files']} files)")


def _submit(
    target: Any, python: str | None, torchrun: str | None, *, dtype: str, overwrite: bool,
    partition: str | None, time_limit: str | None, as_json: bool, waits: tuple[tuple[str, str], ...],
) -> None:
    """The export as a one-node batch job: the exporter in the job's Python (its venv beside
    --torchrun, or --python), its log beside the checkpoint folder."""
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.core.paths import hyperlaunch_home
    from hyperlaunch.runs import hf_export, tool_jobs
    from hyperlaunch.runs.waits import refuse_unmet
    from hyperlaunch.script.render_export import render_export
    from hyperlaunch.slurm import submission as slurm_submission
    from hyperlaunch.slurm.dependencies import dependency_value
    from hyperlaunch.slurm.time_limit import slurm_time

    dependency = dependency_value(waits)
    after = [job for job, _ in waits]
    if target.output is not None and target.output.exists() and not overwrite:
        raise InvalidInput(f"--output {target.output} exists; pass --overwrite to replace it")
    from hyperlaunch.core.hf_exports import not_replaceable

    refusal = not_replaceable(target.output) if target.output is not None else None
    if refusal is not None:
        raise InvalidInput(refusal)
    node_python = hf_export.node_python(python, torchrun)
    cmd = hf_export.command(node_python, target, dtype=dtype, overwrite=overwrite, progress="none")
    what = target.checkpoint.name if target.checkpoint is not None else (
        f"{target.name}-{target.step}steps" if target.step is not None else f"{target.name}-latest"
    )
    refuse_unmet(waits, env=slurm_env())
    log = target.ckpt_dir / "logs" / f"export-{what}-%j.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    script = render_export(
        command=cmd, checkpoint=str(target.checkpoint or target.ckpt_dir / what), job_name=f"export-{what}", log=str(log),
        partition=partition, time=slurm_time(time_limit) if time_limit else None, dependency=dependency,
    )
    env = slurm_env()
    job_id = slurm_submission.submit_script(script, hyperlaunch_home() / "exports", env=env)
    shown_log = str(log).replace("%j", job_id)
    # Queued behind a training without --step, it chooses its checkpoint, and so its folder's
    # step N, when it starts.
    step = "<N>" if target.step is None else str(target.step)
    output = str(target.output) if target.output is not None else str(target.ckpt_dir / f"{target.name}-{step}steps-hf")
    tool_jobs.save(tool_jobs.ToolJob(
        job_id=job_id, kind="export", what=f"{what} -> {output}", output=output, log=shown_log, submitted_at=time.time(),
        waits=tuple(waits), models=tuple(dict.fromkeys(name for name in (target.name, target.model) if name)),
        slurm_conf=env.get("SLURM_CONF"),
    ))
    document = {"job_id": job_id, "checkpoint": str(target.checkpoint or ""), "output": output, "log": shown_log, "python": node_python, "after": list(after)}
    if as_json:
        out.json(document)
        return
    once = f" once job(s) {', '.join(after)} end" if after else ""
    out.text(f"submitted export job {job_id}: {what} -> {output}{once}")
    out.text(f"  log:       {shown_log}")
    out.text(f"  follow it: hyperlaunch status {job_id}")
    out.text(f"             hyperlaunch logs {job_id} -f")


def _export(target: Any, python: str | None, torchrun: str | None, *, dtype: str, overwrite: bool, quiet: bool) -> dict[str, object]:
    from hyperlaunch.cli._progress import byte_bar
    from hyperlaunch.runs import hf_export

    cmd = hf_export.command(hf_export.exporter_python(python, torchrun), target, dtype=dtype, overwrite=overwrite)
    bar = byte_bar(f"{target.checkpoint.name} -> {target.output.name}", quiet)
    try:
        return hf_export.run(cmd, bar.update if bar else None)
    finally:
        if bar is not None:
            bar.stop()


def _copy(target: Any, place: Any, *, dtype: str, quiet: bool) -> dict[str, object]:
    """The export folder to S3, under the prefix given; recorded with the checkpoint."""
    from hyperlaunch.aws import s3_copy
    from hyperlaunch.cli._progress import byte_bar
    from hyperlaunch.core import hf_exports

    bar = byte_bar(f"{target.output.name} -> {place}", quiet)
    try:
        copied = s3_copy.copy_folder(target.output, place, progress=bar.update if bar else None)
    finally:
        if bar is not None:
            bar.stop()
    hf_exports.record_export(target.checkpoint, str(place), dtype=dtype, step=target.step)
    return {"place": copied.place, "files": copied.files, "bytes": copied.bytes, "parts_skipped": copied.parts_skipped}


def _job_spec(text: str) -> Any:
    """The JobSpec of a recorded job, or of one element of a sweep (`12_3`)."""
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.job.sweep import element_spec
    from hyperlaunch.runs.sweeps import split_task

    record, index = split_task(text, slurm_env)
    if record.sweep is None:
        return record.spec
    if index is None:
        raise InvalidInput(f"job {text} is a sweep of {len(record.sweep.elements)} trainings: export one element, {text}_N ('hyperlaunch status {text}' lists them)")
    return element_spec(record.spec, record.sweep.element(index))


def _target(
    job_id: str | None, *, step: int | None, output: str | None, checkpoint_dir: str | None, name: str | None,
    tokenizer: str | None, profile: str | None, deferred: bool = False,
) -> tuple[Any, str | None]:
    from pathlib import Path

    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.runs import hf_export

    if job_id is not None:
        if checkpoint_dir is not None or name is not None:
            raise InvalidInput("a job names its checkpoint folder and model: drop --checkpoint-dir and --name, or the job id")
        spec = _job_spec(job_id)
        if spec.is_script_job:
            raise InvalidInput(f"job {job_id} ran your own script: export knows only the bundled trainer's checkpoints")
        told = hf_export.from_job_record(spec)
        return hf_export.choose(
            Path(spec.output.checkpoint_dir), str(spec.derived.checkpoint_name), step=step, output=output,
            model=told["model"], model_name=told["model_name"], tokenizer=tokenizer or told["tokenizer"], deferred=deferred,
        ), spec.job.torchrun
    if name is None:
        raise InvalidInput("name the checkpoints: a job id, or --name MODEL (with --checkpoint-dir DIR)")
    from hyperlaunch.cli.checkpoints import _checkpoint_name
    from hyperlaunch.job.settings import resolve_checkpoint_dir

    root = resolve_checkpoint_dir(checkpoint_dir, profile=profile)
    checkpoints_name = _checkpoint_name(name)
    return hf_export.choose(root, checkpoints_name, step=step, output=output, model=name, tokenizer=tokenizer, deferred=deferred), None
