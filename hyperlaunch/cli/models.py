"""`hyperlaunch models`: the model presets, their architecture and the settings they run
with by default (ModelSpec). Reads only hyperlaunch.core.models, so it needs no torch."""

from __future__ import annotations

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
) -> None:
    """List the model presets: architecture (layers, hidden size, heads, KV heads, vocab,
    parameter estimate, tied embeddings) and recommended settings (nodes, GPUs per node,
    micro-batch, sequence length, precision, sharding, checkpoint interval).

    Pass a preset name to --model of submit/render; flags override its recommendations.

    Examples:

    \b
      hyperlaunch models
      hyperlaunch models --json | jq '.models[] | {name, params}'
    """
    from hyperlaunch.core.models import PRESETS

    specs = [factory() for factory in PRESETS.values()]
    if as_json:
        out.json({"models": [model_document(spec) for spec in specs]})
        return
    out.table(_architecture_table(specs), _recommended_table(specs))


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


def _architecture_table(specs: list[ModelSpec]) -> Table:
    from rich.table import Table

    table = Table(title="Model presets: architecture", title_justify="left")
    for header in ("preset", "kind", "params", "layers", "hidden", "heads", "kv heads", "head dim", "mlp", "vocab", "tied"):
        table.add_column(header, justify="left" if header in ("preset", "kind", "tied") else "right")
    for spec in specs:
        table.add_row(
            spec.name,
            spec.kind,
            format_params(spec.num_params),
            str(spec.num_layers),
            str(spec.hidden_size),
            str(spec.num_heads),
            str(spec.num_kv_heads),
            str(spec.head_dim),
            str(spec.intermediate_size),
            str(spec.vocab_size),
            _yes_no(spec.tie_word_embeddings),
        )
    return table


def _recommended_table(specs: list[ModelSpec]) -> Table:
    from rich.table import Table

    table = Table(title="Recommended settings (flags override them)", title_justify="left")
    numbers = ("micro-batch x seq len (GPU / CPU)", "steps", "ckpt every", "val every")
    for header in ("preset", "nodes x gpus", *numbers[:1], "precision", "sharding", "act. ckpt", "offload", *numbers[1:], "description"):
        table.add_column(header, justify="right" if header in numbers else "left")
    for spec in specs:
        table.add_row(
            spec.name,
            f"{spec.nodes} x {spec.gpus_per_node}",
            f"{spec.micro_batch_size} x {spec.seq_len} / {spec.cpu_micro_batch_size} x {spec.cpu_seq_len}",
            spec.mixed_precision,
            spec.sharding,
            _yes_no(spec.activation_checkpointing),
            _yes_no(spec.cpu_offload),
            str(spec.max_steps),
            str(spec.checkpoint_every),
            str(spec.val_every),
            spec.description,
        )
    return table
