"""The one-line callbacks for transformers' Trainer and Lightning (hyperlaunch.integrations), with
the real libraries on CPU, each in a process of its own as a job's rank (signal handlers and the
runtime library's session are per process): the save signal at step 3 leaves a checkpoint of step
3 that the job's layout rules find, a requeue request and the requeue exit code; the steps'
losses are in the run's metrics. And importing them imports neither framework."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoint_layouts
from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE, requeue_request_path

ROOT = Path(__file__).resolve().parents[3]

_SIGNAL_AT_STEP_3 = """
import os, signal
def signal_at(step, now):
    if step == 3 and not getattr(signal_at, "sent", False):
        signal_at.sent = True
        os.kill(os.getpid(), signal.SIGUSR2)
"""

TRAINER_SCRIPT = _SIGNAL_AT_STEP_3 + """
import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Trainer, TrainerCallback, TrainingArguments
from hyperlaunch.integrations.transformers import HyperlaunchCallback

class Signal(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        signal_at(state.global_step, None)

ids = torch.randint(0, 64, (64, 16), generator=torch.Generator().manual_seed(0))
data = [{"input_ids": row, "labels": row} for row in ids]
config = Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8)
args = TrainingArguments(output_dir="out", max_steps=50, save_steps=1000, logging_steps=1, report_to="none", use_cpu=True, disable_tqdm=True)
Trainer(model=AutoModelForCausalLM.from_config(config), args=args, train_dataset=data, callbacks=[Signal(), HyperlaunchCallback()]).train()
print("trained to the end")
"""

LIGHTNING_SCRIPT = _SIGNAL_AT_STEP_3 + """
import torch, lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
from hyperlaunch.integrations.lightning import HyperlaunchCallback

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, batch, index):
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

class Signal(L.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, index):
        signal_at(trainer.global_step, None)

x = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=50, logger=False, enable_progress_bar=False,
                    callbacks=[Signal(), ModelCheckpoint(dirpath="ckpts", every_n_train_steps=1000), HyperlaunchCallback()])
trainer.fit(Model(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
print("trained to the end")
"""


def _run(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HYPERLAUNCH_"))},
        "PYTHONPATH": str(ROOT), "SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "0", "HYPERLAUNCH_NAME": "exp",
        "HYPERLAUNCH_RUN_DIR": str(tmp_path / "run"), "HYPERLAUNCH_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
    }
    (tmp_path / "train.py").write_text(script)
    return subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)


def _steps(tmp_path: Path) -> list[int]:
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [record["step"] for record in map(json.loads, lines) if record.get("type") == "step" and "loss" in record]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "layout", "path"), [
    (TRAINER_SCRIPT, "transformers", "out/checkpoint-3"),
    (LIGHTNING_SCRIPT, "lightning", "ckpts/epoch=0-step=3.ckpt"),
], ids=["transformers", "lightning"])
def test_the_save_signal_saves_the_step_stops_and_asks_for_a_requeue(tmp_path: Path, script: str, layout: str, path: str) -> None:
    result = _run(tmp_path, script)
    assert result.returncode == REQUEUE_EXIT_CODE, result.stdout[-2000:] + result.stderr[-4000:]
    assert "trained to the end" not in result.stdout
    assert requeue_request_path(tmp_path / "run", "7", 0).exists()
    found = checkpoint_layouts.newest([str(tmp_path)])
    assert found is not None and (found.layout, found.step, found.path) == (layout, 3, str(tmp_path / path))
    assert _steps(tmp_path)[:3] == [1, 2, 3] and max(_steps(tmp_path)) == 3


def test_importing_the_callbacks_imports_no_framework() -> None:
    code = (
        "import sys, hyperlaunch.integrations.transformers, hyperlaunch.integrations.lightning\n"
        "print(sorted(m for m in ('torch', 'transformers', 'lightning', 'pytorch_lightning') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
