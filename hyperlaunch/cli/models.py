"""`hyperlaunch models`: the model presets, their architecture and the settings they run
with by default (ModelSpec). Reads only hyperlaunch.core.models, so it needs no torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from rich.table import Table

    from hyperlaunch.core.models import ModelSpec

_ARCHITECTURE_FIELDS = (
    "kind",
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "rope_theta",
    "rms_norm_eps",
    "max_position_embeddings",
)
_RECOMMENDED_FIELDS = (
    "nodes",
    "gpus_per_node",
    "micro_batch_size",
    "seq_len",
    "cpu_micro_batch_size",
    "cpu_seq_len",
    "mixed_precision",
    "sharding",
    "activation_checkpointing",
    "cpu_offload",
    "max_steps",
    "checkpoint_every",
    "val_every",
    "tokenizer",
)


def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")] = False,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide", "-w", help="Every column the presets know: head dim, MLP, tied embeddings, non-embedding parameters, "
            "RoPE, norm eps, context, CPU batch, sharding, offload, steps, intervals, tokenizer."
        ),
    ] = False,
) -> None:
    """List the model presets: architecture (layers, hidden size, heads, KV heads, vocab,
    parameter estimate) and recommended settings (nodes, GPUs per node, micro-batch, sequence
    length, precision); --wide adds the rest.

    Pass a preset name to --model of submit/render; flags override its recommendations.

    Examples:

    \b
      hyperlaunch models
      hyperlaunch models --wide
      hyperlaunch models --json | jq '.models[] | {name, params}'
    """
    from hyperlaunch.core.models import PRESETS

    specs = [factory() for factory in PRESETS.values()]
    if as_json:
        out.json({"models": [model_document(spec) for spec in specs]})
        return
    _print_whole_names(
        _table("Model presets: architecture", _ARCHITECTURE_COLUMNS, specs, wide),
        _table("Recommended settings (flags override them)", _RECOMMENDED_COLUMNS, specs, wide),
    )


def model_document(spec: ModelSpec) -> dict[str, object]:
    """One preset as JSON: numbers stay numbers; the parameter count is exact."""
    architecture: dict[str, object] = {field: getattr(spec, field) for field in _ARCHITECTURE_FIELDS}
    architecture["rope_scaling"] = dict(spec.rope_scaling) if spec.rope_scaling else None
    return {
        "name": spec.name,
        "description": spec.description,
        "params": spec.num_params,
        "non_embedding_params": spec.non_embedding_params,
        "architecture": architecture,
        "recommended": {field: getattr(spec, field) for field in _RECOMMENDED_FIELDS},
    }


def format_params(count: int) -> str:
    """596M, 8.03B: parameter counts the way model cards write them (powers of 1000)."""
    for threshold, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= threshold:
            value = count / threshold
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f}{suffix}"
    return str(count)


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


@dataclass(frozen=True)
class _Column:
    header: str
    cell: Callable[[ModelSpec], str]
    numeric: bool = False
    wide_only: bool = False
    """Shown with --wide only: the default view fits 80 columns with every preset's name whole."""
    wraps: bool = False
    """Prose that may wrap at spaces; every other cell stays on one line, whole."""


def _rope_scaling(spec: ModelSpec) -> str:
    return ", ".join(f"{key}={value}" for key, value in spec.rope_scaling) if spec.rope_scaling else "-"


_ARCHITECTURE_COLUMNS = (
    _Column("kind", lambda s: s.kind),
    _Column("params", lambda s: format_params(s.num_params), numeric=True),
    _Column("non-emb params", lambda s: format_params(s.non_embedding_params), numeric=True, wide_only=True),
    _Column("layers", lambda s: str(s.num_layers), numeric=True),
    _Column("hidden", lambda s: str(s.hidden_size), numeric=True),
    _Column("heads", lambda s: str(s.num_heads), numeric=True),
    _Column("kv heads", lambda s: str(s.num_kv_heads), numeric=True),
    _Column("head dim", lambda s: str(s.head_dim), numeric=True, wide_only=True),
    _Column("mlp", lambda s: str(s.intermediate_size), numeric=True, wide_only=True),
    _Column("vocab", lambda s: str(s.vocab_size), numeric=True),
    _Column("tied", lambda s: _yes_no(s.tie_word_embeddings), wide_only=True),
    _Column("rope theta", lambda s: f"{s.rope_theta:g}", numeric=True, wide_only=True),
    _Column("rope scaling", _rope_scaling, wide_only=True, wraps=True),
    _Column("norm eps", lambda s: f"{s.rms_norm_eps:g}", numeric=True, wide_only=True),
    _Column("max positions", lambda s: str(s.max_position_embeddings), numeric=True, wide_only=True),
)
_RECOMMENDED_COLUMNS = (
    _Column("nodes x gpus", lambda s: f"{s.nodes} x {s.gpus_per_node}"),
    _Column("micro-batch x seq len", lambda s: f"{s.micro_batch_size} x {s.seq_len}", numeric=True),
    _Column("on CPU", lambda s: f"{s.cpu_micro_batch_size} x {s.cpu_seq_len}", numeric=True, wide_only=True),
    _Column("precision", lambda s: s.mixed_precision),
    _Column("sharding", lambda s: s.sharding, wide_only=True),
    _Column("act. ckpt", lambda s: _yes_no(s.activation_checkpointing)),
    _Column("offload", lambda s: _yes_no(s.cpu_offload), wide_only=True),
    _Column("steps", lambda s: str(s.max_steps), numeric=True, wide_only=True),
    _Column("ckpt every", lambda s: str(s.checkpoint_every), numeric=True, wide_only=True),
    _Column("val every", lambda s: str(s.val_every), numeric=True, wide_only=True),
    _Column("tokenizer", lambda s: s.tokenizer, wide_only=True),
    _Column("description", lambda s: s.description, wide_only=True, wraps=True),
)


def _table(title: str, columns: tuple[_Column, ...], specs: list[ModelSpec], wide: bool) -> tuple[Table, int]:
    """The table and the narrowest it can be with every cell whole (prose wrapped at spaces)."""
    from rich.cells import cell_len
    from rich.table import Table

    shown = [_Column("preset", lambda s: s.name), *(column for column in columns if wide or not column.wide_only)]
    rows = [[column.cell(spec) for column in shown] for spec in specs]
    table = Table(title=title, title_justify="left")
    narrowest = 1  # the left border
    for index, column in enumerate(shown):
        # Folded, not cut, should a word be wider than the column.
        table.add_column(column.header, justify="right" if column.numeric else "left", no_wrap=not column.wraps, overflow="fold")
        texts = [column.header, *(row[index] for row in rows)]
        pieces = [word for text in texts for word in text.split()] if column.wraps else texts
        narrowest += max(cell_len(piece) for piece in pieces) + 3  # padding either side, a border
    for row in rows:
        table.add_row(*row)
    return table, narrowest


def _print_whole_names(*tables: tuple[Table, int]) -> None:
    """rich fits a table to the terminal by wrapping its wrappable columns and, when that is not
    enough, by cutting every column short, the presets' names included (`qwen3_0…`). A table
    that cannot fit whole is printed at its narrowest whole width instead: the terminal wraps
    its lines, and every name and number stays whole."""
    console = out.console()
    for table, narrowest in tables:
        if narrowest > console.width:
            table.width = narrowest
        console.print(table, crop=False)
