"""Data: `prepare-data` throughput against the tokenizer library's own batch encoding of the
same text on all cores (target >= 0.7 of it), and the trainer's start-up on a prepared 10 MB
corpus against a prepared 300 MB one (wall time to exit and peak memory of one process
training `--model` for 2 steps; targets <= 1.25x time, <= 1.15x memory).

    python -m hyperlaunch.bench data [--small-mb 10] [--large-mb 300] [--throughput-mb 30]
        [--runs 3] [--tokenizer offline] [--model qwen3_tiny] [--keep DIR]

The corpora are generated .jsonl of word-like text (pseudo-words drawn from a Zipf-like
distribution, documents of 50-800 words). The reference encodes the text already in memory
with `Tokenizer.encode_batch_fast` on all cores in batches of 10,000 documents; prepare-data
is timed as the command reports it (reading, tokenizing in worker processes, writing shards),
with as many workers as cores. Each trainer run is a fresh `python -m hyperlaunch.train`
process, timed from start to exit; its peak memory is the process's maximum resident set
(wait4). Resume on the dev cluster is not measured here."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser

TARGET_THROUGHPUT = 0.7
TARGET_TIME, TARGET_MEMORY = 1.25, 1.15


def write_corpus(path: Path, megabytes: float, seed: int = 0) -> Path:
    """A .jsonl of word-like text, `megabytes` MB."""
    import numpy as np

    rng = np.random.default_rng(seed)
    consonants, vowels = list("bcdfghjklmnprstvwz"), list("aeiou")
    words = np.array([
        "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.integers(1, 4))) for _ in range(20_000)
    ])
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    target = int(megabytes * 1e6)
    with path.open("w") as handle:
        while handle.tell() < target:
            lengths = rng.integers(50, 800, size=256)
            picks = rng.choice(len(words), size=int(lengths.sum()), p=weights)
            start = 0
            for length in lengths:
                text = " ".join(words[picks[start : start + length]]) + "."
                handle.write(json.dumps({"text": text.capitalize()}) + "\n")
                start += length
    return path


def _python(args: list[str], env: dict[str, str] | None = None) -> str:
    """The stdout of a Python subprocess (exits with its stderr on failure)."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


_REFERENCE = """
import json, sys, time
from hyperlaunch.data.tokenizer import load_tokenizer
backend = load_tokenizer(sys.argv[2]).backend
docs = [json.loads(line)["text"] for line in open(sys.argv[1])]
started, tokens = time.perf_counter(), 0
for first in range(0, len(docs), 10_000):
    tokens += sum(len(e) + 1 for e in backend.encode_batch_fast(docs[first:first + 10_000], add_special_tokens=False))
print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - started}))
"""


def reference_tokens_per_s(corpus: Path, tokenizer: str) -> tuple[float, int]:
    out = _python(["-c", _REFERENCE, str(corpus), tokenizer], env={"TOKENIZERS_PARALLELISM": "true"})
    result = json.loads(out)
    return result["tokens"] / result["seconds"], result["tokens"]


def prepare_tokens_per_s(corpus: Path, output: Path, tokenizer: str) -> tuple[float, int]:
    out = _python(["-m", "hyperlaunch", "prepare-data", str(corpus), "--tokenizer", tokenizer,
                         "--output", str(output), "--overwrite", "--json"])
    result = json.loads(out)
    return result["tokens"] / result["seconds"], result["tokens"]


def trainer_start(prepared: Path, model: str, tokenizer: str, work: Path) -> tuple[float, float, float]:
    """(wall seconds to exit, peak RSS GiB, seconds the trainer spent on its data) of 2 steps."""
    ckpt = work / "ckpt"
    args = [
        sys.executable, "-m", "hyperlaunch.train", "--model", model, "--data", str(prepared), "--tokenizer", tokenizer,
        "--max-steps", "2", "--seq-len", "32", "--micro-batch-size", "2", "--checkpoint-every", "0", "--no-export",
        "--device", "cpu", "--checkpoint-dir", str(ckpt), "--run-dir", str(work / "run"), "--from-scratch",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"trainer failed:\n{stderr[-3000:]}")
    events = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    (started_event,) = [e for e in events if e.get("event") == "started"]
    return seconds, usage.ru_maxrss * 1024 / 2**30, float(started_event["startup"]["data_s"])


