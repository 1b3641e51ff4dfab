"""The one decision both callbacks make each step: has a stop reached any rank (Slurm's warning
before the time limit, a preemption, scancel)? Ranks see a signal a moment apart, so they agree
on it (the flag's maximum over the ranks) before one of them saves and the others do not."""

from __future__ import annotations

from typing import Any

from hyperlaunch import runtime


def agreed(device: Any = None) -> bool:
    """Whether any rank was asked to stop: an all-reduce of the flag where a process group runs."""
    import torch
    import torch.distributed as dist

    flag = runtime.should_save()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    tensor = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def numbers(values: dict[str, Any]) -> dict[str, float]:
    """The plain numbers among a framework's logged values (tensors of one value too)."""
    kept: dict[str, float] = {}
    for key, value in values.items():
        if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            kept[key] = float(value)
    return kept
