"""The tied embedding's in-place backward gives the gradients plain autograd gives while
allocating one weight-sized gradient instead of three, and leaves untied models alone."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

from hyperlaunch.core.models import get_preset
from hyperlaunch.train.tied_embedding import use_in_place_embedding_grad


def _model(name: str) -> torch.nn.Module:
    spec = get_preset(name)
    config = (Qwen3Config if spec.kind == "qwen3" else LlamaConfig)(**spec.hf_config_kwargs())
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


def _grads(model: torch.nn.Module, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def test_same_gradients_as_autograd_with_repeated_tokens() -> None:
    model = _model("qwen3_tiny")
    ids = torch.tensor([[5, 7, 5, 5, 9, 7, 1, 2], [3, 3, 3, 8, 7, 5, 0, 4]])  # repeats add up
    want = _grads(model, ids)
    assert use_in_place_embedding_grad(model)
    got = _grads(model, ids)
    assert want.keys() == got.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-7, msg=name)
    with torch.no_grad():  # evaluation takes the plain path
        assert model(input_ids=ids).logits.shape == (2, 8, 512)


class _CountWeightSizedAllocations(TorchDispatchMode):
    """Counts op outputs as large as `numel` that are new memory (not an input's storage)."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.count = numel, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.numel() >= self.numel and tensor.untyped_storage().data_ptr() not in inputs:
                self.count += 1
        return out


def _weight_sized_allocations_in_backward(model: torch.nn.Module, ids: torch.Tensor) -> int:
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    counter = _CountWeightSizedAllocations(model.get_input_embeddings().weight.numel())
    with counter:
        loss.backward()
    return counter.count


def test_backward_allocates_one_weight_sized_gradient_instead_of_three() -> None:
    model = _model("qwen3_tiny")
    ids = torch.randint(0, 512, (2, 8), generator=torch.Generator().manual_seed(0))
    assert _weight_sized_allocations_in_backward(model, ids) == 3  # output layer's, embedding's, their sum
    use_in_place_embedding_grad(model)
    assert _weight_sized_allocations_in_backward(model, ids) == 1


def test_untied_models_are_left_alone() -> None:
    model = _model("llama_tiny")
    forward = model.get_input_embeddings().forward
    assert not use_in_place_embedding_grad(model)
    assert model.get_input_embeddings().forward == forward