def main(argv: list[str] | None = None) -> int:
    options = parser("data", __doc__)
    options.add_argument("--small-mb", type=float, default=10)
    options.add_argument("--large-mb", type=float, default=300)
    options.add_argument("--throughput-mb", type=float, default=30)
    options.add_argument("--runs", type=int, default=3)
    options.add_argument("--tokenizer", default="offline")
    options.add_argument("--model", default="qwen3_tiny")
    options.add_argument("--keep", type=Path, default=None, help="generate and keep the corpora in DIR (reused when there)")
    args = options.parse_args(argv)
    import torch  # noqa: F401 - for the machine line

    from hyperlaunch.data.prepare import default_workers

    header("Data", f"tokenizer {args.tokenizer}, {default_workers()} workers / cores; trainer: {args.model}, 1 process, "
           f"2 steps, seq 32; {args.runs} run(s) each")
    with tempfile.TemporaryDirectory(prefix="hyperlaunch-bench-data-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        corpora: dict[str, Path] = {}
        for name, mb in (("throughput", args.throughput_mb), ("small", args.small_mb), ("large", args.large_mb)):
            path = work / f"{name}-{mb:g}MB.jsonl"
            if not path.exists():
                write_corpus(path, mb, seed=len(corpora))
            corpora[name] = path

        reference, prepared_rates = [], []
        for _ in range(args.runs):
            rate, tokens = reference_tokens_per_s(corpora["throughput"], args.tokenizer)
            reference.append(rate)
            rate, prepared_tokens = prepare_tokens_per_s(corpora["throughput"], work / "throughput-prepared", args.tokenizer)
            prepared_rates.append(rate)
            assert prepared_tokens == tokens, (prepared_tokens, tokens)
        ratio = statistics.median(prepared_rates) / statistics.median(reference)
        print(f"\n  throughput on {args.throughput_mb:g} MB ({tokens:,} tokens)")
        print(f"  tokenizer batch encode, all cores  {spread(reference, ',.0f')} tokens/s")
        print(f"  prepare-data                       {spread(prepared_rates, ',.0f')} tokens/s")
        print(f"  ratio {ratio:.2f}  target >= {TARGET_THROUGHPUT}: {'met' if ratio >= TARGET_THROUGHPUT else 'MISSED'}")

        starts: dict[str, list[tuple[float, float, float]]] = {}
        for name in ("small", "large"):
            prepared = work / f"{name}-prepared"
            started = time.perf_counter()
            rate, tokens = prepare_tokens_per_s(corpora[name], prepared, args.tokenizer)
            print(f"\n  prepared {corpora[name].name}: {tokens:,} tokens in {time.perf_counter() - started:.1f} s ({rate:,.0f} tokens/s)")
            starts[name] = []
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory(dir=work) as run_dir:
                    starts[name].append(trainer_start(prepared, args.model, args.tokenizer, Path(run_dir)))
        print()
        for name in ("small", "large"):
            seconds, peaks, data_s = zip(*starts[name], strict=True)
            print(f"  {corpora[name].name:<22} start to exit {spread(seconds, '.2f')} s  peak {spread(peaks, '.3f')} GiB  "
                  f"data phase {spread(data_s, '.3f')} s")
        t_ratio = min(s for s, _, _ in starts["large"]) / min(s for s, _, _ in starts["small"])
        m_ratio = min(p for _, p, _ in starts["large"]) / min(p for _, p, _ in starts["small"])
        print(f"  large / small: time {t_ratio:.3f} (target <= {TARGET_TIME}: {'met' if t_ratio <= TARGET_TIME else 'MISSED'}), "
              f"memory {m_ratio:.3f} (target <= {TARGET_MEMORY}: {'met' if m_ratio <= TARGET_MEMORY else 'MISSED'})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
