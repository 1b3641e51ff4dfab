"""DistributedDataParallel with torch.save checkpoints, and no hyperlaunch import: a script
written for plain torchrun, as hyperlaunch runs it.

    hyperlaunch submit --nodes 2 --script examples/plain_ddp.py -- --steps 200
    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/plain_ddp.py

It saves where the job says (HYPERLAUNCH_CHECKPOINT_DIR, HYPERLAUNCH_NAME) and resumes from its
newest checkpoint. Deaf to the save signal (a job starts torchrun's workers with SIGUSR2 ignored), it
trains on to the time limit; the next job redoes the steps since its last save (fsdp2_dcp.py does not).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

VOCAB, WIDTH, SEQ, BATCH = 256, 64, 32, 8
CHECKPOINT_DIR = Path(os.environ.get("HYPERLAUNCH_CHECKPOINT_DIR", "checkpoints"))
NAME = os.environ.get("HYPERLAUNCH_NAME", "plain_ddp")


def build_model(seed: int) -> nn.Module:
    """Embedding, Linear+GELU blocks, output head (every position's logits); the same on every rank."""
    torch.manual_seed(seed)
    blocks = [nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH), nn.GELU()) for _ in range(3)]
    return nn.Sequential(nn.Embedding(VOCAB, WIDTH), *blocks, nn.Flatten(0, 1), nn.Linear(WIDTH, VOCAB))


def batch(seed: int, step: int, rank: int, device: torch.device) -> torch.Tensor:
    """Counting sequences from random starts (next token = this one + 1, learnable). A pure
    function of (seed, step, rank): a resumed run sees exactly the batches it would have."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step * 1000 + rank)
    starts = torch.randint(0, VOCAB, (BATCH, 1), generator=generator)
    return ((starts + torch.arange(SEQ + 1)) % VOCAB).to(device)


def newest_checkpoint() -> Path | None:
    """The state.pt to resume from: in the checkpoint the job names, else this run's newest."""
    if os.environ.get("HYPERLAUNCH_RESUME_FROM"):
        return Path(os.environ["HYPERLAUNCH_RESUME_FROM"]) / "state.pt"
    pattern = re.compile(re.escape(NAME) + r"-(\d+)steps")  # state.pt appears whole (see save)
    steps = [int(m.group(1)) for path in CHECKPOINT_DIR.glob(f"{NAME}-*steps/state.pt") if (m := pattern.fullmatch(path.parent.name))]
    return CHECKPOINT_DIR / f"{NAME}-{max(steps)}steps" / "state.pt" if steps else None


def save(step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """`<dir>/<name>-<step>steps/state.pt`, whole or not at all: a temp file beside it, then a rename."""
    folder = CHECKPOINT_DIR / f"{NAME}-{step}steps"
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f".state.pt.{os.getpid()}.tmp"
    with open(temp, "wb") as handle:
        torch.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, folder / "state.pt")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="slow each step down, to watch a restart")
    args = parser.parse_args()
    if args.steps < 1 or args.save_every < 1:
        parser.error(f"--steps and --save-every must be at least 1, got {args.steps} and {args.save_every}")
    return args


def main() -> None:
    args = parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(args.seed).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    done = 0
    resume = newest_checkpoint()
    if resume is not None:
        state = torch.load(resume, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
        done = state["step"]
        if rank == 0:
            print(f"resumed from step {done}", flush=True)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    for step in range(done + 1, args.steps + 1):
        tokens = batch(args.seed, step, rank, device)
        loss = nn.functional.cross_entropy(ddp(tokens[:, :-1]), tokens[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        time.sleep(args.step_seconds)
        mean_loss = loss.detach() / world
        dist.all_reduce(mean_loss)
        if rank == 0:
            print(f"step {step} loss {mean_loss.item():.6f}", flush=True)
            if step % args.save_every == 0 or step == args.steps:
                save(step, model, optimizer)
    # Free DDP while its group lives, then a barrier: else gloo may abort a process at exit.
    del ddp
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
