"""The next-token loss computed a chunk of tokens at a time against the output layer's weight,
so the [tokens, vocabulary] logits are never whole: for qwen3_0_6b (vocabulary 151,936) the
plain Hugging Face loss holds 4 bytes x 151,936 per token in fp32, twice over in backward.

Each chunk's logits are made, upcast to fp32 and reduced to a summed cross-entropy; backward
recomputes them a chunk at a time (a custom autograd Function, not torch.utils.checkpoint, so
that the weight's gradient is one buffer the chunks add into, and the softmax is made in place). The labels are shifted exactly as transformers' ForCausalLMLoss shifts them (the last
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
from transformers.modeling_outputs import CausalLMOutputWithPast

CHUNK_TOKENS = 1024
IGNORE_INDEX = -100


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """Position t predicts token t+1; the last position predicts nothing (ForCausalLMLoss's pad)."""
    return nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]


def _logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return nn.functional.linear(hidden, weight).float()  # as HF: the output layer's dtype, then fp32


class _ChunkedCrossEntropySum(torch.autograd.Function):
    """The summed cross-entropy; forward keeps each chunk's log-sum-exp (one float a token),
    backward recomputes the chunk's logits, turns them into the softmax in place and adds the
    weight's gradient into one buffer: one chunk of logits and one weight-sized gradient alive,
    not autograd's gradient per chunk plus their running sum."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_tokens: int) -> torch.Tensor:
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        lse = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_tokens):
            part = slice(start, start + chunk_tokens)
            logits = _logits(hidden[part], weight)
            valid = targets[part] != IGNORE_INDEX
            picked = logits.gather(1, targets[part].clamp(min=0).unsqueeze(1)).squeeze(1)
            # torch.logsumexp would make two more chunk-sized temporaries; in place, none.
            top = logits.amax(dim=-1)
            lse[part] = logits.sub_(top.unsqueeze(1)).exp_().sum(dim=-1).log_() + top
            total += ((lse[part] - picked) * valid).sum()
            del logits  # before the next chunk's are made, not when the name is rebound after
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunk_tokens = chunk_tokens
        return total

    @staticmethod
    def backward(ctx: Any, grad_total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        hidden, weight, targets, lse = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden)
        # fp32 across chunks even for a bf16 weight: chunks summed in bf16 would lose bits.
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, hidden.shape[0], ctx.chunk_tokens):
            part = slice(start, start + ctx.chunk_tokens)
            grad = _logits(hidden[part], weight).sub_(lse[part].unsqueeze(1)).exp_()  # the softmax
            rows = torch.arange(grad.shape[0], device=grad.device)
            grad[rows, targets[part].clamp(min=0)] -= 1.0
            grad.mul_(((targets[part] != IGNORE_INDEX) * grad_total).unsqueeze(1))
            grad_low = grad.to(weight.dtype)  # as autograd through HF's .float(): back to the layer's dtype
            grad_hidden[part] = grad_low @ weight
            if grad_low.dtype == torch.float32:
                grad_weight.addmm_(grad_low.T, hidden[part])
            else:
                grad_weight += grad_low.T @ hidden[part]
            del grad, grad_low  # as in forward: one chunk of logits alive, not two
        return grad_hidden, grad_weight.to(weight.dtype), None, None


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int = CHUNK_TOKENS
) -> torch.Tensor:
    """Mean next-token cross-entropy of `hidden` [..., tokens, hidden] projected by `weight`
    [vocab, hidden] against the unshifted `labels` [..., tokens]."""
    targets = shift_labels(labels).reshape(-1)
    flat = hidden.reshape(-1, hidden.shape[-1])
    total = _ChunkedCrossEntropySum.apply(flat, weight, targets, chunk_tokens)
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
