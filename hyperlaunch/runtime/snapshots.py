"""Memory snapshots of a training's state, a rank's side (issue 48): every N steps each rank
hands its part of the whole state to its node's keeper (hyperlaunch.supervisor.keeper, which
outlives the trainer and replicates to its peer), and a round told to restore one
(core.script_env.RESTORE_ENV) loads it from the keepers instead of a disk checkpoint. The bundled
trainer and a script's `runtime.snapshot` / `runtime.restore_snapshot` both go through here.

A snapshot is a DCP save of the state (what `dcp.save` takes: a dict of Stateful objects and
tensors), into a folder of this rank's in node-local memory (/dev/shm): the rank's data file
(`__<rank>_0.distcp`) makes its part, and rank 0's holds the save's global `.metadata` too,
which the other ranks read from there when they restore. DCP saves what every rank holds alike (a schedule, the step, each optimizer step
count) once, on rank 0 (dedup to the lowest rank), so a rank restoring reads its own part whole
and, of rank 0's, only those items' bytes; the folder it loads from holds its own file and a
sparse copy of rank 0's with just those ranges. Same world, same shards: a round inside the
allocation (the same nodes, or a spare in a lost node's place) restores; another world size
reads the disk checkpoint.

torch is imported here, and this module only where a training takes or restores snapshots: the
rest of the runtime library stays standard library only (Python 3.8+)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, DefaultSavePlanner, FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.memory_snapshots import (
    PART_HEAD_BYTES,
    KeeperRefused,
    Layout,
    address,
    get_part,
    pack_files,
    parse_restore,
    piece_size,
    put_part,
    read_part_files,
    unpack_files,
)
from hyperlaunch.core.metrics_records import TrainerEvent
from hyperlaunch.core.script_env import RESTORE_ENV, SNAPSHOTS_ENV

METADATA = rules.METADATA_FILE
_DATA_FILE = re.compile(r"__([0-9]+)_0\.distcp")


class Events(Protocol):
    """Where a rank tells what befell its snapshots (the trainer's MetricsLog, the runtime's EventLog)."""

    def event(self, event: TrainerEvent, message: str, *, step: int | None = None, **details: Any) -> None: ...


def data_file(rank: int) -> str:
    return f"__{rank}_0.distcp"


def scratch_dir(job: str) -> Path:
    """Node-local memory for the folders a snapshot passes through (/dev/shm, else the temp dir)."""
    root = Path("/dev/shm") if os.path.isdir("/dev/shm") else Path(os.environ.get("TMPDIR", "/tmp"))
    return root / f"hyperlaunch-snapshots-{job or os.getpid()}"


def told_to_restore() -> tuple[int, dict[str, str], Layout] | None:
    """The snapshot this round restores (RESTORE_ENV): its step, the keeper holding each of its
    nodes' parts, the layout of the round that took it; None where it is told none."""
    return parse_restore(os.environ.get(RESTORE_ENV, ""))


