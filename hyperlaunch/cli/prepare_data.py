"""`hyperlaunch prepare-data`: tokenize text once into memory-mapped shards that training jobs
read with `--data DIR` (hyperlaunch.data.prepare does the work; this wires the flags)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from hyperlaunch.data.prepare import PrepareResult


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
        int | None, typer.Option("--workers", metavar="N", min=1, help="Tokenizing processes [default: the CPUs this process may use].")
    ] = None,
    text_field: Annotated[str, typer.Option("--text-field", metavar="FIELD", help="Field or column holding the text (.jsonl, .parquet, datasets).")] = "text",
    shard_mb: Annotated[float, typer.Option("--shard-mb", metavar="MB", help="Largest shard, in MB of input text.")] = 32.0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a folder prepared from other sources or with another tokenizer.")] = False,
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

    Examples:

    \b
      hyperlaunch prepare-data corpus.jsonl --model qwen3_0_6b --output /fsx/data/corpus-qwen3
      hyperlaunch prepare-data /fsx/raw/ --tokenizer /fsx/models/Llama-3.1-8B --output /fsx/data/llama --json
    """
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.data.prepare import prepare
    from hyperlaunch.data.tokenizer import load_tokenizer, tokenizer_for_model

    if tokenizer is not None and model is not None:
        raise InvalidInput("--tokenizer and --model exclude each other: name the tokenizer one way")
    if tokenizer is None and model is None:
        raise InvalidInput("name the tokenizer: --tokenizer T, or --model M for the one training M uses")
    loaded = load_tokenizer(tokenizer if tokenizer is not None else tokenizer_for_model(str(model)))
    bar = _Bar() if _stderr_is_terminal() else None
    result = prepare(
        inputs, output, loaded, text_field=text_field, workers=workers, shard_mb=shard_mb, overwrite=overwrite, progress=bar,
    )
    if as_json:
        out.json(result.document())
    else:
        out.text(_summary(result))


def _summary(result: PrepareResult) -> str:
    m = result.manifest
    what = f"{m.tokens:,} tokens ({m.documents:,} documents, {len(m.shards)} shards, {m.dtype}, tokenizer {m.tokenizer['name']})"
    if result.status == "already prepared":
        return f"already prepared: {result.folder} holds {what} from these sources"
    rate = m.tokens / max(result.seconds, 1e-9)
    reused = f"; {result.shards_reused} shards were done by an earlier run" if result.status == "continued" else ""
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
