"""The yardstick for the trainer-overhead benchmark: the shortest FSDP2 training loop one would
write by hand. Run under torchrun; prints one JSON line (rank 0) with the timed window.

    torchrun --nproc-per-node 2 -m hyperlaunch.bench.minimal_fsdp --model llama_tiny \
        --seq-len 128 --micro-batch-size 4 --warmup 10 --steps 50

Same model (the preset's Hugging Face config) and AdamW hyperparameters as train/, with
PyTorch's default AdamW implementation (single-tensor on CPU) and clip_grad_norm_;
random token batches instead of a data loader; no logging, no checkpoints.

With --no-shard --fused --return-freed-memory it is the unsharded reference of the memory
benchmark: a plain model on one process, with train/'s AdamW kernel and allocator setting.
The JSON line includes the process's peak resident memory."""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

from hyperlaunch.core.models import get_preset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="llama_tiny")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--no-shard", dest="shard", action="store_false", help="a plain model, no fully_shard")
    parser.add_argument("--fused", action="store_true", help="fused AdamW, as train/ uses")
    parser.add_argument("--return-freed-memory", action="store_true", help="train/'s glibc setting (CPU runs)")
    args = parser.parse_args()
    if args.return_freed_memory:
        from hyperlaunch.train.host_memory import return_freed_memory

        return_freed_memory()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    spec = get_preset(args.model)
    config_class = Qwen3Config if spec.kind == "qwen3" else LlamaConfig
    config_kwargs: dict[str, Any] = spec.hf_config_kwargs()
    model = AutoModelForCausalLM.from_config(config_class(**config_kwargs), attn_implementation="sdpa")
    if args.shard:
        for block in model.model.layers:
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, **({"fused": True} if args.fused else {})
    )

    def step() -> None:
        batch = torch.randint(0, spec.vocab_size, (args.micro_batch_size, args.seq_len))
        model(input_ids=batch, labels=batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - started
    tokens = args.steps * args.micro_batch_size * args.seq_len * world
    if rank == 0:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({"seconds": seconds, "steps": args.steps, "tokens_per_s": tokens / seconds,
                          "peak_memory_bytes": peak}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