class MemorySnapshots:
    """This rank's side of the snapshots: taking one every `every` steps, restoring one.

    A snapshot is taken off the critical path, as an async checkpoint is: its state is copied
    in a background thread (the next optimizer update waits for the copy: before_update), then
    written to node-local memory and handed to the keeper by one more thread, while training goes
    on. One snapshot is in flight at a time; the next waits for it. The background save's
    collectives run in a process group of their own (gloo), made by every rank at the first
    snapshot, so they never interleave with the training's."""

    def __init__(self, layout: Layout, every: int, rank: int, scratch: Path, events: Events) -> None:
        self.layout = layout
        self.every = every
        self.rank = rank
        self.scratch = scratch
        self.events = events
        self.node = layout.node_of(rank)
        self.failed = False
        """A snapshot was not kept (its save failed, its keeper refused or was not reached): this
        rank told so once; training goes on."""
        self._group: Any = None
        self._stager: DefaultStager | None = None
        self._staging: Future[Any] | None = None
        self._pending: Future[None] | None = None
        self._handover = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hyperlaunch-snapshot")

    @classmethod
    def of_this_round(cls, rank: int, events: Events, every: int = 0) -> MemorySnapshots | None:
        """This rank's snapshots where the job runs keepers (SNAPSHOTS_ENV says where) and the
        rank is in their layout, else None; taken every `every` steps, 0: the job's interval."""
        layout = Layout.from_json(os.environ.get(SNAPSHOTS_ENV, ""))
        if layout is None or layout.node_of(rank) is None:
            return None
        return cls(layout, every or layout.every, rank, scratch_dir(os.environ.get("SLURM_JOB_ID", "")), events)

    def due(self, step: int) -> bool:
        return bool(self.every) and step % self.every == 0

    def take(self, step: int, state: dict[str, Any], files: Mapping[str, bytes] | None = None, overlap_copy: bool = False) -> float:
        """Start the snapshot of `state` at `step` (every rank, at the same step), with rank 0's
        extra `files` beside the save's; the seconds training was held. With `overlap_copy` the
        copy of the state may go on after this returns: call before_update() before anything
        changes the state; without, it is done when this returns."""
        started = time.perf_counter()
        self.wait()
        folder = self.scratch / f"take-{self.rank}"
        shutil.rmtree(folder, ignore_errors=True)
        writer = FileSystemWriter(str(folder), single_file_per_rank=True, sync_files=False, thread_count=1)
        if self._stager is None:
            self._stager = background_stager()
            self._group = dist.new_group(backend="gloo") if dist.is_initialized() else None
        response = dcp.async_save(
            state, storage_writer=writer, planner=DefaultSavePlanner(dedup_save_to_lowest_rank=True),
            process_group=self._group, async_stager=self._stager,
        )
        if isinstance(response, AsyncSaveResponse):
            self._staging, written = response.staging_completion, response.upload_completion
        else:
            written = response
        extra = dict(files or {}) if self.rank == 0 else {}
        self._pending = self._handover.submit(self._hand_over, step, written, folder, extra)
        if not overlap_copy:
            self.before_update()
        return time.perf_counter() - started

    def before_update(self) -> None:
        """Before anything changes the state (the optimizer's update): wait until the snapshot
        in flight has copied it."""
        staging, self._staging = self._staging, None
        if staging is not None:
            staging.result()

    def wait(self) -> None:
        """Until the snapshot in flight is with the keeper (or failed, told once)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Let go of the copy buffers and the thread; a snapshot still in flight is dropped (on
        every normal end the ranks wait() for it together first: its save has collectives)."""
        self._handover.shutdown(wait=False, cancel_futures=True)
        if self._stager is not None:
            self._stager.close()

    def _hand_over(self, step: int, written: Future[Any], folder: Path, files: dict[str, bytes]) -> None:
        """Once the save is written to node-local memory: its files, from there, to the keeper
        (by the kernel, never read into this process), then gone from node-local memory.
        Rank 0's part holds the save's `.metadata`, which restores read from it."""
        try:
            written.result()
            part: dict[str, bytes | Path] = {data_file(self.rank): folder / data_file(self.rank), **files}
            if self.rank == 0:
                part[METADATA] = folder / METADATA
            if self.node is not None:
                head = pack_files({name: piece_size(data) for name, data in part.items()})
                put_part(address(self.layout.keepers[self.node]), self.node, step, self.rank, self.layout.ranks_of[self.node], head, *part.values())
        except BaseException as error:  # noqa: BLE001 - DCP's CheckpointException too: the snapshot is lost, training goes on
            if not self.failed:
                self.events.event(
                    TrainerEvent.MEMORY_SNAPSHOT_FAILED, f"memory snapshot of step {step} not kept: {error}; disk checkpoints go on",
                    step=step,
                )
            self.failed = True
        finally:
            _remove(folder)

    @contextlib.contextmanager
    def reader(self, step: int, sources: Mapping[str, str], taken: Layout, state: dict[str, Any]) -> Iterator[FileSystemReader]:
        """A DCP reader of snapshot `step` for `state` (`taken`: the layout of the round that took
        it; `sources`: the keeper that holds each of its nodes' parts): load `state` from it."""
        folder = self.scratch / f"restore-{self.rank}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            own = read_part_files(sources, taken, step, self.rank)
            (folder / data_file(self.rank)).write_bytes(own[data_file(self.rank)])
            (folder / METADATA).write_bytes(own[METADATA] if METADATA in own else self._fetch_file(step, 0, METADATA, sources, taken))
            for name, ranges in self._other_ranges(folder, state).items():
                self._fetch_ranges(folder / name, step, int(_DATA_FILE.fullmatch(name).group(1)), ranges, sources, taken)  # type: ignore[union-attr]
            yield FileSystemReader(str(folder))
        finally:
            _remove(folder)

    def restore(self, step: int, sources: Mapping[str, str], taken: Layout, state: dict[str, Any]) -> None:
        """Load snapshot `step` into `state` in place, as dcp.load does."""
        with self.reader(step, sources, taken, state) as reader:
            dcp.load(state, storage_reader=reader)

    def _other_ranges(self, folder: Path, state: dict[str, Any]) -> dict[str, list[tuple[int, int]]]:
        """The byte ranges of other ranks' files this rank's load reads (what DCP saved once, on
        rank 0), by file."""
        metadata = FileSystemReader(str(folder)).read_metadata()
        planner = DefaultLoadPlanner()
        planner.set_up_planner(state, metadata, self.rank == 0)
        wanted: dict[str, list[tuple[int, int]]] = {}
        for item in planner.create_local_plan().items:
            info = metadata.storage_data[item.storage_index]
            if info.relative_path != data_file(self.rank):
                wanted.setdefault(info.relative_path, []).append((info.offset, info.length))
        return wanted

    def _fetch_ranges(self, path: Path, step: int, rank: int, ranges: list[tuple[int, int]], sources: Mapping[str, str], taken: Layout) -> None:
        keeper, owner, start, _ = self._locate(step, rank, path.name, sources, taken)
        with path.open("wb") as sparse:
            for offset, length in ranges:
                sparse.seek(offset)
                sparse.write(get_part(keeper, owner, step, rank, start + offset, length))

    def _fetch_file(self, step: int, rank: int, name: str, sources: Mapping[str, str], taken: Layout) -> bytes:
        """One file of another rank's part, and nothing else of it."""
        keeper, owner, start, size = self._locate(step, rank, name, sources, taken)
        return bytes(get_part(keeper, owner, step, rank, start, size))

    def _locate(self, step: int, rank: int, name: str, sources: Mapping[str, str], taken: Layout) -> tuple[tuple[str, int], str, int, int]:
        """Where file `name` of rank `rank`'s part lies: (its keeper, the owner node, offset, size)."""
        owner = taken.node_of(rank)
        if owner is None:
            raise KeeperRefused(f"rank {rank} was on no node of the snapshot's round")
        keeper = address(sources[owner])
        files = unpack_files(bytes(get_part(keeper, owner, step, rank, 0, PART_HEAD_BYTES)))
        if files is None or name not in files:
            raise KeeperRefused(f"the part of rank {rank} at step {step} has no {name}")
        return keeper, owner, files[name][0], files[name][1]


def _remove(folder: Path) -> None:
    """A folder a snapshot passed through, and the scratch folder above it once no rank of the
    node uses it any more."""
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()


def background_stager() -> DefaultStager:
    """Copies a state in a background thread, so training goes on during the copy; only the next
    optimizer update waits for it (a memory snapshot's, an async checkpoint's). Pinned memory
    and non-blocking copies need a GPU. The copy buffers are kept between saves: one more copy
    of the rank's state in host memory."""
    gpu = torch.cuda.is_available()
    return DefaultStager(StagingOptions(use_pinned_memory=gpu, use_shared_memory=False, use_async_staging=True, use_non_blocking_copy=gpu))
