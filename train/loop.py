"""The training loop: steps, validation, metrics, checkpoints on schedule and on signal."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from hyperlaunch.core.metrics_records import StepRecord, TrainerEvent
from hyperlaunch.core.models import ModelSpec
from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE
from hyperlaunch.runtime.signals import StopRequest
from hyperlaunch.runtime.watchdog import NO_WATCHDOG, HangWatchdog, Phase

from .checkpointing import Checkpointer
from .data import Batcher, ValidationBatches
from .distributed import Dist
from .hooks import NO_HOOKS, TrainerHooks
from .metrics import MetricsLog, peak_flops, peak_memory_bytes
from .state import TrainState


def _mean_across_ranks(value: torch.Tensor, world_size: int) -> float:
    # gloo has no ReduceOp.AVG: sum, then divide.
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return float(value) / world_size


@dataclass
class Trainer:
    spec: ModelSpec
    d: Dist
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    batcher: Batcher
    val_batches: ValidationBatches
    checkpointer: Checkpointer
    metrics: MetricsLog
    stop: StopRequest
    seq_len: int
    max_steps: int
    checkpoint_every: int
    log_every: int
    val_every: int
    grad_clip: float
    prefetch: int
    mixed_precision: str
    hooks: TrainerHooks = NO_HOOKS
    watchdog: HangWatchdog = NO_WATCHDOG

    # What hooks see (hooks.TrainerView), read-only.

    @property
    def rank(self) -> int:
        return self.d.rank

    @property
    def is_main(self) -> bool:
        return self.d.is_main

    @property
    def device(self) -> torch.device:
        return self.d.device

    @property
    def run_dir(self) -> Path:
        return self.metrics.run_dir

    def _forward_loss(self, batch: torch.Tensor) -> torch.Tensor:
        batch = batch.to(self.d.device)
        if self.prefetch > 0:
            self.model.unshard()  # type: ignore[operator]  # start the root all-gather early
        # use_cache=False: left on (the config's default), Hugging Face fills a KV cache in every
        # training forward, and under --compile each block's cache write guards on its layer
        # index: a recompile per block, and past torch's limit of 8 the other blocks run eager.
        return self.model(input_ids=batch, labels=batch, use_cache=False).loss

    def train_step(self, state: TrainState) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One optimizer step over grad_accum micro-batches; (this rank's loss, grad norm, lr used),
        the first two as device tensors: reading them waits for the device."""
        from .optim import clip_gradients

        self.model.train()
        lr = float(self.scheduler.get_last_lr()[0])
        total = torch.zeros((), device=self.d.device)
        for batch in self.batcher.step_batches(state.samples_consumed):
            loss = self._forward_loss(batch) / self.batcher.grad_accum
            loss.backward()
            total += loss.detach().float()
        grad_norm = clip_gradients(self.model, self.grad_clip)
        self.checkpointer.before_update()  # an async save may still be copying the parameters
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total, grad_norm, lr

    def _reduce_step(self, local_loss: torch.Tensor) -> tuple[float, bool]:
        """The mean loss across ranks, and whether any rank got a stop signal (one may get it
        a little before the others): one all-reduce a step for both."""
        packed = torch.stack([local_loss.float(), torch.tensor(1.0 if self.stop.signal_name else 0.0, device=self.d.device)])
        dist.all_reduce(packed, op=dist.ReduceOp.SUM)
        return float(packed[0]) / self.d.world_size, bool(packed[1] > 0)

    @torch.no_grad()
    def validate(self) -> float:
        self.model.eval()
        total = torch.zeros((), device=self.d.device)
        for batch in self.val_batches:
            total += self._forward_loss(batch).float()
        return _mean_across_ranks(total / len(self.val_batches), self.d.world_size)

    def _gather_peak_memory(self) -> list[int]:
        """Every rank's peak memory (device memory on GPU, resident set on CPU), rank order;
        gathered on logged steps only."""
        mine = torch.tensor([peak_memory_bytes(self.d.device)], dtype=torch.int64, device=self.d.device)
        everyone = [torch.zeros_like(mine) for _ in range(self.d.world_size)]
        dist.all_gather(everyone, mine)
        return [int(t.item()) for t in everyone]

    def _log_step(self, state: TrainState, loss: float, grad_norm: torch.Tensor, lr: float, seconds: float) -> None:
        tokens = self.batcher.global_batch * self.seq_len
        tokens_per_s = tokens / max(seconds, 1e-9)
        per_device = tokens_per_s / self.d.world_size
        flops = self.spec.flops_per_token(self.seq_len) * per_device
        flops_with_output = self.spec.flops_per_token_with_output(self.seq_len) * per_device
        peak = peak_flops(self.d.device, self.mixed_precision)
        peaks = self._gather_peak_memory()
        self.metrics.step(
            StepRecord(
                step=state.step,
                loss=loss,
                lr=lr,
                grad_norm=float(grad_norm),
                tokens_per_s=tokens_per_s,
                tokens_per_s_per_device=per_device,
                tflops_per_device=flops / 1e12,
                mfu=flops / peak if peak else None,
                mfu_with_output=flops_with_output / peak if peak else None,
                peak_memory_bytes=max(peaks),
                peak_memory_bytes_per_rank=tuple(peaks),
                step_time_s=seconds,
                tokens_seen=state.tokens_seen,
                samples_consumed=state.samples_consumed,
                world_size=self.d.world_size,
            )
        )

    def run(self, state: TrainState) -> int:
        """Train to max_steps; the exit code (0, or REQUEUE_EXIT_CODE after a stop signal)."""
        self.stop.install()
        self.hooks.on_start(self, state)
        try:
            return self._train(state)
        finally:
            self.watchdog.close()  # export and shutdown are not steps: nothing to time there

    def _train(self, state: TrainState) -> int:
        watchdog = self.watchdog
        while state.step < self.max_steps:
            watchdog.step_starts(state.step + 1)
            started = time.perf_counter()
            self.hooks.before_step(state.step + 1, self.d.rank)
            local_loss, grad_norm, lr = self.train_step(state)
            loss, stop = self._reduce_step(local_loss)
            if not math.isfinite(loss):
                self.metrics.event(TrainerEvent.NON_FINITE_LOSS, f"loss is {loss} at step {state.step + 1}", step=state.step + 1)
            state.step += 1
            watchdog.step_done(state.step)
            state.samples_consumed += self.batcher.global_batch
            state.tokens_seen += self.batcher.global_batch * self.seq_len
            if state.step % self.log_every == 0 or state.step == self.max_steps:
                self._log_step(state, loss, grad_norm, lr, time.perf_counter() - started)
            if self.val_every and state.step % self.val_every == 0:
                with watchdog.allowance(Phase.VALIDATION):
                    val_loss = self.validate()
                self.metrics.event(
                    TrainerEvent.VALIDATION, f"step {state.step} val_loss {val_loss:.4f} ppl {math.exp(min(val_loss, 50)):.2f}",
                    step=state.step, val_loss=val_loss, val_perplexity=math.exp(min(val_loss, 50)),
                )
            self.checkpointer.poll()
            if stop:
                return self._stop_and_save(state)
            if self.checkpoint_every and state.step % self.checkpoint_every == 0:
                with watchdog.allowance(Phase.CHECKPOINT):
                    self.checkpointer.save(state)
        with watchdog.allowance(Phase.CHECKPOINT):
            self.checkpointer.wait()
            if self.checkpointer.last_saved_step != state.step:
                self.checkpointer.save(state)
                self.checkpointer.wait()
        self.hooks.on_end(self, state)
        return 0

    def _stop_and_save(self, state: TrainState) -> int:
        name = self.stop.signal_name or "a signal on another rank"
        self.metrics.event(TrainerEvent.SIGNAL_RECEIVED, f"{name} received: saving at step {state.step}", step=state.step, signal=name)
        with self.watchdog.allowance(Phase.CHECKPOINT):
            if self.checkpointer.last_saved_step != state.step:
                self.checkpointer.save(state)
            self.checkpointer.wait()
        self.metrics.event(
            TrainerEvent.EXIT, f"checkpoint saved at step {state.step}; exiting {REQUEUE_EXIT_CODE} (please requeue)",
            step=state.step, exit_code=REQUEUE_EXIT_CODE, requeue=True,
        )
        self.metrics.request_requeue()
        return REQUEUE_EXIT_CODE
