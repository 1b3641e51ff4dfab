"""Helpers for the trainer's integration tests: launch real torchrun (gloo, CPU) or a plain
process, and read metrics.jsonl back."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.devcluster_helpers import importable_tests_env
from tests.support.free_port import free_port

PYTHON = sys.executable
FAULT_ENTRY = "tests.support.fault_entry"
TIMEOUT_S = 240


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        path = self.run_dir / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [r for r in rows if kind is None or r["type"] == kind]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records("event") if r["event"] == name]

    def steps(self) -> dict[int, dict[str, Any]]:
        """The last record of each step (a resumed run logs the repeated steps again)."""
        return {r["step"]: r for r in self.records("step")}


def train_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERLAUNCH_TEST_")}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.update(importable_tests_env())
    env.update(extra or {})
    return env


def launch(
    args: list[str],
    *,
    ranks: int = 2,
    run_dir: Path,
    env: dict[str, str] | None = None,
    check: bool = True,
    timeout_s: float = TIMEOUT_S,
    wrap: list[str] | None = None,
) -> Run:
    """`torchrun -m hyperlaunch.train` on `ranks` local processes (a free port per launch, so
    tests can run beside a Slurm cluster), or plain `python -m` when ranks == 0. With a
    HYPERLAUNCH_TEST_* variable in `env`, the trainer runs through the tests' fault entry module.
    `wrap` goes before the command (test_disk_full's small filesystem). Past `timeout_s` every
    process of the launch is killed and the test fails."""
    module = FAULT_ENTRY if any(name.startswith("HYPERLAUNCH_TEST_") for name in env or {}) else "hyperlaunch.train"
    if ranks == 0:
        cmd = [PYTHON, "-m", module]
    else:
        cmd = [
            PYTHON, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", "--nnodes=1",
            "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{free_port()}", "--max_restarts=0",
            "-m", module,
        ]
    cmd = [*(wrap or []), *cmd, *args, "--run-dir", str(run_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=train_env(env))
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)  # torchrun's workers have sessions of their own: kill them by name
        stdout, stderr = proc.communicate()
        raise AssertionError(f"trainer still running after {timeout_s} s\nstderr:\n{stderr[-5000:]}") from None
    run = Run(proc.returncode, stdout, stderr, run_dir)
    if check and proc.returncode != 0:
        raise AssertionError(f"trainer exited {proc.returncode}\nstdout:\n{stdout[-3000:]}\nstderr:\n{stderr[-5000:]}")
    return run


def _kill_tree(root: int) -> None:
    """SIGKILL `root` and every process descended from it."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    doomed, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in doomed} - doomed
        doomed |= more
        grew = bool(more)
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def tiny_args(ckpt_dir: Path, *extra: str, model: str = "qwen3_tiny", steps: int = 20) -> list[str]:
    """A fast, deterministic configuration of the tiny presets."""
    return [
        "--model", model, "--checkpoint-dir", str(ckpt_dir), "--max-steps", str(steps),
        "--seq-len", "32", "--micro-batch-size", "2", "--warmup-steps", "3", "--lr", "3e-3",
        "--min-lr", "3e-4", "--device", "cpu", *extra,
    ]


def tree_digest(root: Path) -> str:
    """A digest of every file name and content under root (to prove nothing was touched)."""
    digest = hashlib.sha256()
    if root.exists():
        for path in sorted(root.rglob("*")):
            digest.update(str(path.relative_to(root)).encode())
            if path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()


def save_tiny_model(kind: str, directory: Path) -> None:
    """A tiny qwen3 (tied) or llama (untied) model saved with save_pretrained, as a local
    Hugging Face model directory (vocabulary 512: use --tokenizer offline)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    common = dict(
        hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
        intermediate_size=96, vocab_size=512, max_position_embeddings=256,
    )
    config = (
        Qwen3Config(**common, tie_word_embeddings=True, rope_theta=10000.0)
        if kind == "qwen3"
        else LlamaConfig(**common, tie_word_embeddings=False, rope_theta=500000.0)
    )
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:  # not ones, so a skipped load cannot pass for the default init
                param.uniform_(0.5, 1.5)
            elif "embed" in name or "lm_head" in name:  # confident logits: loss depends on weights
                param.normal_(0.0, 1.0)
    model.save_pretrained(directory)
