"""`bench loss --device cuda`: each loss of train/losses.py on one GPU in bf16, as the trainer
runs it (hidden states and output weight in bf16, labels unshifted): median forward + backward
time, peak memory above the inputs, and the distance of its loss and gradients from an fp32
plain loss on the same inputs. A variant whose library is missing is reported, not fatal."""

from __future__ import annotations

import statistics
from typing import Any

from hyperlaunch.bench.report import header

WARMUP = 3


def _inputs(tokens: int, vocab: int, hidden: int) -> tuple[Any, Any, Any]:
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    states = torch.randn(1, tokens, hidden, device="cuda", generator=generator, dtype=torch.bfloat16)
    weight = (torch.randn(vocab, hidden, device="cuda", generator=generator) * 0.02).to(torch.bfloat16)
    labels = torch.randint(0, vocab, (1, tokens), device="cuda", generator=generator)
    labels[0, :7] = -100  # a few ignored positions, as padding leaves
    return states, weight, labels


def _loss_fn(variant: str) -> Any:
    import torch
    from transformers.loss.loss_utils import ForCausalLMLoss

    from hyperlaunch.train import losses

    if variant == "plain":  # what Qwen3ForCausalLM does: the whole logits, then HF's loss
        return lambda h, w, y: ForCausalLMLoss(torch.nn.functional.linear(h, w), y, vocab_size=w.shape[0])
    if variant == "chunked-compiled":
        return losses.loss_function("chunked", compiled=True)
    return losses.loss_function(variant, compiled=False)


def _reference(states: Any, weight: Any, labels: Any) -> tuple[float, Any, Any]:
    import torch
    from transformers.loss.loss_utils import ForCausalLMLoss

    h = states.float().requires_grad_()
    w = weight.float().requires_grad_()
    loss = ForCausalLMLoss(torch.nn.functional.linear(h, w), labels, vocab_size=w.shape[0])
    loss.backward()
    return float(loss), h.grad, w.grad


def _relative(got: Any, want: Any) -> float:
    return float((got.float() - want).abs().max() / want.abs().max())


def measure(variant: str, states: Any, weight: Any, labels: Any, repeats: int, reference: tuple[float, Any, Any]) -> dict[str, float]:
    import torch

    fn = _loss_fn(variant)
    h = states.detach().clone().requires_grad_()
    w = weight.detach().clone().requires_grad_()
    times = []
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for index in range(WARMUP + repeats):
        h.grad = w.grad = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = fn(h, w, labels)
        loss.backward()
        end.record()
        torch.cuda.synchronize()
        if index >= WARMUP:
            times.append(start.elapsed_time(end))
    peak = torch.cuda.max_memory_allocated() - base
    want_loss, want_h, want_w = reference
    return {
        "ms": statistics.median(times), "ms_min": min(times), "peak_gib": peak / 2**30,
        "loss": float(loss), "loss_error": abs(float(loss) - want_loss),
        "grad_hidden_error": _relative(h.grad, want_h), "grad_weight_error": _relative(w.grad, want_w),
    }


def run_cuda(tokens: int, vocab: int, hidden: int, variants: list[str], repeats: int) -> int:
    import torch

    if not torch.cuda.is_available():
        print("bench loss --device cuda: no CUDA device visible to this torch build")
        return 2
    header("loss on GPU", f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; {tokens} tokens, "
           f"vocabulary {vocab}, hidden {hidden}, bf16; median of {repeats} forward + backward after {WARMUP}")
    states, weight, labels = _inputs(tokens, vocab, hidden)
    reference = _reference(states, weight, labels)
    torch.cuda.empty_cache()
    print(f"  whole logits in bf16 {tokens * vocab * 2 / 2**30:.2f} GiB, in fp32 {tokens * vocab * 4 / 2**30:.2f} GiB; "
          f"fp32 reference loss {reference[0]:.6f}", flush=True)
    print(f"  {'variant':<17} {'ms':>8} {'peak GiB':>9} {'loss error':>11} {'grad h err':>11} {'grad W err':>11}", flush=True)
    for variant in variants:
        try:
            r = measure(variant, states, weight, labels, repeats, reference)
        except Exception as err:  # a missing library or a kernel that fails here: say so, go on
            print(f"  {variant:<17} failed: {type(err).__name__}: {str(err).splitlines()[0][:150]}", flush=True)
            continue
        finally:
            torch.cuda.empty_cache()
        print(f"  {variant:<17} {r['ms']:>8.2f} {r['peak_gib']:>9.2f} {r['loss_error']:>11.2e} "
              f"{r['grad_hidden_error']:>11.2e} {r['grad_weight_error']:>11.2e}", flush=True)
    return 0
