"""One line per logged step on rank 0's stdout, and the same as JSON in <run_dir>/metrics.jsonl,
together with events (resumed, checkpoint saved/completed, signal received, exit). The records
and the file are hyperlaunch.core.metrics_records'; the CLI's `status` reads them from there."""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

from hyperlaunch.core.instances import peak_bf16_flops
from hyperlaunch.core.metrics_records import METRICS_FILE, EventRecord, StepRecord, TrainerEvent
from hyperlaunch.runtime import records

# Each record carries the Slurm job, attempt and round that wrote it (hyperlaunch.runtime.records).
_SLURM_TAGS: dict[str, Any] = records.job_tags()


def peak_flops(device: torch.device, mixed_precision: str) -> float | None:
    if device.type != "cuda" or mixed_precision != "bf16":
        return None
    return peak_bf16_flops(torch.cuda.get_device_name(device))


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated device memory on GPU; peak resident set size of the process on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class MetricsLog:
    """Writes only on rank 0; every other rank's calls are no-ops."""

    def __init__(self, run_dir: Path, enabled: bool) -> None:
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def _append(self, record: StepRecord | EventRecord) -> None:
        records.append_record(self.run_dir, record.to_json())

    def event(self, event: TrainerEvent, message: str, *, step: int | None = None, **details: Any) -> None:
        if not self.enabled:
            return
        print(f"[hyperlaunch.train] {message}", flush=True)
        self._append(
            EventRecord(event=event.value, message=message, time=time.time(), step=step, details=details, **_SLURM_TAGS)
        )

    def request_requeue(self) -> None:
        """Tell the supervisor this stop was a save, not a crash (torchrun reports both as
        exit code 1): the requeue-request file of this job attempt, see hyperlaunch.core.protocol."""
        if self.enabled:
            records.request_requeue(self.run_dir)

    def step(self, record: StepRecord) -> None:
        if not self.enabled:
            return
        print(format_step(record), flush=True)
        self._append(dataclasses.replace(record, time=time.time(), **_SLURM_TAGS))


def format_step(r: StepRecord) -> str:
    mfu = f"{r.mfu * 100:.1f}%" if r.mfu is not None else "n/a"
    mfu_with_output = f"{r.mfu_with_output * 100:.1f}%" if r.mfu_with_output is not None else "n/a"
    return (
        f"step {r.step} | loss {r.loss:.4f} | lr {r.lr or 0.0:.3e} | grad_norm {r.grad_norm:.3f} | "
        f"tok/s {r.tokens_per_s or 0.0:.0f} ({r.tokens_per_s_per_device:.0f}/dev) | "
        f"TFLOP/s/dev {r.tflops_per_device:.3f} | MFU {mfu} (with output {mfu_with_output}) | "
        f"peak_mem {r.peak_memory_bytes / 2**30:.2f} GiB"
    )


def warn(message: str) -> None:
    print(f"hyperlaunch.train: warning: {message}", file=sys.stderr, flush=True)
