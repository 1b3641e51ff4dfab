"""Memory per rank: peak resident memory of each rank training `qwen3_0_6b` (the real 0.6B
architecture, fp32, CPU) for a few steps, with --sharding full, grad-op and none on 2 ranks,
against 1 unsharded rank. Printed as ratios to the unsharded peak.

The unsharded reference is a plain model (no FSDP) on one process, trained by the minimal loop
of hyperlaunch.bench.minimal_fsdp with train/'s fused AdamW and allocator setting: what the
model costs without sharding. train/ on one rank with --sharding none (FSDP2 over a mesh of
one, which also keeps a gathered copy of the parameters) is printed beside it.

    python -m hyperlaunch.bench memory [--model qwen3_0_6b] [--steps 3] [--seq-len 64]
        [--runs 1] [--only full,grad-op,none]

Each configuration is a fresh torchrun; the figure is the largest rank's peak RSS (ru_maxrss)
at the last step, as train/ records it for every rank in its step records, so the end-of-run
checkpoint does not count. `none` on 2 ranks needs two unsharded copies: it is skipped, with
the reason printed, when the machine's memory cannot hold them."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser, records, torchrun

TARGET_FULL = 0.65
BASELINE = "unsharded (1 rank)"
CONFIGS = {  # name -> (ranks, --sharding); the baseline is the plain minimal loop
    BASELINE: (1, "plain"),
    "train/ none on 1 rank": (1, "none"),
    "full": (2, "full"),
    "grad-op": (2, "grad-op"),
    "none": (2, "none"),
}


def _available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def peak_per_rank(model: str, ranks: int, sharding: str, steps: int, seq_len: int, work: Path) -> list[int]:
    if sharding == "plain":
        out = torchrun(1, [
            "hyperlaunch.bench.minimal_fsdp", "--model", model, "--seq-len", str(seq_len), "--micro-batch-size", "1",
            "--warmup", "1", "--steps", str(steps - 1), "--no-shard", "--fused", "--return-freed-memory",
        ])
        return [int(json.loads(out.strip().splitlines()[-1])["peak_memory_bytes"])]
    run_dir = work / "run"
    torchrun(ranks, [
        "hyperlaunch.train", "--model", model, "--sharding", sharding, "--max-steps", str(steps),
        "--seq-len", str(seq_len), "--micro-batch-size", "1", "--log-every", str(steps),
        "--no-checkpoints", "--checkpoint-dir", str(work / "ckpt"),
        "--run-dir", str(run_dir), "--from-scratch", "--val-fraction", "0.01",
    ])
    last = records(run_dir, "step")[-1]
    return [int(b) for b in last["peak_memory_bytes_per_rank"]]


def main(argv: list[str] | None = None) -> int:
    options = parser("memory", __doc__)
    options.add_argument("--model", default="qwen3_0_6b")
    options.add_argument("--steps", type=int, default=3)
    options.add_argument("--seq-len", type=int, default=64)
    options.add_argument("--runs", type=int, default=1)
    options.add_argument("--only", default="", help="comma-separated subset of: full, grad-op, none")
    args = options.parse_args(argv)
    import torch  # noqa: F401 - for the machine line

    wanted = [BASELINE] + ([n for n in args.only.split(",") if n] or ["train/ none on 1 rank", "full", "grad-op", "none"])
    header("Memory per rank", f"{args.model}, fp32, seq {args.seq_len}, micro-batch 1, {args.steps} steps, AdamW; "
           f"{args.runs} run(s) per configuration; GiB of peak RSS of the largest rank")
    peaks: dict[str, list[float]] = {}
    for name in wanted:
        ranks, sharding = CONFIGS[name]
        if ranks > 1 and sharding == "none" and peaks.get("train/ none on 1 rank"):
            need = 2 * max(peaks["train/ none on 1 rank"]) * 2**30
            if need > 0.95 * _available_bytes():
                print(f"  {name:<20} skipped: 2 unsharded ranks need about {need / 2**30:.1f} GiB, "
                      f"{_available_bytes() / 2**30:.1f} GiB available", flush=True)
                continue
        values = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="hyperlaunch-bench-memory-") as work:
                per_rank = peak_per_rank(args.model, ranks, sharding, args.steps, args.seq_len, Path(work))
            values.append(max(per_rank) / 2**30)
            print(f"  {name:<20} ranks: {', '.join(f'{b / 2**30:.2f}' for b in per_rank)} GiB", flush=True)
        peaks[name] = values
    base = min(peaks[BASELINE])
    print()
    for name, values in peaks.items():
        ratio = min(values) / base
        verdict = f"  target <= {TARGET_FULL}: {'met' if ratio <= TARGET_FULL else 'MISSED'}" if name == "full" else ""
        print(f"  {name:<20} {spread(values, '.2f')} GiB  ratio {ratio:.3f}{verdict}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
