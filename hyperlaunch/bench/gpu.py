"""GPU: train/ on one CUDA GPU in bf16 - tokens/s per GPU, MFU and peak memory - plain, with
activation checkpointing, with torch.compile, and with both.

    python -m hyperlaunch.bench gpu [--model qwen3_0_6b] [--seq-len 4096]
        [--micro-batch-size 2] [--steps 30] [--warmup 10] [--variants plain,ac,compile,ac+compile]

Each variant is a fresh single-process torchrun (`--device cuda --mixed-precision bf16`); the
figures are medians over the step records after --warmup steps (compilation and the first
allocations fall before). MFU counts 6 x parameters + attention FLOPs per token against the
GPU's dense bf16 peak (hyperlaunch.train.metrics). Needs a GPU; prints why not otherwise."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser, records, torchrun

VARIANTS = {
    "plain": [],
    "ac": ["--activation-checkpointing"],
    "compile": ["--compile"],
    "ac+compile": ["--activation-checkpointing", "--compile"],
}


def run_variant(args: argparse.Namespace, flags: list[str], work: Path) -> list[dict]:
    run_dir = work / "run"
    torchrun(1, [
        "hyperlaunch.train", "--model", args.model, "--device", "cuda", "--mixed-precision", "bf16",
        "--seq-len", str(args.seq_len), "--micro-batch-size", str(args.micro_batch_size),
        "--max-steps", str(args.warmup + args.steps), "--checkpoint-every", "0", "--no-export",
        "--checkpoint-dir", str(work / "ckpt"), "--run-dir", str(run_dir), "--from-scratch", *flags,
    ])
    return [r for r in records(run_dir, "step") if r["step"] > args.warmup]


def main(argv: list[str] | None = None) -> int:
    options = parser("gpu", __doc__)
    options.add_argument("--model", default="qwen3_0_6b")
    options.add_argument("--seq-len", type=int, default=4096)
    options.add_argument("--micro-batch-size", type=int, default=2)
    options.add_argument("--steps", type=int, default=30)
    options.add_argument("--warmup", type=int, default=10)
    options.add_argument("--variants", default=",".join(VARIANTS))
    args = options.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench gpu: no CUDA device visible to this torch build; run it on a GPU machine")
        return 2
    header("GPU", f"{args.model}, bf16, seq {args.seq_len}, micro-batch {args.micro_batch_size}, 1 GPU; "
           f"median over {args.steps} steps after {args.warmup}")
    for name in args.variants.split(","):
        with tempfile.TemporaryDirectory(prefix="hyperlaunch-bench-gpu-") as work:
            steps = run_variant(args, VARIANTS[name], Path(work))
        tokens = [r["tokens_per_s_per_device"] for r in steps]
        mfu = [r["mfu"] * 100 for r in steps if r.get("mfu") is not None]
        peak = max(r["peak_memory_bytes"] for r in steps) / 2**30
        mfu_text = f"MFU {statistics.median(mfu):.1f} %" if mfu else "MFU n/a (GPU not in the peak table)"
        print(f"  {name:<11} tokens/s/GPU {spread(tokens, '.0f')}  {mfu_text}  peak {peak:.1f} GiB", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
