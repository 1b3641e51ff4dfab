"""FSDP2: one group per decoder block, then the root (which holds the embeddings, tied or not,
the final norm and the output layer in one group), with the options the flags ask for; or,
where the trainer decides so (one rank keeping its gathered parameters:
hyperlaunch.core.gpu_memory.layout), the root alone as one group for the whole model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper, checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard


@dataclass(frozen=True)
class ShardingOptions:
    sharding: str
    mixed_precision: str
    cpu_offload: bool
    activation_checkpointing: bool
    prefetch: int
    compile: bool = False
    """torch.compile each decoder block whole (fullgraph: a graph break is an error, not a
    silent slow path) and the final norm, in place, so parameter names and checkpoints are
    unchanged; compiled at the first step."""
    reshard_after_forward: bool = True
    """Free each block's gathered parameters after its forward (gathered again for backward).
    The trainer turns it off on one rank where the gathered copies fit the GPU (there a reshard
    only costs a copy and a cast per block: train/setup.py)."""
    one_group: bool = False
    """The whole model as one FSDP group: gathered once before forward, reduced once after
    backward, no hooks around the blocks (--fsdp-groups; implies no reshard after forward)."""


def decoder_blocks(model: nn.Module) -> nn.ModuleList:
    hf: Any = model  # a transformers model: nn.Module's type does not know its parts
    return hf.model.layers


def final_norm(model: nn.Module) -> nn.Module:
    hf: Any = model
    norm: nn.Module = hf.model.norm
    return norm


def shard_model(model: nn.Module, mesh: DeviceMesh, options: ShardingOptions) -> list[FSDPModule]:
    """Shard in place; returns the block-level FSDP modules (for prefetch; none with one group)."""
    mp_policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if options.mixed_precision == "bf16" else None,
        reduce_dtype=torch.float32,
    )
    # pin_memory needs a GPU; without one the default policy fails.
    offload: OffloadPolicy = (
        CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if options.cpu_offload else OffloadPolicy()
    )
    # ZeRO-2 keeps parameters gathered between forward and backward; so does replicate-only.
    reshard = options.reshard_after_forward and options.sharding not in ("grad-op", "none")
    blocks = decoder_blocks(model)
    sharded: list[FSDPModule] = []
    for index in range(len(blocks)):
        block = blocks[index]
        if options.activation_checkpointing:
            # Wrap before sharding so FSDP's hooks sit outside the recomputed region.
            block = checkpoint_wrapper(block)
            blocks[index] = block
        if options.compile:
            block.compile(fullgraph=True)
        if not options.one_group:
            fully_shard(block, mesh=mesh, mp_policy=mp_policy, offload_policy=offload, reshard_after_forward=reshard)
            sharded.append(block)  # type: ignore[arg-type]
    if options.compile:
        final_norm(model).compile(fullgraph=True)
    # The root keeps its parameters gathered after forward: backward needs them first anyway.
    fully_shard(model, mesh=mesh, mp_policy=mp_policy, offload_policy=offload, reshard_after_forward=False)
    if options.prefetch > 0:
        set_explicit_prefetch(sharded, options.prefetch)
    return sharded


def set_explicit_prefetch(blocks: list[FSDPModule], depth: int) -> None:
    """Forward: block i gathers blocks i+1..i+depth; backward: blocks i-1..i-depth."""
    for index, block in enumerate(blocks):
        ahead = blocks[index + 1 : index + 1 + depth]
        behind = list(reversed(blocks[max(0, index - depth) : index]))
        if ahead:
            block.set_modules_to_forward_prefetch(ahead)
        if behind:
            block.set_modules_to_backward_prefetch(behind)


def describe(model: nn.Module, mesh: DeviceMesh) -> dict[str, object]:
    """What the sharded model really does, read back from FSDP2's own state (logged at start,
    so a run's metrics show it, and tests can tell an option that was silently ignored)."""
    blocks = list(decoder_blocks(model))
    first = blocks[0]
    # The blocks' group where each block has one, else the whole model's.
    owner: Any = first if isinstance(first, FSDPModule) else model
    group = owner._get_fsdp_state()._fsdp_param_group
    param_dtype = group.mp_policy.param_dtype if group is not None else None
    return {
        "mesh_shape": list(mesh.shape),
        "mesh_dims": list(mesh.mesh_dim_names or ()),
        "fsdp_blocks": sum(isinstance(b, FSDPModule) for b in blocks),
        "fsdp_groups": sum(isinstance(m, FSDPModule) for m in model.modules()),
        "param_dtype": str(param_dtype or torch.float32).replace("torch.", ""),
        "offload": type(group.offload_policy).__name__ if group is not None else None,
        "reshard_after_forward": bool(group is not None and group.post_forward_mesh_info is not None),
        "activation_checkpointed_blocks": sum(isinstance(b, CheckpointWrapper) for b in blocks),
        "compiled_blocks": sum(getattr(b, "_compiled_call_impl", None) is not None for b in blocks),
        "forward_prefetch": len(owner._get_fsdp_state()._states_to_forward_prefetch),
    }
