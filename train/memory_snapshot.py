"""Memory snapshots of the training state (issue 48): every N steps each rank hands its part of
the whole state to its node's keeper (hyperlaunch.supervisor.keeper, which outlives the trainer
and replicates to its peer), and a round told to restore one (core.memory_snapshots.RESTORE_ENV)
loads it from the keepers instead of a disk checkpoint.

A snapshot is a DCP save of the same state a checkpoint holds, into a folder of this rank's in
node-local memory (/dev/shm): the rank's data file (`__<rank>_0.distcp`) and the save's global
`.metadata` (rank 0's, broadcast to every rank) make its part. DCP saves what every rank holds
alike (the schedule, the step, each optimizer step count) once, on rank 0 (dedup to the lowest
rank), so a rank restoring reads its own part whole and, of rank 0's, only those items' bytes;
the folder it loads from holds its own file and a sparse copy of rank 0's with just those
ranges. Same world, same shards: a round inside the allocation (the same nodes, or a spare in a
lost node's place) restores; another world size reads the disk checkpoint."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

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
    put_part,
    read_part_files,
    unpack_files,
)
from hyperlaunch.core.metrics_records import TrainerEvent

from .checkpointing import Checkpointer
from .metrics import MetricsLog
from .state import TrainState

METADATA = rules.METADATA_FILE
_DATA_FILE = re.compile(r"__([0-9]+)_0\.distcp")


def data_file(rank: int) -> str:
    return f"__{rank}_0.distcp"


def scratch_dir(job: str) -> Path:
    """Node-local memory for the folders a snapshot passes through (/dev/shm, else the temp dir)."""
    root = Path("/dev/shm") if os.path.isdir("/dev/shm") else Path(os.environ.get("TMPDIR", "/tmp"))
    return root / f"hyperlaunch-snapshots-{job or os.getpid()}"


class MemorySnapshots:
    """This rank's side of the snapshots: taking one every `every` steps, restoring one."""

    def __init__(self, checkpointer: Checkpointer, layout: Layout, every: int, rank: int, scratch: Path, metrics: MetricsLog) -> None:
        self.checkpointer = checkpointer
        self.layout = layout
        self.every = every
        self.rank = rank
        self.scratch = scratch
        self.metrics = metrics
        self.node = layout.node_of(rank)
        self.failed = False
        """A keeper refused or could not be reached: this rank told so once; training goes on."""

    def due(self, step: int) -> bool:
        return bool(self.every) and step % self.every == 0

    def take(self, train: TrainState) -> float:
        """Snapshot the state at `train.step` (every rank, at the same step: collectives); the
        seconds training was held."""
        started = time.perf_counter()
        folder = self.scratch / f"take-{self.rank}"
        shutil.rmtree(folder, ignore_errors=True)
        writer = FileSystemWriter(str(folder), single_file_per_rank=True, sync_files=False, thread_count=1)
        dcp.save(self.checkpointer.state(train), storage_writer=writer, planner=DefaultSavePlanner(dedup_save_to_lowest_rank=True))
        metadata = [(folder / METADATA).read_bytes() if self.rank == 0 else b""]
        dist.broadcast_object_list(metadata, src=0)
        files = {METADATA: metadata[0], data_file(self.rank): (folder / data_file(self.rank)).read_bytes()}
        if self.rank == 0:  # what a checkpoint persisted from this snapshot records (snapshot_persist)
            files[rules.INFO_FILE] = rules.info_text(self.checkpointer.info(train.step)).encode()
        shutil.rmtree(folder, ignore_errors=True)
        self._hand_over(train.step, files)
        return time.perf_counter() - started

    def _hand_over(self, step: int, files: dict[str, bytes]) -> None:
        if self.node is None:
            return
        head = pack_files({name: len(data) for name, data in files.items()})
        try:
            put_part(address(self.layout.keepers[self.node]), self.node, step, self.rank, self.layout.ranks_of[self.node], head, *files.values())
        except (OSError, KeeperRefused, KeyError, ValueError) as error:
            if not self.failed:
                self.metrics.event(
                    TrainerEvent.MEMORY_SNAPSHOT_FAILED, f"memory snapshot of step {step} not kept: {error}; disk checkpoints go on",
                    step=step,
                )
            self.failed = True

    def restore(self, step: int, sources: dict[str, str], taken: Layout) -> TrainState:
        """Load snapshot `step` (`taken`: the layout of the round that took it; `sources`: the
        keeper that holds each of its nodes' parts)."""
        folder = self.scratch / f"restore-{self.rank}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        own = read_part_files(sources, taken, step, self.rank)
        (folder / METADATA).write_bytes(own[METADATA])
        (folder / data_file(self.rank)).write_bytes(own[data_file(self.rank)])
        state = self.checkpointer.empty_state()
        for name, ranges in self._other_ranges(folder, state).items():
            self._fetch_ranges(folder / name, step, int(_DATA_FILE.fullmatch(name).group(1)), ranges, sources, taken)  # type: ignore[union-attr]
        train = self.checkpointer.load_state(FileSystemReader(str(folder)), state)
        shutil.rmtree(folder, ignore_errors=True)
        return train

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

    def _fetch_ranges(self, path: Path, step: int, rank: int, ranges: list[tuple[int, int]], sources: dict[str, str], taken: Layout) -> None:
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
