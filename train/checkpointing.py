"""DCP sharded checkpoints of the whole training state, and the glue to the shared pointer
rules in hyperlaunch.checkpoints (the only place that knows names, completeness and pruning).

Order of a save: remove a stale directory of the same name, write hyperlaunch.json, write the
shards, DCP writes `.metadata` last (the checkpoint is now complete on every rank), then rank 0
moves the pointer atomically and prunes. An async save moves the pointer when its future is done.
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.optim.lr_scheduler import LRScheduler

from hyperlaunch import checkpoints as rules
from hyperlaunch.errors import CheckpointError
from hyperlaunch.models import ModelSpec

from . import testing_hooks
from .distributed import Dist
from .metrics import MetricsLog


@dataclass
class TrainState:
    """Progress that must survive a restart, in global terms (independent of world size)."""

    step: int = 0
    tokens_seen: int = 0
    samples_consumed: int = 0


def architecture(spec: ModelSpec) -> dict[str, object]:
    """What must match for a checkpoint to load into this model."""
    return {
        "kind": spec.kind,
        "hidden_size": spec.hidden_size,
        "num_layers": spec.num_layers,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings,
    }


class _Writer(FileSystemWriter):
    """FileSystemWriter with the test hook between the shards and the `.metadata` file."""

    def __init__(self, path: Path, step: int) -> None:
        super().__init__(str(path), single_file_per_rank=True, sync_files=True)
        self._step = step

    def finish(self, metadata: Any, results: Any) -> None:
        testing_hooks.kill_during_save(self._step)
        super().finish(metadata, results)


def _rng_snapshot(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


class Checkpointer:
    def __init__(
        self,
        *,
        ckpt_dir: Path,
        spec: ModelSpec,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: LRScheduler,
        dist_info: Dist,
        metrics: MetricsLog,
        keep_last: int,
        async_save: bool,
    ) -> None:
        self.ckpt_dir = Path(ckpt_dir)
        self.spec = spec
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.d = dist_info
        self.metrics = metrics
        self.keep_last = keep_last
        self.async_save = async_save
        self._pending: tuple[Future[Any], int, Path] | None = None
        self.last_saved_step: int | None = None

    # -- saving -----------------------------------------------------------------------------

    def _state(self, train: TrainState) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        # Every rank's RNG state, gathered so any rank count can read it back as one object.
        rng_all: list[Any] = [None] * self.d.world_size
        dist.all_gather_object(rng_all, _rng_snapshot(self.d.device))
        return {
            "model": model_sd,
            "optim": optim_sd,
            "scheduler": json.dumps(self.scheduler.state_dict()),
            "train": json.dumps({**asdict(train), "world_size": self.d.world_size, "model": self.spec.name}),
            "rng": pickle.dumps(rng_all),
        }

    def save(self, train: TrainState) -> None:
        """Save at `train.step`; returns once complete (sync) or once staged (async)."""
        self.wait()  # one save in flight at a time
        step = train.step
        path = rules.checkpoint_path(self.ckpt_dir, self.spec.name, step)
        if self.d.is_main:
            self._clear_stale(path)
            path.mkdir(parents=True, exist_ok=True)
            rules.write_info(
                path,
                {"model": self.spec.name, "step": step, "world_size": self.d.world_size,
                 "architecture": architecture(self.spec)},
            )
        dist.barrier()
        state = self._state(train)
        self.metrics.event("checkpoint_saving", f"saving checkpoint {path.name}", step=step, path=str(path))
        writer = _Writer(path, step)
        if self.async_save:
            future = dcp.async_save(state, storage_writer=writer, process_group=self.d.checkpoint_group)
            self._pending = (future, step, path)
            return
        dcp.save(state, storage_writer=writer)
        self._complete(step, path)
        dist.barrier()  # every rank knows the pointer moved before anything else happens
        testing_hooks.kill_after_checkpoint(step)

    def _clear_stale(self, path: Path) -> None:
        # A directory with this name is left over from a run that went further before crashing
        # (or a killed save). Drop its completion marker first: a crash while rewriting it
        # must never leave old metadata beside new shards.
        if path.exists():
            (path / rules.METADATA_FILE).unlink(missing_ok=True)
            shutil.rmtree(path)

    def _complete(self, step: int, path: Path) -> None:
        self.last_saved_step = step
        if not self.d.is_main:
            return
        rules.write_pointer(self.ckpt_dir, self.spec.name, path.name)
        self.metrics.event("checkpoint_completed", f"checkpoint {path.name} complete; pointer moved", step=step, path=str(path))
        for removed in rules.prune(self.ckpt_dir, self.spec.name, self.keep_last):
            self.metrics.event("checkpoint_pruned", f"removed old checkpoint {removed.name}", path=str(removed))

    def poll(self) -> None:
        """Finish an async save whose writing is done (non-blocking)."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        """Block until an async save in flight is complete, then move the pointer."""
        if self._pending is None:
            return
        future, step, path = self._pending
        self._pending = None
        future.result()
        self._complete(step, path)
        testing_hooks.kill_after_checkpoint(step)

    # -- loading ----------------------------------------------------------------------------

    def load(self, path: Path) -> TrainState:
        info = rules.read_info(path) or {}
        recorded = info.get("architecture")
        if recorded is not None and recorded != architecture(self.spec):
            raise CheckpointError(
                f"checkpoint {path} has another architecture than model {self.spec.name!r}"
            )
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd, "scheduler": "", "train": "", "rng": b""}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.scheduler.load_state_dict(json.loads(_as_text(state["scheduler"])))
        saved = json.loads(_as_text(state["train"]))
        self._restore_rng(_as_bytes(state["rng"]), int(saved["world_size"]))
        self.last_saved_step = int(saved["step"])
        return TrainState(
            step=int(saved["step"]),
            tokens_seen=int(saved["tokens_seen"]),
            samples_consumed=int(saved["samples_consumed"]),
        )

    def _restore_rng(self, blob: bytes, saved_world: int) -> None:
        states = pickle.loads(blob)
        if saved_world != self.d.world_size:
            # Another rank count: per-rank streams cannot map one to one. Nothing in these
            # models is random after init (no dropout), so a fresh seed loses nothing.
            torch.manual_seed(1_000_003 * (self.d.rank + 1) + saved_world)
            return
        mine = states[self.d.rank]
        torch.set_rng_state(mine["cpu"])
        if "cuda" in mine and self.d.device.type == "cuda":
            torch.cuda.set_rng_state(mine["cuda"], self.d.device)


def _as_text(value: Any) -> str:
    if isinstance(value, io.BytesIO):
        return value.getvalue().decode()
    return str(value)


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, io.BytesIO):
        return value.getvalue()
    return bytes(value)
