"""FSDP2 and torch.distributed.checkpoint under hyperlaunch: resume, save on a schedule and on the
save signal, requeue, metrics, memory snapshots. Copy it; your own model and data go in build_model and batch.

    hyperlaunch submit --nodes 2 --script examples/fsdp2_dcp.py -- --steps 200
    hyperlaunch submit --nodes 2 --memory-checkpoint-every 5 --script examples/fsdp2_dcp.py -- --steps 200
    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/fsdp2_dcp.py
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from hyperlaunch import runtime

VOCAB, WIDTH, SEQ, BATCH = 256, 64, 32, 8


def build_model(seed: int, device: torch.device) -> nn.Module:
    """Embedding, Linear+GELU blocks, output head: the same weights on every rank, then FSDP2 shards each block."""
    torch.manual_seed(seed)
    blocks = [nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH), nn.GELU()) for _ in range(3)]
    model = nn.Sequential(nn.Embedding(VOCAB, WIDTH), *blocks, nn.Flatten(0, 1), nn.Linear(WIDTH, VOCAB)).to(device)
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def batch(seed: int, step: int, rank: int, device: torch.device) -> torch.Tensor:
    """Counting sequences from random starts (next token = this one + 1, learnable). A pure
    function of (seed, step, rank): a resumed run sees exactly the batches it would have."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step * 1000 + rank)
    starts = torch.randint(0, VOCAB, (BATCH, 1), generator=generator)
    return ((starts + torch.arange(SEQ + 1)) % VOCAB).to(device)


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer, done: torch.Tensor) -> dict[str, object]:
    """What a checkpoint and a memory snapshot hold: this rank's shards, and the steps done."""
    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state, "step": done}


def finish() -> None:
    # gloo aborts a process that frees a collective's tensors at shutdown: a barrier, and FSDP's cycles collected at exit.
    atexit.register(gc.collect)
    dist.barrier()
    dist.destroy_process_group()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="slow each step down, to watch a restart")
    args = parser.parse_args()
    if args.steps < 1 or args.save_every < 1:  # final (no attempt would fix it); one line in `status`
        runtime.fail(f"--steps and --save-every must be at least 1, got {args.steps} and {args.save_every}")
    return args


def main() -> None:
    args = parse_args()
    start = runtime.resume_path()  # early: from here on the save signal is caught
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    world = dist.get_world_size()

    model = build_model(args.seed, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    done = torch.zeros((), dtype=torch.int64)  # steps completed, saved with the state
    state = training_state(model, optimizer, done)  # loaded in place, each rank its own shards:
    from_memory = runtime.restore_snapshot(state) is not None  # where a round restarted in the allocation is told to
    if not from_memory and start is not None:
        dcp.load(state, checkpoint_id=start)
    if from_memory or start is not None:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if runtime.is_main():
            print(f"resumed from {'the memory snapshot' if from_memory else start} (step {int(done)})", flush=True)

    for step in range(int(done) + 1, args.steps + 1):
        began = time.perf_counter()
        tokens = batch(args.seed, step, runtime.rank(), device)
        loss = nn.functional.cross_entropy(model(tokens[:, :-1]), tokens[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        time.sleep(args.step_seconds)
        # The mean loss over ranks and the save signal, which ranks may see a moment apart.
        mean_loss = loss.detach() / world
        stop = torch.tensor(int(runtime.should_save()), device=device)
        dist.all_reduce(mean_loss)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        runtime.log(step, loss=mean_loss.item(), tokens_per_s=BATCH * SEQ * world / (time.perf_counter() - began))
        done.fill_(step)
        runtime.snapshot(step, training_state(model, optimizer, done))  # every N steps, where the job keeps them

        if step % args.save_every == 0 or step == args.steps or stop.item():
            path = runtime.checkpoint_path(step)
            with runtime.saving():  # a save may take longer than a step
                dcp.save(training_state(model, optimizer, done), checkpoint_id=path)
            runtime.commit_checkpoint(step, path, keep_last=3)  # <name>-latest names it; older ones go
            if stop.item():
                finish()
                runtime.requeue()  # exits 75: the job goes back to the queue and resumes from it
    finish()


if __name__ == "__main__":
    main()
