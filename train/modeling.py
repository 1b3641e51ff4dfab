"""Which model to train, built on the meta device, and its weights: fresh or pretrained.

The FSDP2 traps this module exists for: after `to_empty` every parameter and buffer
holds garbage, so everything is initialised explicitly; Hugging Face's rotary `inv_freq`
buffers are non-persistent, so they are recomputed rather than loaded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.errors import InvalidInput, ModelUnavailable
from hyperlaunch.core.models import ModelSpec, get_preset, spec_from_model_directory


@dataclass(frozen=True)
class ModelSource:
    """The spec (for names and FLOPs), the HF config to build, and where weights come from."""

    spec: ModelSpec
    hf_config: object
    pretrained_dir: Path | None


def resolve_model(model: str, model_name: str | None) -> ModelSource:
    from transformers import AutoConfig, LlamaConfig, Qwen3Config

    if not rules.is_model_directory(model):
        spec = get_preset(model)
        if model_name is not None:  # a sweep's element: the preset's model under a name of its own
            spec = replace(spec, name=rules.checkpoint_name(model, model_name))
        config_class = Qwen3Config if spec.kind == "qwen3" else LlamaConfig
        hf_config = config_class(**spec.hf_config_kwargs())
        return ModelSource(spec=spec, hf_config=hf_config, pretrained_dir=None)
    directory = Path(model)
    name = rules.checkpoint_name(model, model_name)
    spec = spec_from_model_directory(directory, name)
    try:
        hf_config = AutoConfig.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ModelUnavailable(f"--model {model}: transformers cannot load its config ({err})") from None
    return ModelSource(spec=spec, hf_config=hf_config, pretrained_dir=directory)


def build_meta_model(hf_config: object) -> Any:
    """The full model with no storage: sharding decides later what each rank materialises."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(
            hf_config, attn_implementation="sdpa", dtype=torch.float32
        )


def _param_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _is_norm(module: nn.Module) -> bool:
    return "RMSNorm" in type(module).__name__ or isinstance(module, nn.LayerNorm)


@torch.no_grad()
def init_weights(model: nn.Module, seed: int, std: float = 0.02) -> None:
    """Initialise every parameter of a materialised (possibly sharded) model.

    Each full tensor is drawn from a generator seeded by (seed, parameter name) and each rank
    keeps its own shard, so a run starts from the same weights on any number of ranks.
    Follows the HF classes: normal(0, std) for linear and embedding weights, ones for norms,
    zeros for biases.
    """
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            if id(param) in seen:  # tied embeddings: initialise once
                continue
            seen.add(id(param))
            full_name = _canonical_name(f"{module_name}.{param_name}")
            shape = param.shape
            if param_name == "bias":
                full = torch.zeros(shape)
            elif _is_norm(module):
                full = torch.ones(shape)
            elif isinstance(module, (nn.Linear, nn.Embedding)):
                generator = torch.Generator().manual_seed(_param_seed(seed, full_name))
                full = torch.randn(shape, generator=generator) * std
            else:
                raise InvalidInput(f"no initialisation rule for parameter {full_name} ({type(module).__name__})")
            _copy_full_into(param, full)
    fix_rotary_buffers(model)


def _canonical_name(name: str) -> str:
    # Wrappers (activation checkpointing) must not change which seed a weight gets.
    return name.replace("._checkpoint_wrapped_module", "")


def _copy_full_into(param: torch.Tensor, full: torch.Tensor) -> None:
    full = full.to(dtype=param.dtype)
    if isinstance(param, DTensor):
        local = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
        param.to_local().copy_(local.to_local())
    else:
        param.copy_(full)


@torch.no_grad()
def fix_rotary_buffers(model: nn.Module) -> None:
    """Recompute rotary `inv_freq` (non-persistent: lost by meta init, absent from checkpoints)
    by building a fresh rotary module of the same class on the CPU."""
    for module in model.modules():
        if "Rotary" not in type(module).__name__ or not hasattr(module, "inv_freq"):
            continue
        fresh = type(module)(module.config)
        for buffer_name in ("inv_freq", "original_inv_freq"):
            if hasattr(module, buffer_name):
                target = getattr(module, buffer_name)
                device = "cpu" if target.is_meta else target.device
                setattr(module, buffer_name, getattr(fresh, buffer_name).to(device))
        if hasattr(fresh, "attention_scaling"):
            module.attention_scaling = fresh.attention_scaling


def read_pretrained_state_dict(directory: Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict from a directory's safetensors, keyed like `model.state_dict()`
    (the output layer filled from the embedding when the weights are tied)."""
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        state.update(load_file(str(file), device="cpu"))
    expected = {_canonical_name(k) for k in model.state_dict()}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    if tied and "lm_head.weight" in expected and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing = sorted(expected - set(state))
    if missing:
        raise ModelUnavailable(f"pretrained weights in {directory} lack {', '.join(missing[:3])}")
    return {key: state[key].to(torch.float32) for key in expected}


def load_pretrained(model: nn.Module, directory: Path, is_main: bool) -> None:
    """Rank 0 reads the safetensors; the weights reach every rank's shards by broadcast."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    full: dict[str, Any] = read_pretrained_state_dict(directory, model) if is_main else {}
    set_model_state_dict(
        model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    )
    fix_rotary_buffers(model)
