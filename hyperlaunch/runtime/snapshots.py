"""Memory snapshots of a training's state, a rank's side (issue 48): every N steps each rank
hands its part of the whole state to its node's keeper (hyperlaunch.supervisor.keeper, which
outlives the trainer and replicates to its peer), and a round told to restore one
(core.script_env.RESTORE_ENV) loads it from the keepers instead of a disk checkpoint. The bundled
trainer and a script's `runtime.snapshot` / `runtime.restore_snapshot` both go through here.

A snapshot is a DCP save of the state (what `dcp.save` takes: a dict of Stateful objects and
tensors), into a folder of this rank's in node-local memory (/dev/shm): the rank's data file
(`__<rank>_0.distcp`) and the save's global `.metadata` (rank 0's, broadcast to every rank)
make its part. DCP saves what every rank holds alike (a schedule, the step, each optimizer step
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
from pathlib import Path
from typing import Any, Protocol

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, DefaultSavePlanner, FileSystemReader, FileSystemWriter

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.memory_snapshots import (
    PART_HEAD_BYTES,
    KeeperRefused,
    Layout,
    address,
    get_part,
    pack_files,
    piece_size,
    put_part,
    read_part_files,
    unpack_files,
)
from hyperlaunch.core.metrics_records import TrainerEvent

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


class MemorySnapshots:
    """This rank's side of the snapshots: taking one every `every` steps, restoring one."""

    def __init__(self, layout: Layout, every: int, rank: int, scratch: Path, events: Events) -> None:
        self.layout = layout
        self.every = every
        self.rank = rank
        self.scratch = scratch
        self.events = events
        self.node = layout.node_of(rank)
        self.failed = False
        """A keeper refused or could not be reached: this rank told so once; training goes on."""

    def due(self, step: int) -> bool:
        return bool(self.every) and step % self.every == 0

    def take(self, step: int, state: dict[str, Any], files: Mapping[str, bytes] | None = None) -> float:
        """Snapshot `state` at `step` (every rank, at the same step: collectives), with rank 0's
        extra `files` beside the save's; the seconds training was held."""
        started = time.perf_counter()
        folder = self.scratch / f"take-{self.rank}"
        shutil.rmtree(folder, ignore_errors=True)
        writer = FileSystemWriter(str(folder), single_file_per_rank=True, sync_files=False, thread_count=1)
        dcp.save(state, storage_writer=writer, planner=DefaultSavePlanner(dedup_save_to_lowest_rank=True))
        metadata = [(folder / METADATA).read_bytes() if self.rank == 0 else b""]
        if dist.is_initialized():
            dist.broadcast_object_list(metadata, src=0)
        # The data file goes from node-local memory to the keeper by the kernel, never read in here.
        part: dict[str, bytes | Path] = {METADATA: metadata[0], data_file(self.rank): folder / data_file(self.rank)}
        if self.rank == 0 and files:
            part.update(files)
        try:
            self._hand_over(step, part)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return time.perf_counter() - started

    def _hand_over(self, step: int, files: dict[str, bytes | Path]) -> None:
        if self.node is None:
            return
        head = pack_files({name: piece_size(data) for name, data in files.items()})
        try:
            put_part(address(self.layout.keepers[self.node]), self.node, step, self.rank, self.layout.ranks_of[self.node], head, *files.values())
        except (OSError, KeeperRefused, KeyError, ValueError) as error:
            if not self.failed:
                self.events.event(
                    TrainerEvent.MEMORY_SNAPSHOT_FAILED, f"memory snapshot of step {step} not kept: {error}; disk checkpoints go on",
                    step=step,
                )
            self.failed = True

    @contextlib.contextmanager
    def reader(self, step: int, sources: Mapping[str, str], taken: Layout, state: dict[str, Any]) -> Iterator[FileSystemReader]:
        """A DCP reader of snapshot `step` for `state` (`taken`: the layout of the round that took
        it; `sources`: the keeper that holds each of its nodes' parts): load `state` from it."""
        folder = self.scratch / f"restore-{self.rank}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            own = read_part_files(sources, taken, step, self.rank)
            (folder / METADATA).write_bytes(own[METADATA])
            (folder / data_file(self.rank)).write_bytes(own[data_file(self.rank)])
            for name, ranges in self._other_ranges(folder, state).items():
                self._fetch_ranges(folder / name, step, int(_DATA_FILE.fullmatch(name).group(1)), ranges, sources, taken)  # type: ignore[union-attr]
            yield FileSystemReader(str(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

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
        owner = taken.node_of(rank)
        if owner is None:
            raise KeeperRefused(f"rank {rank} was on no node of the snapshot's round")
        keeper = address(sources[owner])
        files = unpack_files(bytes(get_part(keeper, owner, step, rank, 0, PART_HEAD_BYTES)))
        if files is None or path.name not in files:
            raise KeeperRefused(f"the part of rank {rank} at step {step} has no {path.name}")
        start = files[path.name][0]
        with path.open("wb") as sparse:
            for offset, length in ranges:
                sparse.seek(offset)
                sparse.write(get_part(keeper, owner, step, rank, start + offset, length))
