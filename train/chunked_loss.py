"""The next-token loss computed a chunk of tokens at a time against the output layer's weight,
so the [tokens, vocabulary] logits are never whole: for qwen3_0_6b (vocabulary 151,936) the
plain Hugging Face loss holds 4 bytes x 151,936 per token in fp32, twice over in backward.

Each chunk's logits are made, upcast to fp32 and reduced to a summed cross-entropy under
torch.utils.checkpoint, so backward too holds one chunk's logits at a time (it recomputes
them). The labels are shifted exactly as transformers' ForCausalLMLoss shifts them (the last
position and -100 ignored; the mean over the tokens that count), so the loss is the same.

Liger's and cut-cross-entropy's fused kernels do this in Triton and need a GPU; this one is
plain PyTorch, so it runs in the CPU tests and on any device, at the cost of the recompute.

It runs inside the root module's forward (the model's class gets a forward that ends in this
loss instead of in the logits), so FSDP2's pre-forward hook has gathered the output layer's
weight first, exactly as for the plain path; parameter names do not change."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers.modeling_outputs import CausalLMOutputWithPast

CHUNK_TOKENS = 2048
IGNORE_INDEX = -100


def _chunk_loss_sum(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = nn.functional.linear(hidden, weight).float()  # as HF: the output layer's dtype, then fp32
    return nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """Position t predicts token t+1; the last position predicts nothing (ForCausalLMLoss's pad)."""
    return nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int = CHUNK_TOKENS
) -> torch.Tensor:
    """Mean next-token cross-entropy of `hidden` [..., tokens, hidden] projected by `weight`
    [vocab, hidden] against the unshifted `labels` [..., tokens]."""
    targets = shift_labels(labels).reshape(-1)
    flat = hidden.reshape(-1, hidden.shape[-1])
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for start in range(0, flat.shape[0], chunk_tokens):
        part = slice(start, start + chunk_tokens)
        if torch.is_grad_enabled():
            total = total + checkpoint(_chunk_loss_sum, flat[part], weight, targets[part], use_reentrant=False)
        else:
            total = total + _chunk_loss_sum(flat[part], weight, targets[part])
    # 0 / 0 is nan where no token counts, as the plain mean is.
    return total / (targets != IGNORE_INDEX).sum()


class _ChunkedLossForward(nn.Module):
    """The forward a causal LM gets from use_chunked_loss: the decoder, then the chunked loss."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, **kwargs: Any) -> CausalLMOutputWithPast:
        hf: Any = self  # a transformers causal LM: nn.Module's type does not know its parts
        hidden = hf.model(input_ids=input_ids, **kwargs).last_hidden_state
        loss = chunked_cross_entropy(hidden, hf.lm_head.weight, labels, hf.chunk_tokens)
        return CausalLMOutputWithPast(loss=loss)


def use_chunked_loss(model: nn.Module, chunk_tokens: int = CHUNK_TOKENS) -> None:
    """Give this model (before fully_shard, which subclasses it again) the chunked forward:
    it then takes labels always and returns only the loss."""
    base = type(model)
    model.__class__ = type(f"ChunkedLoss{base.__name__}", (_ChunkedLossForward, base), {})
    model.chunk_tokens = chunk_tokens  # type: ignore[assignment]
