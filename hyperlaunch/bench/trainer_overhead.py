"""Trainer overhead: tokens/s of train/ against the minimal hand-written FSDP2 loop in
hyperlaunch.bench.minimal_fsdp: same model, batch and sequence length, 2 ranks on CPU (gloo),
no checkpoints in either. Printed as a ratio (train/ over minimal; 1.0 means no overhead).

    python -m hyperlaunch.bench trainer [--runs 3] [--model llama_tiny] [--seq-len 128]
        [--micro-batch-size 4] [--warmup 10] [--steps 50]

The two alternate, run after run. Each times `--steps` steps after `--warmup` steps: the
minimal loop with barriers around its window, train/ from the wall-clock times of its step
records (it logs every `--warmup` steps only, a handful of lines; the end-of-run checkpoint
train/ always writes falls after the window)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser, records, torchrun


def run_trainer(args: argparse.Namespace, work: Path) -> float:
    """tokens/s of train/ over steps warmup..warmup+steps."""
    run_dir = work / "run"
    torchrun(2, [
        "hyperlaunch.train", "--model", args.model, "--seq-len", str(args.seq_len),
        "--micro-batch-size", str(args.micro_batch_size), "--max-steps", str(args.warmup + args.steps),
        "--log-every", str(args.warmup), "--no-checkpoints",
        "--checkpoint-dir", str(work / "ckpt"), "--run-dir", str(run_dir), "--from-scratch",
    ])
    steps = {record["step"]: record["time"] for record in records(run_dir, "step")}
    last = args.warmup + args.steps
    seconds = steps[last] - steps[args.warmup]
    return args.steps * args.micro_batch_size * args.seq_len * 2 / seconds


def run_minimal(args: argparse.Namespace) -> float:
    out = torchrun(2, [
        "hyperlaunch.bench.minimal_fsdp", "--model", args.model, "--seq-len", str(args.seq_len),
        "--micro-batch-size", str(args.micro_batch_size), "--warmup", str(args.warmup), "--steps", str(args.steps),
    ])
    return float(json.loads(out.strip().splitlines()[-1])["tokens_per_s"])


def main(argv: list[str] | None = None) -> int:
    options = parser("trainer", __doc__)
    options.add_argument("--runs", type=int, default=3)
    options.add_argument("--model", default="llama_tiny")
    options.add_argument("--seq-len", type=int, default=128)
    options.add_argument("--micro-batch-size", type=int, default=4)
    options.add_argument("--warmup", type=int, default=10)
    options.add_argument("--steps", type=int, default=50)
    args = options.parse_args(argv)
    import torch  # noqa: F401 - for the machine line

    header("Trainer overhead", f"{args.model}, seq {args.seq_len}, micro-batch {args.micro_batch_size}, 2 CPU ranks "
           f"(gloo, OMP_NUM_THREADS=1 per rank as torchrun sets it); {args.steps} timed steps after {args.warmup}; "
           f"{args.runs} runs each, alternating")
    trainer: list[float] = []
    minimal: list[float] = []
    for index in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="hyperlaunch-bench-trainer-") as work:
            trainer.append(run_trainer(args, Path(work)))
        minimal.append(run_minimal(args))
        print(f"  run {index + 1}: train/ {trainer[-1]:.0f} tok/s, minimal loop {minimal[-1]:.0f} tok/s", flush=True)
    print(f"  train/        tokens/s  {spread(trainer, '.0f')}")
    print(f"  minimal loop  tokens/s  {spread(minimal, '.0f')}")
    ratio = statistics.median(trainer) / statistics.median(minimal)
    print(f"  ratio (median train/ / median minimal): {ratio:.3f}  target >= 0.95: {'met' if ratio >= 0.95 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
