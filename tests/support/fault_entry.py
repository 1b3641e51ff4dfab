"""The trainer as the fault tests run it: `python -m tests.support.fault_entry ARGS` (or
`torchrun ... -m tests.support.fault_entry ARGS`) is `python -m hyperlaunch.train ARGS`
with hooks that break things the way the tests ask, through environment variables production
never sets. Each kill is a SIGKILL, as a node failure would be: no cleanup.

The crash and the hang fire once per job, not once per process: the process that fires creates
a key file (`.hyperlaunch-test-fault-<what>`) in HYPERLAUNCH_TEST_FAULT_KEYS (default: the run
dir) first, and a process that finds it there does not fire again, so the restarted trainers
of a job (a requeue, or a re-run of the step inside the same Slurm attempt) can finish.

- HYPERLAUNCH_TEST_KILL_AFTER_CHECKPOINT=N: every rank dies once checkpoint N is complete and
  the pointer names it.
- HYPERLAUNCH_TEST_TEAR_AFTER_CHECKPOINT=N[,M:silent...]: once checkpoint N is complete, rank 0
  tears it and every rank dies, once (keyed), as a disk or an interrupted copy would leave it:
  `N` cuts its first shard to half its size (its manifest still says the whole size); `N:silent`
  writes zeros over the shard's bytes, keeping its size, and removes the manifest, so that only
  loading it finds it torn.
- HYPERLAUNCH_TEST_KILL_DURING_SAVE=N: die after the shards of checkpoint N are written, before
  its `.metadata` completion marker exists.
- HYPERLAUNCH_TEST_FILL_DISK_DURING_SAVE=N with HYPERLAUNCH_TEST_FILL_FILE=FILE: once the
  shards of checkpoint N are written, rank 0 writes zeros into FILE until its filesystem is
  full, as another writer on shared storage would: the save's last writes meet ENOSPC.
- HYPERLAUNCH_TEST_DENY_SAVE=N: once the shards of checkpoint N are written, rank 0 raises
  PermissionError, as a folder whose permissions changed under the job would.
- HYPERLAUNCH_TEST_CRASH_AT_STEP=N (HYPERLAUNCH_TEST_CRASH_RANK, default 1): that rank raises
  before step N - a crashed rank on a healthy node - only in the Slurm attempt given by
  HYPERLAUNCH_TEST_CRASH_ATTEMPT (default 0), and once (keyed); with HYPERLAUNCH_TEST_CRASH_TASK=I,
  only in a sweep's element I (SLURM_ARRAY_TASK_ID).
- HYPERLAUNCH_TEST_RAISE_AT_STEP=N (HYPERLAUNCH_TEST_CRASH_RANK, default 1): that rank raises
  ValueError before step N every time it gets there, unkeyed: a bad batch or a bug in the code,
  which no restart fixes.
- HYPERLAUNCH_TEST_HANG_AT_STEP=N (HYPERLAUNCH_TEST_HANG_RANK, default 1): that rank sleeps
  forever before step N, once (keyed): a hung rank, the others blocked in its collective.
- HYPERLAUNCH_TEST_STEP_SECONDS=S: sleep S seconds in every step, so a run outlasts a time limit
  or a kill lands between two steps whatever the machine's speed.
- HYPERLAUNCH_TEST_PAUSE_FILE=FILE: before every step, wait while FILE exists, so a test holds a
  job RUNNING for as long as its checks take, however slow the machine (keep it well under the
  hang watchdog's floor).
- HYPERLAUNCH_TEST_PROBE=FILE: a saved LongTensor batch; loss and logits on it at the start and
  the end are written by rank 0 to FILE.out.pt (compared with plain transformers).
- HYPERLAUNCH_TEST_READ_LATE=1: read each step's figures once the next step is queued, as
  on a GPU, so the CPU tests cover the path GPU runs take.
- HYPERLAUNCH_TEST_RECORD_SAMPLES=FILE: every rank appends to FILE.<rank> one JSON line per
  step: the samples consumed before it, and the sequence number and a digest of the tokens of
  each sequence the rank trains on (to prove no sample is skipped or repeated)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hyperlaunch.job.trainer_args import value_of
from hyperlaunch.train.hooks import TrainerHooks
from hyperlaunch.train.train import entry

if TYPE_CHECKING:
    from hyperlaunch.train.hooks import TrainerView
    from hyperlaunch.train.state import TrainState

MODULE = "tests.support.fault_entry"


def _int(name: str, default: int | None = None) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else default


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _fill(path: Path) -> None:
    """Write zeros into `path` until its filesystem has no room left."""
    block = bytes(1 << 16)
    with open(path, "wb", buffering=0) as file:
        try:
            while True:
                file.write(block)
        except OSError:
            pass
    with open(path, "ab", buffering=0) as file:  # the last partial block's room too
        try:
            while True:
                file.write(b"\0")
        except OSError:
            pass


class FaultHooks(TrainerHooks):
    def __init__(self) -> None:
        self.kill_after_checkpoint = _int("HYPERLAUNCH_TEST_KILL_AFTER_CHECKPOINT")
        self.kill_during_save = _int("HYPERLAUNCH_TEST_KILL_DURING_SAVE")
        self.tear_after_checkpoint = {
            int(step): mode for step, _, mode in (item.partition(":") for item in os.environ.get("HYPERLAUNCH_TEST_TEAR_AFTER_CHECKPOINT", "").split(",") if item)
        }
        self.fill_disk_during_save = _int("HYPERLAUNCH_TEST_FILL_DISK_DURING_SAVE")
        self.fill_file = os.environ.get("HYPERLAUNCH_TEST_FILL_FILE") or None
        self.deny_save = _int("HYPERLAUNCH_TEST_DENY_SAVE")
        self.crash_at_step = _int("HYPERLAUNCH_TEST_CRASH_AT_STEP")
        self.crash_rank = _int("HYPERLAUNCH_TEST_CRASH_RANK", 1)
        self.crash_attempt = _int("HYPERLAUNCH_TEST_CRASH_ATTEMPT", 0)
        self.crash_task = _int("HYPERLAUNCH_TEST_CRASH_TASK")
        self.raise_at_step = _int("HYPERLAUNCH_TEST_RAISE_AT_STEP")
        self.hang_at_step = _int("HYPERLAUNCH_TEST_HANG_AT_STEP")
        self.hang_rank = _int("HYPERLAUNCH_TEST_HANG_RANK", 1)
        self.fault_keys = os.environ.get("HYPERLAUNCH_TEST_FAULT_KEYS") or None
        self.step_seconds = float(os.environ.get("HYPERLAUNCH_TEST_STEP_SECONDS") or 0)
        self.pause_file = os.environ.get("HYPERLAUNCH_TEST_PAUSE_FILE") or None
        self.probe = os.environ.get("HYPERLAUNCH_TEST_PROBE") or None
        self.record_samples = os.environ.get("HYPERLAUNCH_TEST_RECORD_SAMPLES") or None
        self.read_late = os.environ.get("HYPERLAUNCH_TEST_READ_LATE") == "1"

    def _fire_once(self, name: str) -> bool:
        """Whether this process is the first of the job to reach fault `name`: it creates the
        fault's key file, atomically, and only one process ever can."""
        assert self.fault_keys is not None, "on_start sets the key folder before any step"
        try:
            os.close(os.open(Path(self.fault_keys, f".hyperlaunch-test-fault-{name}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return False
        return True

    def before_step(self, step: int, rank: int) -> None:
        attempt = _int("SLURM_RESTART_COUNT", 0)
        if (
            step == self.crash_at_step and rank == self.crash_rank and attempt == self.crash_attempt
            and self.crash_task in (None, _int("SLURM_ARRAY_TASK_ID"))
            and self._fire_once(f"crash-at-step-{step}-rank-{rank}")
        ):
            raise RuntimeError(f"injected failure at step {step} on rank {rank}")
        if step == self.raise_at_step and rank == self.crash_rank:
            raise ValueError(f"a bad batch at step {step}")
        if step == self.hang_at_step and rank == self.hang_rank and self._fire_once(f"hang-at-step-{step}-rank-{rank}"):
            while True:  # stuck without holding the GIL, as on a stalled file system or a lost peer
                time.sleep(3600)
        if self.step_seconds:
            time.sleep(self.step_seconds)
        while self.pause_file is not None and os.path.exists(self.pause_file):
            time.sleep(0.2)

    def after_shards_written(self, step: int) -> None:
        if step == self.kill_during_save:
            _die()
        if step == self.fill_disk_during_save and self.fill_file is not None:
            _fill(Path(self.fill_file))
        if step == self.deny_save:
            raise PermissionError(13, "Permission denied", ".metadata")

    def after_checkpoint(self, step: int) -> None:
        if step == self.kill_after_checkpoint:
            _die()
        if step in self.tear_after_checkpoint:
            self._tear(step, self.tear_after_checkpoint[step])

    def _tear(self, step: int, mode: str) -> None:
        import torch
        import torch.distributed as dist

        rank = dist.get_rank()
        fire = torch.tensor([int(rank == 0 and self._fire_once(f"tear-after-checkpoint-{step}"))])
        dist.broadcast(fire, 0)  # every rank dies, or none: the tear happens once per job
        if not fire.item():
            return
        if rank == 0:
            checkpoint_dir = value_of(sys.argv, "--checkpoint-dir")  # the job writes it on every trainer's command line
            assert checkpoint_dir is not None
            (path,) = Path(checkpoint_dir).glob(f"*-{step}steps")
            shard = sorted(path.glob("*.distcp"))[0]
            size = shard.stat().st_size
            if mode == "silent":
                with open(shard, "r+b") as file:
                    file.write(bytes(size))
                (path / ".hyperlaunch-files.json").unlink()
            else:
                os.truncate(shard, size // 2)
        dist.barrier()
        _die()

    def on_start(self, trainer: TrainerView, state: TrainState) -> None:
        if self.read_late:
            trainer.read_late = True  # type: ignore[misc]  # the view is read-only for hooks; this one is a test's
        if self.fault_keys is None:
            self.fault_keys = str(trainer.run_dir)
        self._probe(trainer, state, "start")
        if self.record_samples:
            _record_samples(trainer, Path(f"{self.record_samples}.{trainer.rank}"))

    def on_end(self, trainer: TrainerView, state: TrainState) -> None:
        self._probe(trainer, state, "end")

    def _probe(self, trainer: TrainerView, state: TrainState, when: str) -> None:
        if self.probe is None:
            return
        import torch
        import torch.distributed as dist

        trainer.model.eval()
        with torch.no_grad():
            batch = torch.load(self.probe).to(trainer.device)
            out = trainer.model(input_ids=batch, labels=batch)
        if trainer.is_main:
            result_path = Path(self.probe + ".out.pt")
            results = torch.load(result_path) if result_path.exists() else {}
            results[when] = {"loss": float(out.loss), "logits": out.logits.float().cpu(), "step": state.step}
            torch.save(results, result_path)
        dist.barrier()


def _record_samples(trainer: TrainerView, path: Path) -> None:
    batcher = trainer.batcher
    read_step = batcher.step_batches

    def recording(samples_consumed: int):  # type: ignore[no-untyped-def]
        rows = [row for micro in batcher.step_rows(samples_consumed) for row in micro]
        batches = list(read_step(samples_consumed))
        digests = [hashlib.sha256(seq.numpy().tobytes()).hexdigest()[:16] for batch in batches for seq in batch]
        with path.open("a") as handle:
            handle.write(json.dumps({"samples_consumed": samples_consumed, "rows": rows, "digests": digests}) + "\n")
        yield from batches

    batcher.step_batches = recording  # type: ignore[method-assign]


if __name__ == "__main__":
    entry(hooks=FaultHooks())
