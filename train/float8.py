"""--float8: the decoder blocks' linear layers trained in float8 by torchao (dynamic tensorwise
scaling: each matrix product's inputs cast to float8 with a scale from their current maximum,
the product accumulated in higher precision, the weights kept in fp32 as before), the output
layer left in bf16, as torchtitan and torchao advise: its logits feed the softmax, where
float8's three mantissa bits would show.

It pays where the matrix products dominate the step (the 8B class and larger); at
qwen3_0_6b's shapes the casts cost more than the faster products save. Needs a GPU with
float8 tensor cores (compute capability 8.9: L4, L40S, H100, H200 and newer)."""

from __future__ import annotations

from torch import nn

from hyperlaunch.core.errors import InvalidInput, NodeProblem

MIN_CAPABILITY = (8, 9)
KEPT_IN_BF16 = ("lm_head",)


def converts(module: nn.Module, fqn: str) -> bool:
    """Whether a module is one --float8 converts: a linear layer inside the decoder, with both
    sides a multiple of 16 (float8 matrix products need it), never the output layer."""
    if not isinstance(module, nn.Linear) or fqn in KEPT_IN_BF16:
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def check_device(capability: tuple[int, int] | None, name: str) -> None:
    """One line when this device cannot run float8 matrix products (None: no GPU)."""
    if capability is None:
        raise InvalidInput("--float8 needs a CUDA GPU with float8 tensor cores (H100, H200, L40S, L4); this run has none")
    if capability < MIN_CAPABILITY:
        raise NodeProblem(
            f"--float8 needs compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer (H100, H200, L40S, L4); "
            f"this GPU, {name}, is {capability[0]}.{capability[1]}"
        )


def convert_to_float8(model: nn.Module) -> int:
    """Swap the linear layers `converts` picks for torchao's Float8Linear, in place and before
    sharding (parameter names and checkpoints do not change); how many were swapped."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        raise InvalidInput("--float8 needs torchao: pip install torchao") from None
    picked = [fqn for fqn, module in model.named_modules() if converts(module, fqn)]
    convert_to_float8_training(model, config=Float8LinearConfig(), module_filter_fn=converts)
    return len(picked)
