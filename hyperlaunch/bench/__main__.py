"""`python -m hyperlaunch.bench NAME [options]`: run one benchmark; `--help` after NAME for its options."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "cli": ("cli_latency", "wall time of --help, render and status with 1,000 recorded jobs"),
    "trainer": ("trainer_overhead", "tokens/s of train/ against a minimal FSDP2 loop (2 CPU ranks)"),
    "memory": ("memory", "peak RSS per rank of qwen3_0_6b: full / grad-op / none on 2 ranks vs 1 unsharded"),
    "checkpoint": ("checkpoint_cost", "training time blocked per checkpoint, sync vs async; write throughput vs raw"),
    "snapshot": ("snapshot_cost", "training time held per memory snapshot, and the step-time cost of one every N steps"),
    "recovery": ("recovery", "node kill -> first resumed step on the dev cluster, by phase"),
    "chaos": ("chaos", "eight kinds of fault in one training on the dev cluster: recovery, steps redone, goodput"),
    "data": ("data", "prepare-data tokens/s vs the tokenizer's batch encode; trainer start on prepared 10 vs 300 MB"),
    "loss": ("loss", "peak memory of the loss's forward + backward at vocab 151,936: HF's plain vs train/'s chunked"),
    "fsdp-groups": ("fsdp_groups", "FSDP2's host time on one rank: a group per decoder block vs one for the model"),
    "gpu": ("gpu", "qwen3_0_6b on one GPU in bf16: tokens/s, MFU, peak memory, with/without AC and compile"),
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHMARKS:
        print(__doc__.strip() + "\n\nbenchmarks:")
        for name, (_, what) in BENCHMARKS.items():
            print(f"  {name:<11} {what}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"hyperlaunch.bench.{BENCHMARKS[argv[0]][0]}")
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
