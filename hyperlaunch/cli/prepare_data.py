"""`hyperlaunch prepare-data`: tokenize text once into memory-mapped shards that training jobs
read with `--data DIR` (hyperlaunch.data.prepare does the work; this wires the flags)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from hyperlaunch.data.prepare_work import PrepareResult


def prepare_data(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            metavar="INPUT...", show_default=False,
            help=".txt, .jsonl or .parquet files, Hugging Face save_to_disk folders, or folders of them.",
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="DIR", help="Folder to write (created if needed).")],
    tokenizer: Annotated[
        str | None,
        typer.Option("--tokenizer", metavar="TOKENIZER", help="'offline', a local tokenizer folder, or a Hugging Face hub name."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", metavar="MODEL", help="Use this preset's or model folder's tokenizer (as training it would)."),
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", metavar="N", min=1, help="Tokenizing processes (on each node, with --slurm) [default: the CPUs this process may use].")
    ] = None,
    text_field: Annotated[str, typer.Option("--text-field", metavar="FIELD", help="Field or column holding the text (.jsonl, .parquet, datasets).")] = "text",
    shard_mb: Annotated[float, typer.Option("--shard-mb", metavar="MB", help="Largest shard, in MB of input text.")] = 32.0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a folder prepared from other sources or with another tokenizer.")] = False,
    slurm: Annotated[
        bool, typer.Option("--slurm", help="Tokenize in a batch job on the cluster's nodes instead of here, every core of each (for corpora too big for this machine).")
    ] = False,
    nodes: Annotated[
        int | None, typer.Option("--nodes", "-N", metavar="N", min=1, help="With --slurm: N nodes, each a share of the inputs' units, merged into one manifest [default: 1].")
    ] = None,
    partition: Annotated[str | None, typer.Option("--partition", "-p", metavar="PARTITION", help="With --slurm: the partition (a CPU one will do) [default: the cluster's].")] = None,
    time_limit: Annotated[str | None, typer.Option("--time", "-t", metavar="TIME", help="With --slurm: the time limit (Slurm's forms, or 30m, 2h).")] = None,
    after: Annotated[
        list[str] | None,
        typer.Option("--after", metavar="JOB", help="With --slurm: start once job JOB completed (JOB:any: however it ended); repeatable. The inputs are looked for then."),
    ] = None,
    python: Annotated[
        str | None, typer.Option("--python", metavar="PATH", help="With --slurm: the Python the nodes run prepare-data in, with hyperlaunch[data] [default: this one].")
    ] = None,
    step: Annotated[str | None, typer.Option("--step", hidden=True, help="One step of a preparation across nodes: plan, share or finish (the --slurm job's script runs them).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Tokenize INPUT... once into DIR: token shards (uint16 when the vocabulary fits, else
    uint32) that training memory-maps, document boundaries, and a manifest (token count,
    shards with sizes and hashes, the tokenizer's identity, the EOS id, the sources with their
    sizes and mtimes). Train on it with `--data DIR`; one folder serves any --seq-len.

    A killed run continues where it stopped when started again; a finished folder is never
    rewritten: the same sources and tokenizer say "already prepared", others are refused
    unless --overwrite. Needs pip install 'hyperlaunch[data]' (tokenizers, numpy, transformers,
    pyarrow and datasets; no torch), which a login node can have without the trainer's libraries.

    With --slurm the work runs as a batch job (its id printed: `submit --after JOB:ok --data DIR`
    trains once it completed), in this Python unless --python names the nodes' one.

    Examples:

    \b
      hyperlaunch prepare-data corpus.jsonl --model qwen3_0_6b --output /fsx/data/corpus-qwen3
      hyperlaunch prepare-data /fsx/raw/ --tokenizer /fsx/models/Llama-3.1-8B --output /fsx/data/llama --json
      hyperlaunch prepare-data /fsx/raw/ -m qwen3_0_6b -o /fsx/data/raw-qwen3 --slurm --nodes 4 --partition cpu
    """
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.data.tokenizer import tokenizer_for_model

    if tokenizer is not None and model is not None:
        raise InvalidInput("--tokenizer and --model exclude each other: name the tokenizer one way")
    if tokenizer is None and model is None:
        raise InvalidInput("name the tokenizer: --tokenizer T, or --model M for the one training M uses")
    given = {"--nodes": nodes, "--partition": partition, "--time": time_limit, "--after": after, "--python": python}
    if not slurm and any(value is not None for value in given.values()):
        named = ", ".join(flag for flag, value in given.items() if value is not None)
        raise InvalidInput(f"{named}: for --slurm only; without it prepare-data runs here, now")
    choice = tokenizer if tokenizer is not None else tokenizer_for_model(str(model))
    if slurm:
        if step is not None:
            raise InvalidInput("--step is what the --slurm job runs; not with --slurm")
        _submit(inputs, output, choice, nodes or 1, text_field, shard_mb, workers, overwrite, partition, time_limit, after or [], python, as_json)
        return
    if step is not None:
        _step(step, inputs, output, choice, text_field, shard_mb, workers, overwrite, as_json)
        return
    from hyperlaunch.data.prepare import prepare
    from hyperlaunch.data.tokenizer import load_tokenizer

    loaded = load_tokenizer(choice)
    bar = _Bar() if _stderr_is_terminal() else None
    result = prepare(
        inputs, output, loaded, text_field=text_field, workers=workers, shard_mb=shard_mb, overwrite=overwrite, progress=bar,
    )
    if as_json:
        out.json(result.document())
    else:
        out.text(_summary(result))


