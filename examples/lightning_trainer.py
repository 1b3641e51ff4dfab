"""A Lightning script as Lightning's docs teach it, with nothing of hyperlaunch in it: a
LightningModule, a Trainer with --num_nodes and DDP, ModelCheckpoint every N steps (last.ckpt
too) and `fit(ckpt_path=...)` to resume.

Under hyperlaunch it resumes after a lost node with no line changed: lightning_logs/ lands in the
run's working folder, each .ckpt counts as progress, the newest complete one goes to the next
start, and Lightning sees torchrun's ranks, not Slurm's tasks:

    hyperlaunch submit --script examples/lightning_trainer.py --nodes 2 -- \\
        --num_nodes {nodes} --max_steps 40 --every 10 '{resume?--ckpt_path {resume}}'

A small MLP on made-up data keeps it to CPUs; --step_seconds slows each step (the tests use it to
kill a node between checkpoints)."""

import argparse
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self, step_seconds: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.step_seconds = step_seconds

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        time.sleep(self.step_seconds)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_nodes", type=int, default=1)
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--ckpt_path", default=None)
    parser.add_argument("--step_seconds", type=float, default=0.0)
    args = parser.parse_args()

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 16, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    checkpoints = ModelCheckpoint(every_n_train_steps=args.every, save_top_k=-1, save_last=True)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, num_nodes=args.num_nodes, strategy="ddp", max_steps=args.max_steps,
        callbacks=[checkpoints], log_every_n_steps=1, enable_progress_bar=False,
    )
    trainer.fit(Regression(args.step_seconds), DataLoader(data, batch_size=8), ckpt_path=args.ckpt_path)


if __name__ == "__main__":
    main()
