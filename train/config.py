"""Command-line flags -> one frozen `TrainConfig`, validated before anything is touched."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.errors import InvalidInput
from hyperlaunch.models import MIXED_PRECISION_CHOICES, SHARDING_CHOICES


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything one training run needs; built once from the flags."""

    model: str
    """Preset name or a local Hugging Face model directory (pretrained weights)."""
    model_name: str | None
    """Name used for checkpoints when --model is a directory (default: its basename)."""
    data: Path | None
    """.txt / .jsonl file, a directory of them, or a `save_to_disk` dataset; None: built-in."""
    text_field: str
    """Field holding the text in .jsonl rows and datasets."""
    tokenizer: str | None
    """`offline`, a local directory or a hub name; None: the preset's choice."""
    checkpoint_dir: Path
    """Where `<model>-<N>steps/`, `<model>-latest` and `<model>-final/` live."""
    run_dir: Path
    """Where metrics.jsonl goes."""
    max_steps: int
    """Optimizer steps to reach (counted across restarts)."""
    checkpoint_every: int | None
    """Steps between checkpoints; None: the preset's recommendation; 0: only on exit."""
    keep_last: int
    """Keep this many complete checkpoints (0: all)."""
    async_checkpoint: bool
    """Write checkpoints in the background; the pointer moves when they are complete."""
    from_scratch: bool
    """Ignore existing checkpoints (never deletes them)."""
    resume_from: Path | None
    """Load this checkpoint directory instead of following the pointer."""
    export: bool
    """Export `<model>-final/` (HF safetensors + tokenizer) when max_steps is reached."""
    sharding: str
    """full (ZeRO-3), grad-op (ZeRO-2), hybrid (HSDP), none (replicate)."""
    hsdp_shard_size: int | None
    """Ranks per shard group for --sharding hybrid (default: ranks per node)."""
    mixed_precision: str | None
    """bf16 or fp32; None: the preset's recommendation."""
    cpu_offload: bool
    """Keep sharded parameters, gradients and optimizer state in host memory."""
    activation_checkpointing: bool
    """Recompute each decoder block's activations in backward."""
    prefetch: int
    """Explicitly prefetch this many blocks ahead (0: FSDP2's implicit prefetch)."""
    compile: bool
    """torch.compile each decoder block."""
    micro_batch_size: int | None
    """Sequences per rank per micro-step; None: the preset's recommendation."""
    seq_len: int | None
    """Tokens per sequence; None: the preset's recommendation."""
    grad_accum: int
    """Micro-steps per optimizer step."""
    lr: float
    min_lr: float
    warmup_steps: int
    beta1: float
    beta2: float
    weight_decay: float
    grad_clip: float
    """Clip the global gradient norm to this (0: no clipping)."""
    seed: int
    val_every: int
    """Steps between validation passes (0: never)."""
    val_fraction: float
    """Share of packed sequences held out for validation."""
    val_batches: int
    """Validation micro-batches per rank per pass (0: the whole split)."""
    log_every: int
    overfit_batch: bool
    """Train on the first batch over and over (a debugging aid: loss must fall)."""
    device: str
    """cpu, cuda or auto."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise InvalidInput(f"--max-steps must be >= 1, got {self.max_steps}")
        if self.sharding not in SHARDING_CHOICES:
            raise InvalidInput(f"--sharding {self.sharding!r} is not one of {', '.join(SHARDING_CHOICES)}")
        if self.mixed_precision is not None and self.mixed_precision not in MIXED_PRECISION_CHOICES:
            raise InvalidInput(
                f"--mixed-precision {self.mixed_precision!r} is not one of {', '.join(MIXED_PRECISION_CHOICES)}"
            )
        if self.device not in ("auto", "cpu", "cuda"):
            raise InvalidInput(f"--device {self.device!r} is not one of auto, cpu, cuda")
        for flag, value in (
            ("--grad-accum", self.grad_accum),
            ("--log-every", self.log_every),
        ):
            if value < 1:
                raise InvalidInput(f"{flag} must be >= 1, got {value}")
        for flag, value in (
            ("--keep-last", self.keep_last),
            ("--prefetch", self.prefetch),
            ("--val-every", self.val_every),
            ("--warmup-steps", self.warmup_steps),
        ):
            if value < 0:
                raise InvalidInput(f"{flag} must be >= 0, got {value}")
        if self.checkpoint_every is not None and self.checkpoint_every < 0:
            raise InvalidInput(f"--checkpoint-every must be >= 0, got {self.checkpoint_every}")
        if not 0.0 < self.val_fraction < 0.5:
            raise InvalidInput(f"--val-fraction must be in (0, 0.5), got {self.val_fraction}")
        if self.from_scratch and self.resume_from is not None:
            raise InvalidInput("--from-scratch and --resume-from exclude each other")


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage and exits; we want one line through InvalidInput instead."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InvalidInput(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(
        prog="python -m hyperlaunch.train",
        description="FSDP2 training of a Hugging Face causal LM with crash-safe, resumable checkpoints. "
        "Exit code 75 means: a signal asked us to stop, a checkpoint was saved, please requeue.",
    )
    model = p.add_argument_group("model")
    model.add_argument("--model", required=True, help="preset name or local HF model directory")
    model.add_argument("--model-name", help="checkpoint name when --model is a directory")
    data = p.add_argument_group("data")
    data.add_argument("--data", type=Path, help=".txt/.jsonl file or directory, or a save_to_disk dataset (default: built-in corpus)")
    data.add_argument("--text-field", default="text")
    data.add_argument("--tokenizer", help="'offline', a local directory or a hub name (default: the preset's)")
    data.add_argument("--seq-len", type=int)
    data.add_argument("--micro-batch-size", type=int)
    data.add_argument("--val-fraction", type=float, default=0.05)
    data.add_argument("--overfit-batch", action="store_true")
    ckpt = p.add_argument_group("checkpoints")
    ckpt.add_argument("--checkpoint-dir", type=Path, required=True)
    ckpt.add_argument("--run-dir", type=Path, help="default: the checkpoint dir")
    ckpt.add_argument("--checkpoint-every", type=int)
    ckpt.add_argument("--keep-last", type=int, default=0)
    ckpt.add_argument("--async-checkpoint", action="store_true")
    ckpt.add_argument("--from-scratch", action="store_true")
    ckpt.add_argument("--resume-from", type=Path)
    ckpt.add_argument("--no-export", dest="export", action="store_false")
    par = p.add_argument_group("parallelism")
    par.add_argument("--sharding", default="full", choices=SHARDING_CHOICES)
    par.add_argument("--hsdp-shard-size", type=int)
    par.add_argument("--mixed-precision", choices=MIXED_PRECISION_CHOICES, help="default: the preset's on GPU, fp32 on CPU")
    par.add_argument("--cpu-offload", action="store_true")
    par.add_argument("--activation-checkpointing", action="store_true")
    par.add_argument("--prefetch", type=int, default=0)
    par.add_argument("--compile", action="store_true", help="torch.compile each decoder block (GPU runs; compiled at the first step)")
    par.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--max-steps", type=int, required=True)
    opt.add_argument("--grad-accum", type=int, default=1)
    opt.add_argument("--lr", type=float, default=3e-4)
    opt.add_argument("--min-lr", type=float, default=3e-5)
    opt.add_argument("--warmup-steps", type=int, default=10)
    opt.add_argument("--beta1", type=float, default=0.9)
    opt.add_argument("--beta2", type=float, default=0.95)
    opt.add_argument("--weight-decay", type=float, default=0.1)
    opt.add_argument("--grad-clip", type=float, default=1.0)
    opt.add_argument("--seed", type=int, default=1234)
    mon = p.add_argument_group("monitoring")
    mon.add_argument("--log-every", type=int, default=1)
    mon.add_argument("--val-every", type=int, default=0)
    mon.add_argument("--val-batches", type=int, default=4)
    return p


def parse_config(argv: list[str] | None = None) -> TrainConfig:
    ns = build_parser().parse_args(argv)
    run_dir = ns.run_dir if ns.run_dir is not None else ns.checkpoint_dir
    return TrainConfig(
        model=ns.model,
        model_name=ns.model_name,
        data=ns.data,
        text_field=ns.text_field,
        tokenizer=ns.tokenizer,
        checkpoint_dir=ns.checkpoint_dir,
        run_dir=run_dir,
        max_steps=ns.max_steps,
        checkpoint_every=ns.checkpoint_every,
        keep_last=ns.keep_last,
        async_checkpoint=ns.async_checkpoint,
        from_scratch=ns.from_scratch,
        resume_from=ns.resume_from,
        export=ns.export,
        sharding=ns.sharding,
        hsdp_shard_size=ns.hsdp_shard_size,
        mixed_precision=ns.mixed_precision,
        cpu_offload=ns.cpu_offload,
        activation_checkpointing=ns.activation_checkpointing,
        prefetch=ns.prefetch,
        compile=ns.compile,
        micro_batch_size=ns.micro_batch_size,
        seq_len=ns.seq_len,
        grad_accum=ns.grad_accum,
        lr=ns.lr,
        min_lr=ns.min_lr,
        warmup_steps=ns.warmup_steps,
        beta1=ns.beta1,
        beta2=ns.beta2,
        weight_decay=ns.weight_decay,
        grad_clip=ns.grad_clip,
        seed=ns.seed,
        val_every=ns.val_every,
        val_fraction=ns.val_fraction,
        val_batches=ns.val_batches,
        log_every=ns.log_every,
        overfit_batch=ns.overfit_batch,
        device=ns.device,
    )
