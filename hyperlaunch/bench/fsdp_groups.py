"""FSDP2's host time on one rank: a group per decoder block against one group for the whole
model, both through train/sharding.py with bf16 mixed precision and no reshard after forward.
The model has qwen3_0_6b's 28 decoder blocks at a width (hidden 64, vocabulary 512) where the
step is almost all host time, so the difference is what FSDP's hooks around each block cost the
host: on a GPU that is what a step the host cannot keep ahead of (qwen3_0_6b at micro-batch 2)
pays. Both give the same losses; the table says whether they did, to the last bit.

    python -m hyperlaunch.bench fsdp-groups [--runs 3] [--steps 100] [--compile]

The two alternate, run after run, each a fresh one-rank torchrun (gloo, OMP_NUM_THREADS=1);
each times `--steps` steps after 10 and reports the median step."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser, torchrun

LAYERS = 28
WARMUP = 10


def worker(groups: str, steps: int, compile_blocks: bool) -> None:
    """One run under torchrun: median step time in ms and the losses, one JSON line."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, Qwen3Config

    from hyperlaunch.train.sharding import ShardingOptions, shard_model

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    config = Qwen3Config(
        hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        intermediate_size=128, vocab_size=512, tie_word_embeddings=True,
    )
    model = AutoModelForCausalLM.from_config(config)
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (1,))
    shard_model(model, mesh, ShardingOptions(
        sharding="full", mixed_precision="bf16", cpu_offload=False, activation_checkpointing=False, prefetch=0,
        compile=compile_blocks, reshard_after_forward=False, one_group=groups == "one",
    ))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(0))
    times, losses = [], []
    for _ in range(WARMUP + steps):
        started = time.perf_counter()
        loss = model(input_ids=batch, labels=batch, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - started)
        losses.append(loss.item())
    print(json.dumps({"step_ms": 1000 * statistics.median(times[WARMUP:]), "losses": losses}))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    options = parser("fsdp-groups", __doc__)
    options.add_argument("--runs", type=int, default=3)
    options.add_argument("--steps", type=int, default=100)
    options.add_argument("--compile", action="store_true", help="torch.compile each block, as --compile does")
    options.add_argument("--worker", choices=("per-block", "one"), help=argparse.SUPPRESS)
    args = options.parse_args(argv)
    if args.worker:
        worker(args.worker, args.steps, args.compile)
        return 0
    import torch  # noqa: F401 - for the machine line

    header("FSDP2 groups on one rank", f"{LAYERS} decoder blocks, hidden 64, bf16, {'compiled' if args.compile else 'eager'}, "
           f"one CPU rank (gloo, OMP_NUM_THREADS=1); median of {args.steps} steps after {WARMUP}; {args.runs} runs each, alternating")
    step_ms: dict[str, list[float]] = {"per-block": [], "one": []}
    losses: dict[str, list[float]] = {}
    extra = ["--compile"] if args.compile else []
    for index in range(args.runs):
        for groups in step_ms:
            out = torchrun(1, ["hyperlaunch.bench.fsdp_groups", "--worker", groups, "--steps", str(args.steps), *extra])
            result = json.loads(out.strip().splitlines()[-1])
            step_ms[groups].append(result["step_ms"])
            losses[groups] = result["losses"]
        print(f"  run {index + 1}: a group per block {step_ms['per-block'][-1]:.1f} ms a step, "
              f"one group {step_ms['one'][-1]:.1f} ms", flush=True)
    per_block, one = statistics.median(step_ms["per-block"]), statistics.median(step_ms["one"])
    print(f"  a group per block  ms a step  {spread(step_ms['per-block'], '.1f')}")
    print(f"  one group          ms a step  {spread(step_ms['one'], '.1f')}")
    print(f"  FSDP's hooks around the blocks: {per_block - one:.1f} ms a step, {(per_block - one) / LAYERS:.2f} ms a block "
          f"({1 - one / per_block:.0%} of the per-block step)")
    print(f"  losses identical to the last bit: {'yes' if losses['per-block'] == losses['one'] else 'NO'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
