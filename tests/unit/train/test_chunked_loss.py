"""The chunked loss gives the plain Hugging Face loss and the same gradients, tied or untied,
fp32 or bf16, whatever the chunk size, and never makes the whole logits."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, Qwen3Config

from hyperlaunch.core.models import get_preset
from hyperlaunch.train.chunked_loss import chunked_cross_entropy
from hyperlaunch.train.losses import use_loss
from hyperlaunch.train.tied_embedding import use_in_place_embedding_grad

VOCAB = 512  # qwen3_tiny's


def _model(tied: bool, dtype: torch.dtype, chunked: bool, chunk_tokens: int = 5) -> torch.nn.Module:
    spec = dataclasses.replace(get_preset("qwen3_tiny"), tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**spec.hf_config_kwargs()), attn_implementation="sdpa")
    model.to(dtype)
    use_in_place_embedding_grad(model)
    if chunked:
        use_loss(model, "chunked", chunk_tokens=chunk_tokens)
    return model


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def _ids(seq_len: int = 13) -> torch.Tensor:
    # 2 x 13 = 26 tokens: chunks of 5 leave a last chunk of 1, and chunks cross the sequences.
    return torch.randint(0, VOCAB, (2, seq_len), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize(
    ("dtype", "tolerance"),
    [(torch.float32, {"rtol": 1e-5, "atol": 1e-6}), (torch.bfloat16, {"rtol": 2e-2, "atol": 2e-3})],
    ids=["fp32", "bf16"],
)
def test_same_loss_and_gradients_as_the_plain_loss(tied: bool, dtype: torch.dtype, tolerance: dict[str, float]) -> None:
    want_loss, want = _loss_and_grads(_model(tied, dtype, chunked=False), _ids())
    got_loss, got = _loss_and_grads(_model(tied, dtype, chunked=True), _ids())
    torch.testing.assert_close(got_loss, want_loss, **tolerance)
    assert want.keys() == got.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], **tolerance, msg=name)


def test_ignored_labels_and_the_last_position_count_as_huggingface_counts_them() -> None:
    hidden = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(2))
    weight = torch.randn(VOCAB, 16, generator=torch.Generator().manual_seed(3))
    labels = _ids(7)
    labels[0, 3] = labels[1, 6] = -100
    logits = hidden @ weight.T
    from transformers.loss.loss_utils import ForCausalLMLoss

    want = ForCausalLMLoss(logits, labels, vocab_size=VOCAB)
    torch.testing.assert_close(chunked_cross_entropy(hidden, weight, labels, chunk_tokens=3), want)
    with torch.no_grad():  # validation: no checkpointing, same figure
        torch.testing.assert_close(chunked_cross_entropy(hidden, weight, labels, chunk_tokens=4), want)


class _LargestOutput(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "plain"])
def test_no_tensor_holds_more_than_one_chunk_of_logits(chunked: bool) -> None:
    model = _model(tied=False, dtype=torch.float32, chunked=chunked)
    ids = _ids(80)  # 160 tokens: their logits outgrow the output layer's weight
    watch = _LargestOutput()
    with watch:
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    whole_logits = ids.numel() * VOCAB
    if chunked:
        # A chunk's logits (5 x vocab) or the output layer's gradient (vocab x 64) at most.
        assert watch.largest <= VOCAB * 64 < whole_logits
    else:
        assert watch.largest >= whole_logits


@pytest.mark.parametrize(
    ("dtype", "tolerance"),
    [(torch.float32, {"rtol": 1e-5, "atol": 1e-6}), (torch.bfloat16, {"rtol": 2e-2, "atol": 2e-3})],
    ids=["fp32", "bf16"],
)
@pytest.mark.slow
def test_compiled_chunks_give_the_eager_loss_and_gradients(dtype: torch.dtype, tolerance: dict[str, float]) -> None:
    generator = torch.Generator().manual_seed(4)
    hidden = torch.randn(2, 13, 16, generator=generator).to(dtype)
    weight = (torch.randn(VOCAB, 16, generator=generator) * 0.5).to(dtype)
    labels = _ids()
    labels[1, 4] = -100
    results = []
    for compiled in (False, True):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        loss = chunked_cross_entropy(h, w, labels, chunk_tokens=5, compiled=compiled)
        loss.backward()
        results.append((loss.detach(), h.grad, w.grad))
    for eager, compiled_value in zip(*results, strict=True):
        torch.testing.assert_close(compiled_value, eager, **tolerance)
