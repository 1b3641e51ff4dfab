"""DCP sharded checkpoints of the whole training state, and the glue to the shared pointer
rules in hyperlaunch.core.checkpoints (the only place that knows names and completeness) and
hyperlaunch.core.checkpoint_pruning (the only one that knows what pruning removes).

Order of a save: remove a stale directory of the same name, check the filesystem has room for
one more checkpoint, write hyperlaunch.json, write the shards, DCP writes `.metadata` last (the
checkpoint is now complete on every rank), then rank 0 moves the pointer atomically and prunes.
An async save moves the pointer when its future is done. A save without room, or one that meets
ENOSPC, removes what it wrote and ends the trainer with DiskFull (hyperlaunch.core.disk_space).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shlex
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse
from torch.distributed.checkpoint.storage import StorageReader
from torch.optim.lr_scheduler import LRScheduler

from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core import disk_space
from hyperlaunch.core.checkpoint_pruning import remove_checkpoint
from hyperlaunch.core.errors import CheckpointError, CheckpointTorn, DiskFull
from hyperlaunch.core.metrics_records import TrainerEvent
from hyperlaunch.core.models import ModelSpec
from hyperlaunch.runtime.checkpoint import commit
from hyperlaunch.runtime.snapshots import background_stager

from .distributed import Dist
from .hooks import NO_HOOKS, TrainerHooks
from .load_errors import load_failure
from .metrics import MetricsLog
from .optim import follow_schedule
from .periodic_export import PeriodicExport
from .state import TrainState


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
    """FileSystemWriter that calls the hooks' after_shards_written between the shards and the
    `.metadata` file DCP writes last (the completion marker)."""

    def __init__(self, path: Path, step: int, hooks: TrainerHooks) -> None:
        super().__init__(str(path), single_file_per_rank=True, sync_files=True)
        self._step = step
        self._hooks = hooks

    def finish(self, metadata: Any, results: Any) -> None:
        self._hooks.after_shards_written(self._step)
        super().finish(metadata, results)


@dataclass
class _Save:
    """A save in flight, and what it has cost the training loop so far."""

    step: int
    path: Path
    started: float
    """perf_counter() when save() was called."""
    blocked_s: float = 0.0
    """Seconds the loop waited: the save() call itself, plus (async) waiting for the copy of
    the state before the next optimizer step."""
    written: float | None = None
    """perf_counter() when the last byte was written (async: set by the writer thread)."""
    upload: Future[Any] | None = None
    needed_bytes: int = 0
    """What rank 0 expected it to take (every rank names the same figure if it fails)."""


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
        hooks: TrainerHooks = NO_HOOKS,
        export_info: dict[str, object] | None = None,
        exports: PeriodicExport | None = None,
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
        self.hooks = hooks
        self.export_info = export_info or {}
        """Recorded in each checkpoint's hyperlaunch.json: what an export needs (the Hugging
        Face config, the tokenizer) without the job that wrote it."""
        self.exports = exports
        self._pending: _Save | None = None
        self._staging: Future[Any] | None = None
        self._stager = background_stager() if async_save else None
        self.last_saved_step: int | None = None
        self._checkpoint_bytes: int | None = None
        """The size of this run's last complete checkpoint (rank 0): what the next one needs."""

    # -- saving -----------------------------------------------------------------------------

    def info(self, step: int) -> dict[str, object]:
        """What a checkpoint of `step` records in its hyperlaunch.json."""
        return {"model": self.spec.name, "step": step, "world_size": self.d.world_size, "architecture": architecture(self.spec), **self.export_info}

    def state(self, train: TrainState) -> dict[str, Any]:
        """The whole training state at `train.step`, as a checkpoint holds it (every rank
        gathers every rank's RNG state: a collective)."""
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
        """Save at `train.step`; returns once complete (sync) or once the copy of the state is
        under way (async: call before_update() before the optimizer changes the state)."""
        started = time.perf_counter()
        self.wait()  # one save in flight at a time
        step = train.step
        path = rules.checkpoint_path(self.ckpt_dir, self.spec.name, step)
        needed = self._needed_bytes() if self.d.is_main else 0
        verdict: list[Any] = [None, needed]  # (DiskFull or another error's text) and the size
        if self.d.is_main:
            verdict[0] = self._prepare(path, step, needed)
        # Rank 0's verdict and size reach every rank (and none goes on before its folder
        # exists): a rank that raised alone would leave the others waiting in the collectives.
        dist.broadcast_object_list(verdict, src=0)
        if verdict[0] is not None:
            full, text = verdict[0]
            raise DiskFull(text) if full else RuntimeError(text)
        state = self.state(train)
        self.metrics.event(TrainerEvent.CHECKPOINT_SAVING, f"saving checkpoint {path.name}", step=step, path=str(path))
        writer = _Writer(path, step, self.hooks)
        save = _Save(step=step, path=path, started=started, needed_bytes=int(verdict[1]))
        if self.async_save:
            response = dcp.async_save(
                state, storage_writer=writer, process_group=self.d.checkpoint_group, async_stager=self._stager
            )
            if isinstance(response, AsyncSaveResponse):
                save.upload, self._staging = response.upload_completion, response.staging_completion
            else:
                save.upload = response
            save.upload.add_done_callback(lambda _: setattr(save, "written", time.perf_counter()))
            save.blocked_s = time.perf_counter() - save.started
            self._pending = save
            return
        try:
            dcp.save(state, storage_writer=writer)
        except BaseException as err:  # DCP's CheckpointException is a BaseException
            self._raise_failed_save(err, save)
            raise
        save.written = time.perf_counter()
        save.blocked_s = save.written - save.started
        self._complete(save)
        dist.barrier()  # every rank knows the pointer moved before anything else happens
        self.hooks.after_checkpoint(step)

    def _needed_bytes(self) -> int:
        """What the next checkpoint takes: the last one's size, else the fp32 weights and
        AdamW's two moments for each parameter (a DTensor's numel() is the whole tensor's)."""
        if self._checkpoint_bytes is not None:
            return self._checkpoint_bytes
        return disk_space.CHECKPOINT_BYTES_PER_PARAM * sum(p.numel() for p in self.model.parameters())

    def _room_hint(self) -> str:
        job = disk_space.job_reference(os.environ)
        # By folder and name, not job: a sweep element's id (42_3) is no recorded job.
        prune = f"hyperlaunch checkpoints --checkpoint-dir {shlex.quote(str(self.ckpt_dir))} --model {self.spec.name} --prune N --yes"
        kept = (
            f"; every checkpoint is kept: '{prune}' removes all but the newest N, and -- --keep-last N keeps fewer"
            if self.keep_last == 0 else ""
        )
        return f"free space there, then 'hyperlaunch resume {job}'{kept}"

    def _disk_full(self, err: BaseException, what: str, needed: int | None = None) -> DiskFull | None:
        """`err` as the DiskFull of this checkpoint folder, or None when no full disk is behind it."""
        return disk_space.disk_full_error(err, self.ckpt_dir, what, needed=needed, hint=self._room_hint())

    def _prepare(self, path: Path, step: int, needed: int) -> tuple[bool, str] | None:
        """Rank 0, before a save: clear a stale folder of that name, check the room, create the
        folder and its hyperlaunch.json. None when done, else (a full disk?, the one line):
        whatever fails here (a quota or no inodes left despite free bytes, a folder that cannot
        be removed) must reach the other ranks, not leave them waiting."""
        try:
            self._clear_stale(path)
            disk_space.check_room(self.ckpt_dir, needed, f"checkpoint {path.name}", hint=self._room_hint())
            path.mkdir(parents=True, exist_ok=True)
            rules.write_info(path, self.info(step))
        except DiskFull as err:
            return True, err.one_line()
        except OSError as err:
            full = self._disk_full(err, f"saving checkpoint {path.name}", needed)
            if full is not None:
                self._clear_stale(path)
                return True, full.one_line()
            return False, f"preparing checkpoint {path.name} failed on rank 0: {type(err).__name__}: {err}"
        return None

    def _raise_failed_save(self, err: BaseException, save: _Save) -> None:
        """A save that failed on ENOSPC/EDQUOT on any rank becomes DiskFull; rank 0 removes
        what was written (every rank's writing has ended when DCP reports a failure). Another
        failure DCP reports (its CheckpointException is a BaseException, which the trainer's
        failure record would miss) becomes a RuntimeError naming the rank and the error."""
        full = self._disk_full(err, f"saving checkpoint {save.path.name}", save.needed_bytes)
        if full is not None:
            if self.d.is_main:
                self._clear_stale(save.path)
            raise full from None
        failures = disk_space.rank_failures(err)
        if failures:
            rank = min(failures)
            first = failures[rank]
            raise RuntimeError(f"saving checkpoint {save.path.name} failed on rank {rank}: {type(first).__name__}: {first}") from err

    def _clear_stale(self, path: Path) -> None:
        # A directory with this name is left over from a run that went further before crashing
        # (or a killed save). Its completion marker goes first (remove_checkpoint): a crash
        # while rewriting it must never leave old metadata beside new shards.
        if path.exists():
            remove_checkpoint(path)

    def _complete(self, save: _Save) -> None:
        step, path = save.step, save.path
        self.last_saved_step = step
        if not self.d.is_main:
            return
        # An export still reading an older checkpoint ends before pruning can remove it.
        export_blocked_s = self.exports.finish() if self.exports is not None else 0.0
        self._checkpoint_bytes = rules.dir_size(path)
        # One commit for the trainer and scripts alike (hyperlaunch.runtime.checkpoint): the
        # pointer moves, the attempt's progress is recorded, older checkpoints are pruned.
        try:
            removed = commit(self.ckpt_dir, self.spec.name, path, step, self.metrics.run_dir, self.keep_last)
        except OSError as err:  # the pointer or the progress record: a few bytes, on a full disk
            full = self._disk_full(err, f"committing checkpoint {path.name}")
            if full is None:
                raise
            raise full from None
        written = save.written if save.written is not None else time.perf_counter()
        self.metrics.event(
            TrainerEvent.CHECKPOINT_COMPLETED, f"checkpoint {path.name} complete; pointer moved", step=step, path=str(path),
            blocked_s=save.blocked_s, seconds=written - save.started, bytes=self._checkpoint_bytes,
            mode="async" if self.async_save else "sync", export_blocked_s=export_blocked_s,
        )
        for old in removed:
            self.metrics.event(TrainerEvent.CHECKPOINT_PRUNED, f"removed old checkpoint {old.name}", path=str(old))
        if self.exports is not None:
            self.exports.after_commit(step, path)

    def before_update(self) -> None:
        """Before the optimizer changes parameters and its state: wait until an async save
        has finished copying them (usually long done; counted as blocked time if not)."""
        if self._staging is None:
            return
        waited = time.perf_counter()
        self._staging.result()
        self._staging = None
        if self._pending is not None:
            self._pending.blocked_s += time.perf_counter() - waited

    def poll(self) -> None:
        """Finish an async save whose writing is done, report an export that ended (non-blocking)."""
        if self.exports is not None:
            self.exports.poll()
        upload = self._pending.upload if self._pending is not None else None
        # Only a save that succeeded: a failed one is raised by the wait() every rank reaches
        # at the same step (the next save, the end), not by whichever rank polls it first while
        # the others go on into the next step's collectives.
        if upload is not None and upload.done() and upload.exception() is None:
            self.wait()

    def wait(self) -> None:
        """Block until an async save in flight is complete, then move the pointer."""
        if self._pending is None:
            return
        save, self._pending, self._staging = self._pending, None, None
        assert save.upload is not None
        try:
            save.upload.result()
        except BaseException as err:
            self._raise_failed_save(err, save)
            raise
        self._complete(save)
        self.hooks.after_checkpoint(save.step)

    def close(self) -> None:
        """Wait for an export in flight; release the async copy buffers and their thread."""
        if self.exports is not None:
            self.exports.finish()
        if self._stager is not None:
            self._stager.close()
            self._stager = None

    # -- loading ----------------------------------------------------------------------------

    def load(self, path: Path) -> TrainState:
        """The training state of the checkpoint `path`. A checkpoint torn since its commit
        (its manifest's sizes and checksums, checked first; or a load that fails in its files)
        raises CheckpointTorn, which the supervisor sets aside; another model's, CheckpointError."""
        problems = integrity.verify(path)
        if problems:
            raise CheckpointTorn(path.name, integrity.torn_text(path, problems), file=problems[0].file)
        info = rules.read_info(path) or {}
        recorded = info.get("architecture")
        if recorded is not None and recorded != architecture(self.spec):
            raise CheckpointError(
                f"checkpoint {path} has another architecture than model {self.spec.name!r}"
            )
        try:
            train = self.load_state(FileSystemReader(str(path)))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as err:  # DCP's CheckpointException is a BaseException
            typed = load_failure(path, err)
            if typed is None:
                raise
            raise typed from err
        self.last_saved_step = train.step
        if self.d.is_main:  # only rank 0 checks the room (and tells the others)
            self._checkpoint_bytes = rules.dir_size(path)
        return train

    def empty_state(self) -> dict[str, Any]:
        """The state a load fills in: this run's model and optimizer shards, and placeholders."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, "scheduler": "", "train": "", "rng": b""}

    def load_state(self, reader: StorageReader, state: dict[str, Any] | None = None) -> TrainState:
        """Load the training state `reader` holds (a checkpoint folder's, a memory snapshot's)
        into the model, optimizer, schedule and RNG; `state`: the empty state, made already."""
        state = self.empty_state() if state is None else state
        dcp.load(state, storage_reader=reader)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.scheduler.load_state_dict(json.loads(_as_text(state["scheduler"])))
        follow_schedule(self.scheduler)
        saved = json.loads(_as_text(state["train"]))
        self._restore_rng(_as_bytes(state["rng"]), int(saved["world_size"]))
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
