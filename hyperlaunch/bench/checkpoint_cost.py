"""Checkpoint cost: training time blocked per checkpoint, synchronous against
--async-checkpoint, and the write throughput of a save against a raw sequential write of the
same number of bytes to the same disk.

    python -m hyperlaunch.bench checkpoint [--layers 8] [--steps 8] [--every 2] [--runs 1]
        [--dir DIR]

The model is qwen3_0_6b's architecture cut to --layers decoder layers (8: 0.28B parameters, a
3.4 GB checkpoint of weights and AdamW state), so that an async run's extra copy of the state
fits beside two ranks on a small machine; its weights are random, written once as a local
Hugging Face model. 2 CPU ranks; a checkpoint every --every steps.

Blocked time is what train/ records per checkpoint (`blocked_s` of each checkpoint_completed
record): the save() call plus, for async, any wait for the copy of the state before the next
optimizer step. Throughput is the checkpoint's bytes over the whole synchronous save; the raw
write is two processes (one per rank) each writing and fsyncing half the bytes."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from multiprocessing import Process
from pathlib import Path
from typing import Any

from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser, records, torchrun

TARGET_BLOCKED = 0.05
TARGET_THROUGHPUT = 0.6
_CHUNK = 64 * 2**20


def make_model(directory: Path, layers: int) -> int:
    """qwen3_0_6b cut to `layers` layers, random weights, saved as a HF model; its parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from hyperlaunch.core.models import get_preset

    kwargs: dict[str, Any] = {**get_preset("qwen3_0_6b").hf_config_kwargs(), "num_hidden_layers": layers}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**kwargs))
    model.save_pretrained(directory, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def train_with_checkpoints(model_dir: Path, work: Path, args: argparse.Namespace, async_save: bool) -> list[dict]:
    run_dir = work / "run"
    torchrun(2, [
        "hyperlaunch.train", "--model", str(model_dir), "--model-name", "ckptbench", "--tokenizer", "offline",
        "--max-steps", str(args.steps), "--checkpoint-every", str(args.every), "--seq-len", "64",
        "--micro-batch-size", "1", "--no-export", "--checkpoint-dir", str(work / "ckpt"), "--run-dir", str(run_dir),
        "--val-fraction", "0.01", *(["--async-checkpoint"] if async_save else []),
    ])
    return [r for r in records(run_dir, "event") if r["event"] == "checkpoint_completed"]


def _write_part(path: Path, size: int) -> None:
    block = os.urandom(_CHUNK)
    with open(path, "wb") as handle:
        left = size
        while left > 0:
            handle.write(block[: min(left, _CHUNK)])
            left -= _CHUNK
        handle.flush()
        os.fsync(handle.fileno())


def raw_write_seconds(directory: Path, total: int, writers: int = 2) -> float:
    directory.mkdir(parents=True, exist_ok=True)
    parts = [directory / f"part{i}" for i in range(writers)]
    procs = [Process(target=_write_part, args=(part, total // writers)) for part in parts]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    seconds = time.perf_counter() - started
    for part in parts:
        part.unlink()
    return seconds


def main(argv: list[str] | None = None) -> int:
    options = parser("checkpoint", __doc__)
    options.add_argument("--layers", type=int, default=8)
    options.add_argument("--steps", type=int, default=8)
    options.add_argument("--every", type=int, default=2)
    options.add_argument("--runs", type=int, default=1)
    options.add_argument("--dir", type=Path, default=None, help="where checkpoints are written [default: a temporary folder]")
    args = options.parse_args(argv)
    import torch  # noqa: F401 - for the machine line

    base = Path(tempfile.mkdtemp(prefix="hyperlaunch-bench-ckpt-", dir=args.dir))
    params = make_model(base / "model", args.layers)
    header("Checkpoint cost", f"qwen3_0_6b widths, {args.layers} layers ({params / 1e9:.2f}B parameters), fp32 + AdamW, "
           f"2 CPU ranks, a checkpoint every {args.every} of {args.steps} steps, {args.runs} run(s) per mode; "
           f"checkpoints in {base}")
    blocked: dict[str, list[float]] = {"sync": [], "async": []}
    throughput: list[float] = []
    sizes: list[int] = []
    for index in range(args.runs):
        for mode in ("sync", "async"):
            work = base / f"{mode}{index}"
            saves = train_with_checkpoints(base / "model", work, args, async_save=mode == "async")
            blocked[mode] += [s["blocked_s"] for s in saves]
            if mode == "sync":
                throughput += [s["bytes"] / s["seconds"] for s in saves]
                sizes += [s["bytes"] for s in saves]
            print(f"  run {index + 1} {mode:<5}: blocked " + ", ".join(f"{s['blocked_s']:.2f}" for s in saves)
                  + " s; save took " + ", ".join(f"{s['seconds']:.2f}" for s in saves) + " s", flush=True)
            shutil.rmtree(work / "ckpt", ignore_errors=True)  # free the disk for the next run
    size = int(statistics.median(sizes))
    raw = [size / raw_write_seconds(base / "raw", size) for _ in range(3)]
    sync_blocked, async_blocked = statistics.median(blocked["sync"]), statistics.median(blocked["async"])
    print(f"\n  checkpoint size          {size / 2**30:.2f} GiB")
    print(f"  blocked, sync            {spread(blocked['sync'], '.2f')} s")
    print(f"  blocked, async           {spread(blocked['async'], '.3f')} s")
    ratio = async_blocked / sync_blocked
    print(f"  async / sync             {ratio:.3f}  target <= {TARGET_BLOCKED}: {'met' if ratio <= TARGET_BLOCKED else 'MISSED'}")
    print(f"  save throughput (sync)   {spread([t / 2**20 for t in throughput], '.0f')} MiB/s")
    print(f"  raw write (2 writers)    {spread([t / 2**20 for t in raw], '.0f')} MiB/s")
    share = statistics.median(throughput) / statistics.median(raw)
    print(f"  save / raw               {share:.2f}  target >= {TARGET_THROUGHPUT}: {'met' if share >= TARGET_THROUGHPUT else 'MISSED'}")
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
