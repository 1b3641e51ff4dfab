"""The input embedding of a model whose output layer shares its weight, with a backward that
adds into the gradient the output layer already left instead of making two more.

Autograd gives a weight used twice two gradients and sums them: the output layer's, the
embedding's (dense, vocabulary x hidden, almost all zeros) and their sum are alive together
at the end of backward; for qwen3_0_6b that is 3 x 0.58 GiB on every rank. Here the lookup
is not an autograd use of the weight: its backward index-adds the few rows it touched into
`weight.grad`, which the output layer's gradient has filled by then (the embedding runs first
in forward, so its backward runs last). FSDP2 reduce-scatters the root's gradients only after
backward, so it sees the sum."""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn


class _LookupAddingIntoGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, ids: torch.Tensor, anchor: torch.Tensor, holder: tuple[nn.Parameter]) -> torch.Tensor:  # noqa: ARG004
        # The weight comes inside a tuple, which autograd does not look into: were it an input,
        # autograd would hold the output layer's gradient back until this backward had run.
        (ctx.weight,) = holder
        ctx.save_for_backward(ids)
        return nn.functional.embedding(ids, ctx.weight.detach())

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[None, None, None]:
        (ids,) = ctx.saved_tensors
        weight = ctx.weight
        rows = grad_out.reshape(-1, grad_out.shape[-1]).to(weight.dtype)
        if weight.grad is None:  # the output layer did not run (or gave no gradient)
            weight.grad = torch.zeros_like(weight)
        weight.grad.index_add_(0, ids.reshape(-1), rows)
        return None, None, None


def _forward(self: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    if not torch.is_grad_enabled():
        return nn.functional.embedding(ids, self.weight)
    # The anchor only makes the output require a gradient, so that backward reaches us.
    anchor = torch.ones((), device=ids.device, requires_grad=True)
    return _LookupAddingIntoGrad.apply(ids, anchor, (self.weight,))


def use_in_place_embedding_grad(model: nn.Module) -> bool:
    """Switch the input embedding of a tied model to the backward above; False (and nothing
    changed) when the weights are not tied."""
    hf: Any = model  # a transformers model: nn.Module's type does not know its methods
    embedding = hf.get_input_embeddings()
    output = hf.get_output_embeddings()
    if output is None or output.weight is not embedding.weight:
        return False
    embedding.forward = types.MethodType(_forward, embedding)
    return True
