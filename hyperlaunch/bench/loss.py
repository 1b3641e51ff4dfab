"""Loss memory and time: the peak memory of the loss's forward + backward - the output projection
and the next-token cross-entropy - for Hugging Face's plain loss against the ones that never
hold the whole logits (train/losses.py), at qwen3_0_6b's vocabulary and width (151,936 x 1,024).

    python -m hyperlaunch.bench loss [--tokens 4096] [--vocab 151936] [--hidden 1024]
        [--chunk-tokens 1024] [--runs 1] [--dtype fp32|bf16]
    python -m hyperlaunch.bench loss --device cuda [--tokens 8192] [--dtype bf16]
        [--variants plain,chunked,chunked-compiled,liger,cce] [--repeats 10]

CPU: each variant runs in a fresh process: the figure is its peak resident set (VmHWM, reset
just before) during one forward + backward less the resident set before it, once the hidden
states, the weight and the labels exist (so it counts the weight's gradient, the same in
both, and whatever the loss holds). tracemalloc does not see torch's allocations; RSS does. The
target is a peak at least 4 x lower than the plain loss's.

CUDA (how train/losses.py's GPU choice was made): each variant in one process, its median
forward + backward time over --repeats after warm-up (CUDA events), the peak allocated memory
above what the inputs hold, and how far its loss and gradients are from an fp32 plain loss on
the same inputs (largest difference relative to the largest gradient)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser

TARGET_RATIO = 4.0
VARIANTS = ("plain", "chunked")
CUDA_VARIANTS = ("plain", "chunked", "chunked-compiled", "liger", "cce")


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no {field} in /proc/self/status: this benchmark needs Linux")


def _reset_peak_rss() -> int:
    """Reset the peak (VmHWM) to the current resident set, so that the setup's temporaries
    do not hide part of the loss's peak; the current resident set."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def measure(variant: str, tokens: int, vocab: int, hidden: int, chunk_tokens: int, dtype_name: str) -> dict[str, float]:
    """In this process: one forward + backward of the loss; peak RSS growth and seconds."""
    import torch
    from transformers.loss.loss_utils import ForCausalLMLoss

    from hyperlaunch.train.chunked_loss import chunked_cross_entropy

    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(1, tokens, hidden, generator=generator).to(dtype).requires_grad_()
    weight = (torch.randn(vocab, hidden, generator=generator) * 0.02).to(dtype).requires_grad_()
    labels = torch.randint(0, vocab, (1, tokens), generator=generator)
    before = _reset_peak_rss()
    started = time.perf_counter()
    if variant == "plain":  # what Qwen3ForCausalLM does: the whole logits, then HF's loss
        loss = ForCausalLMLoss(torch.nn.functional.linear(states, weight), labels, vocab_size=vocab)
    else:
        loss = chunked_cross_entropy(states, weight, labels, chunk_tokens)
    loss.backward()
    seconds = time.perf_counter() - started
    return {"peak_bytes": _status_bytes("VmHWM") - before, "seconds": seconds, "loss": float(loss)}


def _in_fresh_process(variant: str, args: list[str]) -> dict[str, float]:
    argv = [sys.executable, "-m", "hyperlaunch.bench.loss", "--variant", variant, *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str]) -> int:
    p = parser("loss", __doc__)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=151_936)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--chunk-tokens", type=int, default=1024)  # train/chunked_loss.CHUNK_TOKENS
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # the worker process
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--variants", default=",".join(CUDA_VARIANTS), help="--device cuda: which losses")
    p.add_argument("--repeats", type=int, default=10, help="--device cuda: timed forward + backward passes")
    a = p.parse_args(argv)
    if a.device == "cuda":
        from hyperlaunch.bench.loss_cuda import run_cuda

        return run_cuda(a.tokens, a.vocab, a.hidden, a.variants.split(","), a.repeats)
    shape = ["--tokens", str(a.tokens), "--vocab", str(a.vocab), "--hidden", str(a.hidden),
             "--chunk-tokens", str(a.chunk_tokens), "--dtype", a.dtype]
    if a.variant:  # the worker: one measurement, one JSON line
        print(json.dumps(measure(a.variant, a.tokens, a.vocab, a.hidden, a.chunk_tokens, a.dtype)))
        return 0
    header("loss memory", f"{a.tokens} tokens, vocabulary {a.vocab}, hidden {a.hidden}, {a.dtype}, "
           f"chunks of {a.chunk_tokens} tokens; {a.runs} fresh process(es) per variant")
    element = 2 if a.dtype == "bf16" else 4
    print(f"  whole logits in {a.dtype}: {a.tokens * a.vocab * element / 2**30:.2f} GiB; "
          f"the weight's gradient: {a.vocab * a.hidden * element / 2**30:.2f} GiB", flush=True)
    peaks: dict[str, list[float]] = {}
    for variant in VARIANTS:
        runs = [_in_fresh_process(variant, shape) for _ in range(a.runs)]
        peaks[variant] = [r["peak_bytes"] / 2**30 for r in runs]
        print(f"  {variant:<8} peak {spread(peaks[variant], '.2f')} GiB  "
              f"time {spread([r['seconds'] for r in runs], '.2f')} s  loss {runs[0]['loss']:.6f}", flush=True)
    ratio = min(peaks["plain"]) / max(max(peaks["chunked"]), 1e-9)
    print(f"  plain / chunked peak: {ratio:.1f}x (target >= {TARGET_RATIO:.0f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
