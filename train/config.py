"""Command-line flags -> one frozen `TrainConfig`, validated before anything is touched.

Each option is declared once, as a field with its default, help and group; the argparse
parser is built from the fields (`--field-name`, its type from the annotation)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.models import MIXED_PRECISION_CHOICES, SHARDING_CHOICES

GROUPS = ("model", "data", "checkpoints", "parallelism", "optimisation", "monitoring")
DEVICE_CHOICES = ("auto", "cpu", "cuda")
# Here, not in train/losses.py: the CLI reads these flags without torch.
LOSS_CHOICES = ("auto", "plain", "chunked", "liger", "cce")
FSDP_GROUPS_CHOICES = ("per-block", "one")


def option(
    default: Any = dataclasses.MISSING,
    *,
    group: str,
    help: str = "",  # noqa: A002 - argparse's name for it
    choices: tuple[str, ...] | None = None,
    flag: str | None = None,
    metavar: str | None = None,
) -> Any:
    """A TrainConfig field and its command-line option in one declaration. No default makes
    the option required; a bool is a switch (`flag` names its `--no-x` form when it defaults
    to True); `metavar` names the value in --help where the field's name would not say it."""
    assert group in GROUPS, group
    metadata = {"group": group, "help": help, "choices": choices, "flag": flag, "metavar": metavar}
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything one training run needs; built once from the flags."""

    # model
    model: str = option(group="model", help="preset name or local HF model directory")
    model_name: str | None = option(None, group="model", help="checkpoint name (default: the preset's, or the model directory's name)")
    # data
    data: Path | None = option(
        None, group="data",
        help="a folder from `hyperlaunch prepare-data`, or raw .txt/.jsonl/.parquet files, a folder of them or a "
        "save_to_disk dataset, prepared once into <checkpoint-dir>/.hyperlaunch-data/ (default: the built-in corpus)",
    )
    text_field: str = option("text", group="data", help="field holding the text in .jsonl rows and datasets")
    tokenizer: str | None = option(
        None, group="data",
        help="'offline', a local directory or a hub name; one that cannot be loaded is an error, never replaced "
        "(default: without --data the built-in corpus's shipped tokenizer; with it the model directory's own, else the preset's)",
    )
    seq_len: int | None = option(None, group="data", help="tokens per sequence (default: the preset's for GPU or CPU nodes, at most the model's max_position_embeddings)")
    micro_batch_size: int | None = option(None, group="data", help="sequences per rank per micro-step (default: the preset's for GPU or CPU nodes)")
    val_fraction: float = option(0.05, group="data", help="share of the tokens, at the end of the data, held out for validation")
    overfit_batch: bool = option(False, group="data", help="train on the first batch over and over (a debugging aid: loss must fall)")
    # checkpoints
    checkpoint_dir: Path = option(group="checkpoints", help="where <model>-<N>steps/, <model>-latest and <model>-final/ live")
    run_dir: Path = option(None, group="checkpoints", help="where metrics.jsonl goes (default: the checkpoint dir)")
    checkpoint_every: int | None = option(
        None, group="checkpoints", help="steps between checkpoints (default: the preset's; 0: only on exit)"
    )
    checkpoints: bool = option(
        True, group="checkpoints", flag="--no-checkpoints",
        help="save no checkpoint, not at the end nor on a signal, and so export nothing; start from scratch "
        "unless --resume-from names one: for benchmarks and smoke tests (a stopped run starts over)",
    )
    keep_last: int = option(0, group="checkpoints", help="keep this many complete checkpoints (0: all)")
    async_checkpoint: bool = option(
        False, group="checkpoints", help="write checkpoints in the background; the pointer moves when they are complete"
    )
    memory_checkpoint_every: int = option(
        0, group="checkpoints",
        help="also snapshot the state every N steps into host memory, held by a keeper the job runs on each node and "
        "replicated to the next node: a restart inside the allocation loads the newest from there, a requeue starts from "
        "it written to the checkpoint folder (0: off)",
    )
    from_scratch: bool = option(False, group="checkpoints", help="ignore existing checkpoints (never deletes them)")
    resume_from: Path | None = option(None, group="checkpoints", help="load this checkpoint directory instead of following the pointer")
    export: bool = option(
        True, group="checkpoints", flag="--no-export",
        help="do not export <model>-final/ (HF safetensors + tokenizer) when max_steps is reached",
    )
    export_every: int = option(
        0, group="checkpoints",
        help="also write every N-th checkpoint as a Hugging Face model, <model>-<N>steps-hf/, in the background (0: off)",
    )
    # parallelism
    sharding: str | None = option(
        None, group="parallelism", choices=SHARDING_CHOICES,
        help="full (ZeRO-3), grad-op (ZeRO-2), hybrid (HSDP), none (replicate) (default: the preset's)",
    )
    hsdp_shard_size: int | None = option(None, group="parallelism", help="ranks per shard group for --sharding hybrid (default: ranks per node)")
    mixed_precision: str | None = option(
        None, group="parallelism", choices=MIXED_PRECISION_CHOICES, help="default: the preset's on GPU, fp32 on CPU"
    )
    cpu_offload: bool | None = option(
        None, group="parallelism", help="keep sharded parameters, gradients and optimizer state in host memory (default: the preset's)"
    )
    activation_checkpointing: bool | None = option(
        None, group="parallelism", help="recompute each decoder block's activations in backward (default: the preset's)"
    )
    prefetch: int = option(0, group="parallelism", help="explicitly prefetch this many blocks ahead (0: FSDP2's implicit prefetch)")
    reshard_after_forward: bool | None = option(
        None, group="parallelism",
        help="free each block's gathered parameters after its forward and gather them again for backward "
        "(default: on, except on one rank where keeping every block's gathered copy until backward fits the GPU: "
        "there a reshard only costs a copy and a cast per block)",
    )
    fsdp_groups: str | None = option(
        None, group="parallelism", choices=FSDP_GROUPS_CHOICES,
        help="per-block: an FSDP group per decoder block, gathered and reduced block by block; one: the whole "
        "model as one group, gathered once a step and reduced at the end of backward (default: one on one rank "
        "that keeps its gathered parameters, where it fits: there a group per block only adds FSDP's hooks "
        "around every block; per-block otherwise)",
    )
    compile: bool = option(
        False, group="parallelism",
        help="torch.compile each decoder block whole (fullgraph), the final norm and the loss (GPU runs; compiled at the first step)",
    )
    float8: bool = option(
        False, group="parallelism",
        help="train the decoder blocks' linear layers in float8 (torchao; H100 and newer), the output layer "
        "in bf16: for the 8B class and larger, where the matrix products dominate (slower for qwen3_0_6b)",
    )
    device: str = option("auto", group="parallelism", choices=DEVICE_CHOICES, help="cpu, cuda or auto")
    # optimisation
    max_steps: int | None = option(None, group="optimisation", help="optimizer steps to reach, counted across restarts (default: the preset's)")
    grad_accum: int = option(1, group="optimisation", help="micro-steps per optimizer step")
    lr: float = option(3e-4, group="optimisation", help="peak learning rate")
    min_lr: float = option(3e-5, group="optimisation", help="learning rate at the end of the cosine decay")
    warmup_steps: int = option(10, group="optimisation", help="linear warmup steps")
    beta1: float = option(0.9, group="optimisation", help="AdamW beta1")
    beta2: float = option(0.95, group="optimisation", help="AdamW beta2")
    weight_decay: float = option(0.1, group="optimisation", help="AdamW weight decay")
    loss: str = option(
        "auto", group="optimisation", choices=LOSS_CHOICES,
        help="how the output layer and cross-entropy run. plain: Hugging Face's own loss over the whole logits "
        "(the reference); chunked: a chunk of tokens at a time, never the whole fp32 logits (any device); liger: "
        "Liger-Kernel's fused linear cross-entropy (GPU, liger-kernel installed); cce: Apple's cut cross-entropy "
        "(GPU, cut-cross-entropy installed); auto: liger on a GPU where it is installed, else chunked there, "
        "plain on CPU",
    )
    grad_clip: float = option(1.0, group="optimisation", help="clip the global gradient norm to this (0: no clipping)")
    seed: int = option(1234, group="optimisation", help="seed of the initial weights and the data order")
    # monitoring
    log_every: int = option(1, group="monitoring", help="steps between logged steps")
    val_every: int | None = option(None, group="monitoring", help="steps between validation passes (0: never; default: the preset's)")
    val_batches: int = option(4, group="monitoring", help="validation micro-batches per rank per pass (0: the whole split)")
    hang_timeout: float = option(
        10.0, group="monitoring", metavar="MULTIPLE",
        help="a rank that completes no step for this many times the median of its recent step times (at least "
        "--hang-floor) prints every thread's Python stack, records a `hang` failure and exits, so the job restarts "
        "like after a crash instead of waiting out the 30-minute collective timeout (0: no watchdog)",
    )
    hang_floor: float = option(
        300.0, group="monitoring", metavar="SECONDS",
        help="seconds a step may always take before it counts as hung; the first steps of a process, checkpoint "
        "saves and validation passes get 3 times this (or --hang-timeout times their last duration, if longer)",
    )

    def with_defaults(self, values: dict[str, object]) -> TrainConfig:
        """A copy whose unset (None) options take these values (hyperlaunch.core.recommend's)."""
        unset = {name: value for name, value in values.items() if getattr(self, name) is None}
        return dataclasses.replace(self, **unset)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if self.run_dir is None:
            object.__setattr__(self, "run_dir", self.checkpoint_dir)
        if self.max_steps is not None and self.max_steps < 1:
            raise InvalidInput(f"--max-steps must be >= 1, got {self.max_steps}")
        if self.sharding is not None and self.sharding not in SHARDING_CHOICES:
            raise InvalidInput(f"--sharding {self.sharding!r} is not one of {', '.join(SHARDING_CHOICES)}")
        if self.mixed_precision is not None and self.mixed_precision not in MIXED_PRECISION_CHOICES:
            raise InvalidInput(
                f"--mixed-precision {self.mixed_precision!r} is not one of {', '.join(MIXED_PRECISION_CHOICES)}"
            )
        if self.loss not in LOSS_CHOICES:
            raise InvalidInput(f"--loss {self.loss!r} is not one of {', '.join(LOSS_CHOICES)}")
        if self.fsdp_groups is not None and self.fsdp_groups not in FSDP_GROUPS_CHOICES:
            raise InvalidInput(f"--fsdp-groups {self.fsdp_groups!r} is not one of {', '.join(FSDP_GROUPS_CHOICES)}")
        if self.fsdp_groups == "one" and self.reshard_after_forward:
            raise InvalidInput(
                "--fsdp-groups one keeps the gathered parameters from forward to backward; "
                "it cannot be used with --reshard-after-forward (use --fsdp-groups per-block)"
            )
        if self.fsdp_groups == "one" and self.prefetch > 0:
            raise InvalidInput(
                "--prefetch gathers decoder blocks ahead, each its own FSDP group; with --fsdp-groups one there "
                "are none (use --fsdp-groups per-block, or leave --fsdp-groups out)"
            )
        if self.device not in DEVICE_CHOICES:
            raise InvalidInput(f"--device {self.device!r} is not one of {', '.join(DEVICE_CHOICES)}")
        for flag, value in (
            ("--grad-accum", self.grad_accum),
            ("--log-every", self.log_every),
            ("--seq-len", self.seq_len),
            ("--micro-batch-size", self.micro_batch_size),
            ("--hsdp-shard-size", self.hsdp_shard_size),
        ):
            if value is not None and value < 1:
                raise InvalidInput(f"{flag} must be >= 1, got {value}")
        for flag, value in (
            ("--keep-last", self.keep_last),
            ("--export-every", self.export_every),
            ("--memory-checkpoint-every", self.memory_checkpoint_every),
            ("--prefetch", self.prefetch),
            ("--val-every", self.val_every),
            ("--warmup-steps", self.warmup_steps),
        ):
            if value is not None and value < 0:
                raise InvalidInput(f"{flag} must be >= 0, got {value}")
        if self.checkpoint_every is not None and self.checkpoint_every < 0:
            raise InvalidInput(f"--checkpoint-every must be >= 0, got {self.checkpoint_every}")
        if not self.checkpoints:
            for flag, value in (
                ("--checkpoint-every", self.checkpoint_every),
                ("--keep-last", self.keep_last),
                ("--export-every", self.export_every),
            ):
                if value:
                    raise InvalidInput(f"--no-checkpoints saves nothing, so {flag} {value} has nothing to act on: leave one out")
            if self.async_checkpoint:
                raise InvalidInput("--no-checkpoints saves nothing, so --async-checkpoint has nothing to act on: leave one out")
        if not 0.0 < self.val_fraction < 0.5:
            raise InvalidInput(f"--val-fraction must be in (0, 0.5), got {self.val_fraction}")
        if not (math.isfinite(self.hang_timeout) and (self.hang_timeout == 0 or self.hang_timeout >= 1)):
            raise InvalidInput(
                f"--hang-timeout must be 0 (no watchdog) or a multiple >= 1 of the recent step time, got {self.hang_timeout}"
            )
        if not (math.isfinite(self.hang_floor) and self.hang_floor > 0):
            raise InvalidInput(f"--hang-floor must be a number of seconds > 0, got {self.hang_floor}")
        if self.from_scratch and self.resume_from is not None:
            raise InvalidInput("--from-scratch and --resume-from exclude each other")


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage and exits; we want one line through InvalidInput instead."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InvalidInput(f"{message}{self._closest_flag(message)} (see hyperlaunch-train --help)")

    def _closest_flag(self, message: str) -> str:
        """` (did you mean --lr?)` for argparse's `unrecognized arguments: --lrr 3`."""
        from hyperlaunch.core.suggest import did_you_mean

        if not message.startswith("unrecognized arguments:"):
            return ""
        unknown = next((word.split("=", 1)[0] for word in message.split()[2:] if word.startswith("--")), None)
        flags = [flag for flag in self._option_string_actions if flag.startswith("--")]
        return did_you_mean(unknown, flags) if unknown else ""


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line, derived from TrainConfig's fields."""
    p = _OneLineParser(
        prog="python -m hyperlaunch.train",
        # A shortened flag (--model-n for --model-name) must not pass: hyperlaunch reads some
        # flags in a job's arguments by their full names, and a typo must fail, not guess.
        allow_abbrev=False,
        description="FSDP2 training of a Hugging Face causal LM with crash-safe, resumable checkpoints. "
        "Exit code 75 means: a signal asked us to stop, a checkpoint was saved (none with --no-checkpoints), please requeue.",
    )
    groups = {name: p.add_argument_group(name) for name in GROUPS}
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        meta = f.metadata
        flag = meta["flag"] or "--" + f.name.replace("_", "-")
        group = groups[meta["group"]]
        if hints[f.name] is bool:
            action = "store_false" if f.default is True else "store_true"
            group.add_argument(flag, dest=f.name, action=action, help=meta["help"])
            continue
        if hints[f.name] == bool | None:  # unset: the preset decides; --x / --no-x decide instead
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=meta["help"])
            continue
        required = f.default is dataclasses.MISSING
        group.add_argument(
            flag, dest=f.name, type=_value_type(hints[f.name]), required=required, choices=meta["choices"],
            default=None if required else f.default, help=meta["help"], metavar=meta["metavar"],
        )
    return p


def _value_type(hint: object) -> type:
    """str, int, float or Path, from `X` or `X | None`."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    kind = args[0]
    assert kind in (str, int, float, Path), hint
    return kind


def parse_config(argv: list[str] | None = None) -> TrainConfig:
    return TrainConfig(**vars(build_parser().parse_args(argv)))
