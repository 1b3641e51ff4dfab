"""The training loop: steps, validation, metrics, checkpoints on schedule and on signal.

On a GPU nothing in a step waits for the device: the loss and gradient norm stay device
tensors until the next step's work is queued (one step late), the stop flag is agreed over the
CPU (gloo) group, memory figures are the allocator's host-side counters, and batches are copied
from pinned memory without blocking. The host so runs a step ahead and the GPU never idles
while it launches kernels. On CPU there is no queue to keep full: every figure is read at once."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from .memory_snapshot import TrainerSnapshots
from .metrics import MetricsLog, peak_flops, peak_memory_bytes
from .state import TrainState


def _mean_across_ranks(value: torch.Tensor, world_size: int) -> float:
    # gloo has no ReduceOp.AVG: sum, then divide.
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return float(value) / world_size


class _StepClock:
    """When steps end. On a GPU: CUDA events recorded behind each step's work, so the time
    between two is the GPU's own period whether the host runs ahead of it (a host clock read a
    step late would count the host's queueing, not the step) or falls behind it. On CPU, where
    a step has ended when its call returns: the host's clock."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.last: Any = self.mark()

    def mark(self) -> Any:
        """A step's end (or the start of the next timed stretch), as the device sees it."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def restart(self) -> None:
        """Time the next step from now: what ran since (validation, a save) is no step's."""
        self.last = self.mark()

    def seconds(self, end: Any) -> float:
        """The time from the last end read to `end` (waiting for it)."""
        if self.cuda:
            end.synchronize()
            seconds = float(self.last.elapsed_time(end)) / 1000
        else:
            seconds = end - self.last
        self.last = end
        return seconds


