"""The next-token loss computed a chunk of tokens at a time against the output layer's weight,
so the [tokens, vocabulary] logits are never whole: for qwen3_0_6b (vocabulary 151,936) the
plain Hugging Face loss holds 4 bytes x 151,936 per token in fp32, twice over in backward.

Each chunk's logits are made, upcast to fp32 and reduced to a summed cross-entropy; backward
recomputes them a chunk at a time (a custom autograd Function, not torch.utils.checkpoint, so
that the weight's gradient is one buffer the chunks add into, and the softmax is made in place). The labels are shifted
exactly as transformers' ForCausalLMLoss shifts them (the last position and -100 ignored; the
mean over the tokens that count), so the loss is the same.

Plain PyTorch, so it runs in the CPU tests and on any device, at the cost of the recompute.
With `compiled` (the trainer's --compile) each chunk's elementwise work - upcast, log-sum-exp,
softmax, its gradient, the cast back - is one generated kernel a pass instead of six (a compiled
chunked loss, as torchtitan's); the matrix products stay cuBLAS's. train/losses.py puts this
loss (or a fused one) into the model's forward."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

CHUNK_TOKENS = 1024
IGNORE_INDEX = -100


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """Position t predicts token t+1; the last position predicts nothing (ForCausalLMLoss's pad)."""
    return nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]


def _logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return nn.functional.linear(hidden, weight).float()  # as HF: the output layer's dtype, then fp32


def _lse_and_target_logit(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's log-sum-exp and its target's logit, in fp32, from one fp32 chunk of logits
    made in place (the layer's-dtype product is freed as soon as it is upcast)."""
    logits = _logits(hidden, weight)
    picked = logits.gather(1, targets.clamp(min=0).unsqueeze(1)).squeeze(1)
    # torch.logsumexp would make two more chunk-sized temporaries; in place, none.
    top = logits.amax(dim=-1)
    return logits.sub_(top.unsqueeze(1)).exp_().sum(dim=-1).log_() + top, picked


def _softmax_minus_target(
    hidden: torch.Tensor, weight: torch.Tensor, lse: torch.Tensor, targets: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """d(sum of the rows' cross-entropy x scale)/d(logits), in the layer's dtype (as autograd
    through HF's .float() gives it), made in place in one fp32 chunk."""
    grad = _logits(hidden, weight).sub_(lse.unsqueeze(1)).exp_()  # the softmax
    rows = torch.arange(grad.shape[0], device=grad.device)
    grad[rows, targets.clamp(min=0)] -= 1.0
    return grad.mul_(scale.unsqueeze(1)).to(weight.dtype)


def _lse_and_target_logit_fused(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """_lse_and_target_logit, written for torch.compile (which makes it one pass, no temporaries)."""
    wide = logits.float()
    picked = wide.gather(1, targets.clamp(min=0).unsqueeze(1)).squeeze(1)
    return torch.logsumexp(wide, dim=-1), picked


def _softmax_minus_target_fused(logits: torch.Tensor, lse: torch.Tensor, targets: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """_softmax_minus_target, written for torch.compile (in-place indexing does not fuse)."""
    probs = torch.exp(logits.float() - lse.unsqueeze(1))
    columns = torch.arange(logits.shape[1], device=logits.device)
    grad = torch.where(columns.unsqueeze(0) == targets.clamp(min=0).unsqueeze(1), probs - 1.0, probs)
    return (grad * scale.unsqueeze(1)).to(logits.dtype)


def _add_weight_grad(grad_weight: torch.Tensor, grad_logits: torch.Tensor, hidden: torch.Tensor) -> None:
    if grad_logits.dtype == torch.float32:
        grad_weight.addmm_(grad_logits.T, hidden)
    else:
        grad_weight += grad_logits.T @ hidden


_compiled: dict[str, Any] = {}


def _kernels(compiled: bool) -> tuple[Any, Any]:
    """The two elementwise passes over a chunk's logits: eager and in place, or compiled once per
    process (torch.compile reuses its code for every chunk of the same length; the products
    stay cuBLAS's)."""
    if not compiled:
        return _lse_and_target_logit, _softmax_minus_target
    if not _compiled:
        _compiled["forward"] = torch.compile(_lse_and_target_logit_fused, fullgraph=True)
        _compiled["backward"] = torch.compile(_softmax_minus_target_fused, fullgraph=True)
    forward, backward = _compiled["forward"], _compiled["backward"]
    return (
        lambda hidden, weight, targets: forward(nn.functional.linear(hidden, weight), targets),
        lambda hidden, weight, lse, targets, scale: backward(nn.functional.linear(hidden, weight), lse, targets, scale),
    )


class _ChunkedCrossEntropySum(torch.autograd.Function):
    """The summed cross-entropy; forward keeps each chunk's log-sum-exp (one float a token),
    backward recomputes the chunk's logits, turns them into the softmax in place and adds the
    weight's gradient into one buffer: one chunk of logits and one weight-sized gradient alive,
    not autograd's gradient per chunk plus their running sum."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_tokens: int, compiled: bool
    ) -> torch.Tensor:
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        lse = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse_and_target_logit, _ = _kernels(compiled)
        for start in range(0, hidden.shape[0], chunk_tokens):
            part = slice(start, start + chunk_tokens)
            # The chunk's logits live only inside the call: freed before the next chunk's are made.
            lse[part], picked = lse_and_target_logit(hidden[part], weight, targets[part])
            total += ((lse[part] - picked) * (targets[part] != IGNORE_INDEX)).sum()
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunk_tokens, ctx.compiled = chunk_tokens, compiled
        return total

    @staticmethod
    def backward(ctx: Any, grad_total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None, None]:
        hidden, weight, targets, lse = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden)
        # fp32 across chunks even for a bf16 weight: chunks summed in bf16 would lose bits.
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        _, softmax_minus_target = _kernels(ctx.compiled)
        for start in range(0, hidden.shape[0], ctx.chunk_tokens):
            part = slice(start, start + ctx.chunk_tokens)
            scale = (targets[part] != IGNORE_INDEX) * grad_total
            grad_low = softmax_minus_target(hidden[part], weight, lse[part], targets[part], scale)
            grad_hidden[part] = grad_low @ weight
            _add_weight_grad(grad_weight, grad_low, hidden[part])
            del grad_low  # as in forward: one chunk of logits alive, not two
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int = CHUNK_TOKENS,
    *, compiled: bool = False,
) -> torch.Tensor:
    """Mean next-token cross-entropy of `hidden` [..., tokens, hidden] projected by `weight`
    [vocab, hidden] against the unshifted `labels` [..., tokens]."""
    targets = shift_labels(labels).reshape(-1)
    flat = hidden.reshape(-1, hidden.shape[-1])
    total = _ChunkedCrossEntropySum.apply(flat, weight, targets, chunk_tokens, compiled)
    # 0 / 0 is nan where no token counts, as the plain mean is.
    return total / (targets != IGNORE_INDEX).sum()