def _submit(
    inputs: list[Path], output: Path, tokenizer: str, nodes: int, text_field: str, shard_mb: float, workers: int | None, overwrite: bool,
    partition: str | None, time_limit: str | None, after: list[str], python: str | None, as_json: bool,
) -> None:
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.runs.prepare_job import Options, submit_prepare
    from hyperlaunch.slurm.dependencies import parse_after

    options = Options(text_field=text_field, shard_mb=shard_mb, workers=workers, overwrite=overwrite)
    waits = parse_after(after)
    job = submit_prepare(
        inputs, output, tokenizer, options, nodes=nodes, env=slurm_env(), waits=waits, python=python, partition=partition, time_limit=time_limit,
    )
    if as_json:
        out.json(job.document())
        return
    once = f", once job(s) {', '.join(job.after)} end" if job.after else ""
    out.text(f"submitted prepare-data job {job.job_id}: {len(job.inputs)} input(s) -> {job.output} on {job.nodes} node(s){once}")
    out.text(f"  log:         {job.log}")
    out.text(f"  follow it:   hyperlaunch status {job.job_id}")
    out.text(f"               hyperlaunch logs {job.job_id} -f")
    out.text(f"  train on it: hyperlaunch submit --after {job.job_id}:ok --data {job.output} ...")


_STEPS = ("plan", "share", "finish")


def _step(
    step: str, inputs: list[Path], output: Path, tokenizer: str, text_field: str, shard_mb: float, workers: int | None, overwrite: bool, as_json: bool,
) -> None:
    """One step of a preparation across the nodes of a --slurm job: which node this is, and how
    many there are, Slurm says (SLURM_PROCID, SLURM_NTASKS; SLURM_JOB_NUM_NODES)."""
    import os

    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.data.prepare import default_workers, finish_shares, plan_shares, prepare_share
    from hyperlaunch.data.tokenizer import load_tokenizer

    if step not in _STEPS:
        raise InvalidInput(f"--step {step!r} is not one of: {', '.join(_STEPS)}")

    def count(name: str) -> int:
        value = os.environ.get(name, "")
        if not value.isdigit():
            raise InvalidInput(f"--step {step} runs inside the --slurm job's script ({name} is not set)")
        return int(value)

    loaded = load_tokenizer(tokenizer)
    if step == "plan":
        nodes = count("SLURM_JOB_NUM_NODES")
        done = plan_shares(inputs, output, loaded, text_field=text_field, workers=nodes * (workers or default_workers()), shard_mb=shard_mb, overwrite=overwrite)
        out.text(_summary(done) if done is not None else f"planned the units of {output} for {nodes} node(s)")
    elif step == "share":
        share = prepare_share(output, loaded, share=count("SLURM_PROCID"), shares=count("SLURM_NTASKS"), workers=workers)
        rate = share.tokens / max(share.seconds, 1e-9)
        out.text(f"node {share.share + 1} of {share.shares}: {share.units} unit(s), {share.tokens:,} tokens in {share.seconds:.1f} s ({rate:,.0f} tokens/s)")
    else:
        result = finish_shares(output, loaded)
        if as_json:
            out.json(result.document())
        else:
            out.text(_summary(result))


def _summary(result: PrepareResult) -> str:
    m = result.manifest
    what = f"{m.tokens:,} tokens ({m.documents:,} documents, {len(m.shards)} shard{'' if len(m.shards) == 1 else 's'}, {m.dtype}, tokenizer {m.tokenizer['name']})"
    if result.status == "already prepared":
        return f"already prepared: {result.folder} holds {what} from these sources"
    rate = m.tokens / max(result.seconds, 1e-9)
    reused = f"; {result.shards_reused} shard{' was' if result.shards_reused == 1 else 's were'} done by an earlier run" if result.status == "continued" else ""
    return f"{result.status} {what} in {result.folder}, {result.seconds:.1f} s ({rate:,.0f} tokens/s{reused})"


def _stderr_is_terminal() -> bool:
    import sys

    return sys.stderr.isatty()


class _Bar:
    """A progress bar with tokens/s on stderr (terminals only: logs get the summary line)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("tokenizing"), BarColumn(), MofNCompleteColumn(), TextColumn("shards  {task.fields[rate]}"),
            TimeRemainingColumn(), console=Console(stderr=True), transient=True,
        )
        self._task: Any = None
        self._tokens = 0
        self._started = time.perf_counter()

    def start(self, total_units: int, done_units: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("tokenizing", total=total_units, completed=done_units, rate="")

    def advance(self, tokens: int) -> None:
        self._tokens += tokens
        rate = self._tokens / max(time.perf_counter() - self._started, 1e-9)
        self._progress.update(self._task, advance=1, rate=f"{rate:,.0f} tokens/s")

    def finish(self) -> None:
        self._progress.stop()