@dataclass
class _Unread:
    """A step whose loss and gradient norm are still on the device."""

    step: int
    loss: torch.Tensor
    """Summed across ranks (the all-reduce queued, not waited for)."""
    grad_norm: torch.Tensor
    lr: float
    tokens_seen: int
    samples_consumed: int
    ended: Any
    """The step's end on the step clock."""


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
    checkpoints: bool
    """False (--no-checkpoints): no save at all, not at the end nor on a signal."""
    log_every: int
    val_every: int
    grad_clip: float
    prefetch: int
    mixed_precision: str
    hooks: TrainerHooks = NO_HOOKS
    watchdog: HangWatchdog = NO_WATCHDOG
    read_late: bool = False
    """Read each step's figures once the next step is queued (GPU), not at once (CPU)."""
    snapshots: TrainerSnapshots | None = None
    """Memory snapshots every --memory-checkpoint-every steps, where the job runs keepers."""
    _unread: _Unread | None = field(default=None, init=False, repr=False)
    _clock: _StepClock | None = field(default=None, init=False, repr=False)

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
        if self.d.device.type == "cuda":
            # From pinned memory the copy is queued like a kernel; from pageable memory the host
            # would wait for it. Pinned blocks come from torch's caching host allocator.
            batch = batch.pin_memory().to(self.d.device, non_blocking=True)
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
        if self.snapshots is not None:
            self.snapshots.before_update()  # and a memory snapshot
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total, grad_norm, lr

    def _stop_agreed(self) -> bool:
        """Whether any rank got a stop signal (one may get it a little before the others),
        agreed over the CPU group: the host learns it without waiting for the device."""
        if self.d.world_size == 1:
            return bool(self.stop.signal_name)
        flag = torch.tensor([1 if self.stop.signal_name else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        return bool(flag.item() > 0)

    def _queue_loss_sum(self, local_loss: torch.Tensor) -> torch.Tensor:
        """The loss summed across ranks, as a device tensor; the all-reduce is queued, not waited for."""
        total = local_loss.detach().float().reshape(1)
        if self.d.world_size > 1:
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total

    @torch.no_grad()
    def validate(self) -> float:
        self.model.eval()
        total = torch.zeros((), device=self.d.device)
        for batch in self.val_batches:
            total += self._forward_loss(batch).float()
        return _mean_across_ranks(total / len(self.val_batches), self.d.world_size)

    def _gather_peak_memory(self) -> list[int]:
        """Every rank's peak memory (device memory on GPU, resident set on CPU), rank order;
        gathered over the CPU group on logged steps only (the device's counters are the
        allocator's, on the host: nothing waits for the GPU)."""
        mine = torch.tensor([peak_memory_bytes(self.d.device)], dtype=torch.int64)
        if self.d.world_size == 1:
            return [int(mine.item())]
        everyone = [torch.zeros_like(mine) for _ in range(self.d.world_size)]
        dist.all_gather(everyone, mine)
        return [int(t.item()) for t in everyone]

    def _read(self, unread: _Unread) -> None:
        """Read a step's figures (waiting for that step's work only) and log them if due."""
        loss_sum, grad_norm = torch.cat([unread.loss, unread.grad_norm.detach().float().reshape(1).to(unread.loss.device)]).tolist()
        loss = loss_sum / self.d.world_size
        assert self._clock is not None
        seconds = self._clock.seconds(unread.ended)
        step = unread.step
        if not math.isfinite(loss):
            self.metrics.event(TrainerEvent.NON_FINITE_LOSS, f"loss is {loss} at step {step}", step=step)
        if step % self.log_every == 0 or step == self.max_steps:
            self._log_step(unread, loss, grad_norm, seconds)

    def _read_unread(self) -> None:
        """Read the step still on the device, if any (before anything that must follow its record)."""
        if self._unread is not None:
            unread, self._unread = self._unread, None
            self._read(unread)

    def _log_step(self, unread: _Unread, loss: float, grad_norm: float, seconds: float) -> None:
        tokens = self.batcher.global_batch * self.seq_len
        tokens_per_s = tokens / max(seconds, 1e-9)
        per_device = tokens_per_s / self.d.world_size
        flops = self.spec.flops_per_token(self.seq_len) * per_device
        flops_with_output = self.spec.flops_per_token_with_output(self.seq_len) * per_device
        peak = peak_flops(self.d.device, self.mixed_precision)
        peaks = self._gather_peak_memory()
        self.metrics.step(
            StepRecord(
                step=unread.step,
                loss=loss,
                lr=unread.lr,
                grad_norm=grad_norm,
                tokens_per_s=tokens_per_s,
                tokens_per_s_per_device=per_device,
                tflops_per_device=flops / 1e12,
                mfu=flops / peak if peak else None,
                mfu_with_output=flops_with_output / peak if peak else None,
                peak_memory_bytes=max(peaks),
                peak_memory_bytes_per_rank=tuple(peaks),
                step_time_s=seconds,
                tokens_seen=unread.tokens_seen,
                samples_consumed=unread.samples_consumed,
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
        self._clock = _StepClock(self.d.device)
        while state.step < self.max_steps:
            watchdog.step_starts(state.step + 1)
            self.hooks.before_step(state.step + 1, self.d.rank)
            local_loss, grad_norm, lr = self.train_step(state)
            loss_sum = self._queue_loss_sum(local_loss)
            ended = self._clock.mark()
            stop = self._stop_agreed()
            state.step += 1
            watchdog.step_done(state.step)
            state.samples_consumed += self.batcher.global_batch
            state.tokens_seen += self.batcher.global_batch * self.seq_len
            # This step is queued: the one before it is done or nearly, so reading it now keeps
            # the device busy (on CPU, where nothing is queued, this step is read at once).
            self._read_unread()
            self._unread = _Unread(state.step, loss_sum, grad_norm, lr, state.tokens_seen, state.samples_consumed,
                                   ended=ended)
            validating = bool(self.val_every and state.step % self.val_every == 0)
            saving = bool(self.checkpoint_every and state.step % self.checkpoint_every == 0)
            if not self.read_late or validating or saving or stop:
                self._read_unread()
            if validating:
                with watchdog.allowance(Phase.VALIDATION):
                    val_loss = self.validate()
                self.metrics.event(
                    TrainerEvent.VALIDATION, f"step {state.step} val_loss {val_loss:.4f} ppl {math.exp(min(val_loss, 50)):.2f}",
                    step=state.step, val_loss=val_loss, val_perplexity=math.exp(min(val_loss, 50)),
                )
            self.checkpointer.poll()
            if stop:
                return self._stop_and_save(state)
            if self.snapshots is not None and self.snapshots.due(state.step):
                with watchdog.allowance(Phase.CHECKPOINT):
                    self.snapshots.take(state)
                self._clock.restart()
            if saving:
                with watchdog.allowance(Phase.CHECKPOINT):
                    self.checkpointer.save(state)
            if validating or saving:
                self._clock.restart()  # the next step's time leaves that work out
        self._read_unread()
        with watchdog.allowance(Phase.CHECKPOINT):
            self._snapshot_done()
            self.checkpointer.wait()
            if self.checkpoints and self.checkpointer.last_saved_step != state.step:
                self.checkpointer.save(state)
                self.checkpointer.wait()
        self.hooks.on_end(self, state)
        return 0

    def _snapshot_done(self) -> None:
        """The snapshot in flight handed over, on every rank before it leaves the loop: its
        save's collectives need them all."""
        if self.snapshots is not None:
            self.snapshots.wait()

    def _stop_and_save(self, state: TrainState) -> int:
        name = self.stop.signal_name or "a signal on another rank"
        self._snapshot_done()
        if self.checkpoints:
            self.metrics.event(TrainerEvent.SIGNAL_RECEIVED, f"{name} received: saving at step {state.step}", step=state.step, signal=name)
            with self.watchdog.allowance(Phase.CHECKPOINT):
                if self.checkpointer.last_saved_step != state.step:
                    self.checkpointer.save(state)
                self.checkpointer.wait()
            done = f"checkpoint saved at step {state.step}"
        else:  # a requeue starts over
            self.metrics.event(
                TrainerEvent.SIGNAL_RECEIVED, f"{name} received at step {state.step}: nothing saved (--no-checkpoints)",
                step=state.step, signal=name,
            )
            done = "no checkpoint"
        self.metrics.event(
            TrainerEvent.EXIT, f"{done}; exiting {REQUEUE_EXIT_CODE} (please requeue)",
            step=state.step, exit_code=REQUEUE_EXIT_CODE, requeue=True,
        )
        self.metrics.request_requeue()
        return REQUEUE_EXIT_CODE
