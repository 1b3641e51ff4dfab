"""Process group, device and device mesh. Works under torchrun and as one plain process."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from hyperlaunch.core.errors import InvalidInput, NodeProblem


@dataclass(frozen=True)
class Dist:
    """Who this process is and where it computes."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    checkpoint_group: dist.ProcessGroup | None
    """A separate gloo group for background (async) checkpoint collectives."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_rank() -> int:
    """The rank from torchrun's environment, usable before the process group exists."""
    return int(os.environ.get("RANK", "0"))


def resolve_device(choice: str) -> torch.device:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda":
        if not torch.cuda.is_available():
            raise NodeProblem(f"--device cuda asked for, but no CUDA device is visible on {os.uname().nodename}")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(device: torch.device, *, async_checkpoint: bool) -> Dist:
    """The process group for ranks computing on `device` (resolve_device's)."""
    if "RANK" not in os.environ:
        # A plain `python -m hyperlaunch.train`: a one-process group keeps one code path.
        os.environ.update(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", str(_free_port())),
        )
    # cpu:gloo alongside nccl lets DCP's async save run its collectives on CPU tensors.
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(minutes=30))
    checkpoint_group = dist.new_group(backend="gloo") if async_checkpoint else None
    return Dist(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        device=device,
        checkpoint_group=checkpoint_group,
    )


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_mesh(d: Dist, sharding: str, hsdp_shard_size: int | None) -> DeviceMesh:
    """1-D mesh for full/grad-op; 2-D (replicate, shard) for hybrid and none.

    `none` is a 2-D mesh whose shard dimension has size 1: parameters are replicated and
    gradients all-reduced, through the same FSDP2 code path as everything else.
    """
    device_type = d.device.type
    if sharding in ("full", "grad-op"):
        return init_device_mesh(device_type, (d.world_size,), mesh_dim_names=("dp_shard",))
    if sharding == "none":
        shard = 1
    else:
        shard = hsdp_shard_size or d.local_world_size
    if shard < 1 or d.world_size % shard:
        raise InvalidInput(
            f"--hsdp-shard-size {shard} must divide the world size {d.world_size}"
        )
    return init_device_mesh(
        device_type, (d.world_size // shard, shard), mesh_dim_names=("dp_replicate", "dp_shard")
    )


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
