"""How the output layer and the next-token cross-entropy run: Hugging Face's plain loss over
the whole logits (the reference), or one that never holds them whole.

- plain: the model's own forward, logits [tokens, vocabulary] then transformers' loss; for
  qwen3_0_6b (vocabulary 151,936) that is 4 bytes x 151,936 per token in fp32, twice over in
  backward.
- chunked: train/chunked_loss.py, plain PyTorch a chunk of tokens at a time (any device; its
  elementwise work compiled with --compile).
- liger: Liger-Kernel's fused linear cross-entropy (Triton): the gradients are made in forward,
  a chunk at a time, so backward has nothing to recompute.
- cce: Apple's cut cross-entropy (Triton): the logits never leave the GPU's on-chip memory.

All but plain run inside the root module's forward (the model's class gets a forward that ends
in the loss instead of the logits), so FSDP2's pre-forward hook has gathered the output layer's
weight first, exactly as for the plain path; parameter names do not change. Labels are shifted
as transformers' ForCausalLMLoss shifts them (the last position and -100 ignored, the mean over
the tokens that count), so every kind gives the same loss."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from hyperlaunch.core.errors import InvalidInput

from .chunked_loss import CHUNK_TOKENS, IGNORE_INDEX, chunked_cross_entropy, shift_labels

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(hidden [..., tokens, hidden], output weight [vocabulary, hidden], unshifted labels) -> mean loss."""

LIBRARIES = {"liger": "liger_kernel", "cce": "cut_cross_entropy"}
PIP_NAMES = {"liger": "liger-kernel", "cce": "cut-cross-entropy"}
GPU_CHOICE = "liger"
"""What auto takes on a GPU where its library is installed: chosen by `bench loss` on an H200
(docs/performance.md, GPU)."""
LIGER_CHUNK_TOKENS = 1024
"""Tokens per Liger chunk: its own rule (tokens / ceil(vocabulary / hidden)) gives 64-token
chunks at qwen3_0_6b's shapes, matrix products too thin for the tensor cores."""


def library_installed(kind: str) -> bool:
    return importlib.util.find_spec(LIBRARIES[kind]) is not None


def resolve(choice: str, device: torch.device) -> tuple[str, str | None]:
    """The loss kind to build for `--loss choice` on `device`, and a note when auto had to take
    a second choice (the settings printout shows it)."""
    if choice == "auto":
        if device.type != "cuda":
            return "plain", None
        if library_installed(GPU_CHOICE):
            return GPU_CHOICE, None
        return "chunked", f"--loss auto: {PIP_NAMES[GPU_CHOICE]} is not installed, so the chunked loss (pip install {PIP_NAMES[GPU_CHOICE]} for the fused one)"
    if choice in LIBRARIES:
        if device.type != "cuda":
            raise InvalidInput(f"--loss {choice} runs Triton kernels and needs a CUDA GPU; on CPU use --loss chunked or plain")
        if not library_installed(choice):
            raise InvalidInput(f"--loss {choice} needs {PIP_NAMES[choice]}: pip install {PIP_NAMES[choice]} (or --loss chunked)")
    return choice, None


def liger_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    targets = shift_labels(labels).reshape(-1)
    flat = hidden.reshape(-1, hidden.shape[-1])
    vocab, width = weight.shape
    chunks = max(1, flat.shape[0] // LIGER_CHUNK_TOKENS)
    loss: torch.Tensor = liger_fused_linear_cross_entropy(
        flat, weight, targets, ignore_index=IGNORE_INDEX, reduction="mean",
        accum_dtype=torch.float32,  # the weight's gradient summed over chunks in fp32, as chunked does
        chunk_mem_const=max(1, vocab // (width * chunks)),
    )
    return loss


def cce_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    from cut_cross_entropy import linear_cross_entropy

    # filter_eps=None: every gradient term counts (its default skips the smallest, an approximation).
    loss: torch.Tensor = linear_cross_entropy(
        hidden, weight, labels, ignore_index=IGNORE_INDEX, reduction="mean", shift=True, filter_eps=None
    )
    return loss


def loss_function(kind: str, *, compiled: bool, chunk_tokens: int = CHUNK_TOKENS) -> LossFn:
    if kind == "chunked":
        return lambda hidden, weight, labels: chunked_cross_entropy(hidden, weight, labels, chunk_tokens, compiled=compiled)
    return {"liger": liger_cross_entropy, "cce": cce_cross_entropy}[kind]


class _LossInForward(nn.Module):
    """The forward a causal LM gets from use_loss: the decoder, then the loss on its last hidden state."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, **kwargs: Any) -> CausalLMOutputWithPast:
        hf: Any = self  # a transformers causal LM: nn.Module's type does not know its parts
        hidden = hf.model(input_ids=input_ids, **kwargs).last_hidden_state
        return CausalLMOutputWithPast(loss=hf.loss_fn(hidden, hf.lm_head.weight, labels))


def use_loss(model: nn.Module, kind: str, *, compiled: bool = False, chunk_tokens: int = CHUNK_TOKENS) -> None:
    """Give this model (before fully_shard, which subclasses it again) the forward of loss
    `kind`; plain leaves it as it is. Any other kind then takes labels always and returns only
    the loss."""
    if kind == "plain":
        return
    base = type(model)
    model.__class__ = type(f"{kind.capitalize()}Loss{base.__name__}", (_LossInForward, base), {})
    model.loss_fn = loss_function(kind, compiled=compiled, chunk_tokens=chunk_tokens)  # type: ignore[assignment]
