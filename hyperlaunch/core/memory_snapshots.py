"""Memory snapshots: the rules the keepers (hyperlaunch.supervisor.keeper), the ranks that hand
them their state (hyperlaunch.runtime.keeper_client) and the supervisor that picks a snapshot to
restore all obey.

A snapshot of step S is each rank's own part of the training state at S (its shards of the
model and optimizer, its RNG and data position), bytes the rank serialized. Each node runs one
keeper that holds its own ranks' parts and, once it has all of them for a step, sends a replica
to its peer: the next node of the ring the round's nodes make (node1 -> node2 -> ... -> node1).
Losing a node, or any set of nodes none of which is another's peer, leaves every part of the
newest snapshot on a surviving node. A step counts only where every node's every rank is held,
by that node or by its peer: a restore never mixes steps.

The wire: one JSON header line (`op` and its fields), then `size` bytes of payload where the
header has one; each request gets one JSON line back, then the payload it names.

Standard library only, Python 3.8 or later: the keeper runs on the compute node's python3."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hyperlaunch.core.protocol import json_object, read_regular_file

PUT = "put"
"""Store one rank's part of a step: `owner` (the node whose rank it is), `step`, `rank`, `size`."""
GET = "get"
"""Send back one part, `owner`, `step`, `rank`: all of it, or `length` bytes from `offset`."""
HOLDINGS = "holdings"
"""What the keeper holds: {"node", "held": {owner: {step: [ranks]}}, "bytes"}."""
HEADER_LIMIT = 64 * 1024
"""The longest header line a keeper reads."""

if TYPE_CHECKING:  # aliases Python 3.8 cannot build at run time (collections.abc generics, `|`)
    Held = Mapping[str, Mapping[int, Iterable[int]]]
    """What one keeper holds: owner node -> step -> the ranks whose parts it has."""
    Payload = bytes | bytearray
    """A part's bytes: read into one buffer (read_payload), never copied again."""


KEEP = 2
"""Whole steps a keeper keeps of each owner node: the newest, and the one before while a newer
one arrives (hyperlaunch.supervisor.keeper; what submit counts in a node's memory)."""


def ring_peers(nodes: Sequence[str]) -> dict[str, str]:
    """Each node's peer, the node that holds its replica: the next one in the ring. None for a
    node alone: it has no peer."""
    if len(nodes) < 2:
        return {}
    return {node: nodes[(index + 1) % len(nodes)] for index, node in enumerate(nodes)}


@dataclass(frozen=True)
class Restore:
    """The snapshot to restore and where each node's parts are read."""

    step: int
    source: Mapping[str, str]
    """Owner node -> the node whose keeper holds its parts (itself where it survived, else its peer)."""

    def addresses(self, taken: Layout) -> dict[str, str]:
        """Owner node -> HOST:PORT of the keeper that holds its parts (`taken`: the layout of the
        round that took the snapshot)."""
        return {owner: taken.keepers[holder] for owner, holder in self.source.items()}


def newest_restorable(held_by: Mapping[str, Held], ranks_of: Mapping[str, Sequence[int]]) -> Restore | None:
    """The newest step whose every part is held by a keeper that answered (`held_by`: keeper node
    -> what it holds), for the nodes and ranks of the round that snapshotted it (`ranks_of`: owner
    node -> its ranks); an owner's own keeper first, else any other that holds its parts (its
    peer). None where no step is whole: the disk checkpoint, as before memory snapshots."""
    if not ranks_of:
        return None
    candidates: set[int] = set()
    for held in held_by.values():
        for steps in held.values():
            candidates.update(steps)
    for step in sorted(candidates, reverse=True):
        source = {}
        for owner, ranks in ranks_of.items():
            holder = _holder(held_by, owner, step, set(ranks))
            if holder is None:
                break
            source[owner] = holder
        else:
            return Restore(step, source)
    return None


def _holder(held_by: Mapping[str, Held], owner: str, step: int, ranks: set[int]) -> str | None:
    order = ([owner] if owner in held_by else []) + sorted(k for k in held_by if k != owner)
    for keeper in order:
        if ranks <= set(held_by[keeper].get(owner, {}).get(step, ())):
            return keeper
    return None


def header(op: str, **fields: object) -> bytes:
    """A request's or an answer's header line."""
    return (json.dumps({"op": op, **fields}, sort_keys=True) + "\n").encode("utf-8")


class Readable(Protocol):
    """A socket's file, as a keeper and its clients read it."""

    def readline(self, size: int = -1, /) -> bytes: ...

    def readinto(self, buffer: memoryview, /) -> int | None: ...


def read_header(stream: Readable) -> dict[str, object] | None:
    """The next header line from a socket's file; None at its end, or for a line that is no
    header (too long, not JSON)."""
    line = stream.readline(HEADER_LIMIT + 1)
    if not line or len(line) > HEADER_LIMIT or not line.endswith(b"\n"):
        return None
    return json_object(line)


def read_payload(stream: Readable, size: int) -> bytearray | None:
    """`size` bytes, None where the stream ends first. Read into one buffer of that size: a
    part is the rank's whole state, and joining chunks would copy it again."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        count = stream.readinto(view[got:])
        if not count:
            return None
        got += count
    return buffer


def _request(
    address: tuple[str, int], op: str, *, payload: Sequence[Payload | Path] = (), timeout: float = 60.0, **fields: object
) -> tuple[dict[str, object], Payload]:
    """One request to a keeper and its answer (header, payload). The payload's pieces are sent
    one after another, never joined; a piece that is a file's path is sent from the file by the
    kernel (sendfile), never read into this process. OSError where the keeper cannot be reached
    or answers with no header; KeeperRefused where it refuses."""
    with socket.create_connection(address, timeout=timeout) as connection:
        connection.sendall(header(op, **fields, size=sum(piece_size(piece) for piece in payload)))
        for piece in payload:
            if isinstance(piece, Path):
                with piece.open("rb") as file:
                    connection.sendfile(file)
            else:
                connection.sendall(piece)
        stream = connection.makefile("rb")
        answer = read_header(stream)
        if answer is None:
            raise OSError(f"keeper {address[0]}:{address[1]} gave no answer to {op}")
        if answer.get("error"):
            raise KeeperRefused(str(answer["error"]))
        size = answer.get("size")
        data = read_payload(stream, size) if isinstance(size, int) and size > 0 else b""
        if data is None:
            raise OSError(f"keeper {address[0]}:{address[1]} ended its answer to {op} early")
        return answer, data


class KeeperRefused(Exception):
    """A keeper refused a request (no room in its budget, an unknown part)."""


def piece_size(piece: Payload | Path) -> int:
    return piece.stat().st_size if isinstance(piece, Path) else len(piece)


def put_part(address: tuple[str, int], owner: str, step: int, rank: int, ranks: Sequence[int], *pieces: Payload | Path) -> None:
    """Hand one rank's part of a step (its `pieces`, in order) to a keeper: its own node's (owner
    = that node), or, from a keeper, its peer's replica. `ranks`: every rank of the owner node, so
    the keeper knows when it has the whole step."""
    _request(address, PUT, payload=pieces, owner=owner, step=step, rank=rank, ranks=list(ranks))


def get_part(address: tuple[str, int], owner: str, step: int, rank: int, offset: int = 0, length: int | None = None) -> Payload:
    """One rank's part of a step (or `length` bytes of it from `offset`), from the keeper
    holding it; KeeperRefused where it holds none."""
    if length is None:
        return _request(address, GET, owner=owner, step=step, rank=rank)[1]
    return _request(address, GET, owner=owner, step=step, rank=rank, offset=offset, length=length)[1]


def holdings(address: tuple[str, int], timeout: float = 5.0) -> Held:
    """What a keeper holds (owner -> step -> ranks); OSError where it does not answer."""
    answer = _request(address, HOLDINGS, timeout=timeout)[0]
    held = answer.get("held")
    if not isinstance(held, dict):
        return {}
    return {
        str(owner): {int(step): [int(r) for r in ranks] for step, ranks in steps.items() if str(step).isdigit() and isinstance(ranks, list)}
        for owner, steps in held.items() if isinstance(steps, dict)
    }




@dataclass(frozen=True)
class Layout:
    """Which node each rank ran on, and where each node's keeper listens."""

    ranks_of: Mapping[str, Sequence[int]]
    """Node -> its ranks, as torchrun numbered them in the round."""
    keepers: Mapping[str, str]
    """Node -> its keeper's HOST:PORT."""
    every: int = 0
    """The job's snapshot interval in steps (`submit --memory-checkpoint-every`)."""

    def node_of(self, rank: int) -> str | None:
        return next((node for node, ranks in self.ranks_of.items() if rank in ranks), None)

    def to_json(self) -> str:
        ranks_of = {n: list(r) for n, r in self.ranks_of.items()}
        return json.dumps({"ranks_of": ranks_of, "keepers": dict(self.keepers), "every": self.every}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Layout | None:
        data = json_object(text)
        if data is None:
            return None
        ranks_of, keepers = data.get("ranks_of"), data.get("keepers")
        if not isinstance(ranks_of, dict) or not isinstance(keepers, dict):
            return None
        return cls(
            {str(n): [int(r) for r in ranks if isinstance(r, int)] for n, ranks in ranks_of.items() if isinstance(ranks, list)},
            {str(n): str(a) for n, a in keepers.items() if isinstance(a, str)},
            every if isinstance(every := data.get("every"), int) and every > 0 else 0,
        )


def address(text: str) -> tuple[str, int]:
    """A keeper's `HOST:PORT` as a socket address; ValueError for anything else."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{text!r} is no HOST:PORT")
    return host, int(port)


PART_HEAD_BYTES = 4096
"""A part made of files begins with its head, padded to this size: a reader fetches it before
it knows where the files lie in the part."""


def pack_files(files: Mapping[str, int]) -> bytes:
    """The head of a part made of files: one JSON line naming each file and its size, in the
    order their bytes follow it, padded to PART_HEAD_BYTES. ValueError where the names do not fit."""
    line = json.dumps({"files": [[name, size] for name, size in files.items()]}).encode("utf-8")
    if len(line) >= PART_HEAD_BYTES:
        raise ValueError(f"{len(files)} file names do not fit a part's head of {PART_HEAD_BYTES} bytes")
    return line.ljust(PART_HEAD_BYTES - 1) + b"\n"


def unpack_files(head: bytes) -> dict[str, tuple[int, int]] | None:
    """Each file of a part, from its head (its first line, as pack_files wrote it): name ->
    (offset in the part, size). None where the part has no such head."""
    line, newline, _ = bytes(head).partition(b"\n")
    data = json_object(line) if newline else None  # json reads past the padding
    listed = data.get("files") if data is not None else None
    if not isinstance(listed, list):
        return None
    found, offset = {}, len(line) + 1
    for entry in listed:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], int)):
            return None
        found[entry[0]] = (offset, entry[1])
        offset += entry[1]
    return found


def restore_json(restore: Restore, taken: Layout) -> str:
    """RESTORE_ENV's value: the step, the keeper (HOST:PORT) that holds each node's parts, and
    the layout of the round that took the snapshot."""
    return json.dumps({"step": restore.step, "sources": restore.addresses(taken), "taken": json.loads(taken.to_json())}, sort_keys=True)


def parse_restore(text: str) -> tuple[int, dict[str, str], Layout] | None:
    """RESTORE_ENV's value read back: (step, node -> HOST:PORT of the keeper holding its parts,
    the layout of the round that took it); None where it names none."""
    data = json_object(text)
    if data is None:
        return None
    step, sources, taken = data.get("step"), data.get("sources"), data.get("taken")
    layout = Layout.from_json(json.dumps(taken)) if isinstance(taken, dict) else None
    if not isinstance(step, int) or not isinstance(sources, dict) or layout is None:
        return None
    return step, {str(k): str(v) for k, v in sources.items()}, layout


ADDRESS_SUFFIX = ".address"
RING_FILE = "ring"


def keepers_dir(run_dir: Path, job: str) -> Path:
    """Where a job's keepers and its supervisor find each other, on storage every node shares:
    `<node>.address` (HOST:PORT, written by the node's keeper once it listens) and `ring` (the
    round's nodes in order, written by the supervisor before each round: whose replica each
    keeper holds)."""
    return Path(run_dir) / f"keepers-{job}"


def write_keeper_address(directory: Path, node: str, where: str) -> None:
    partial = Path(directory) / f".{node}{ADDRESS_SUFFIX}.partial"
    partial.write_text(where + "\n")
    os.replace(partial, Path(directory) / f"{node}{ADDRESS_SUFFIX}")


def read_keeper_address(directory: Path, node: str) -> str | None:
    """The node's keeper's HOST:PORT, None before it listens (or where none is)."""
    raw = read_regular_file(Path(directory) / f"{node}{ADDRESS_SUFFIX}", limit=512)
    text = raw.decode("utf-8", errors="replace").strip() if raw else ""
    try:
        address(text)
    except ValueError:
        return None
    return text


def write_ring(directory: Path, nodes: Sequence[str]) -> None:
    partial = Path(directory) / f".{RING_FILE}.partial"
    partial.write_text("".join(node + "\n" for node in nodes))
    os.replace(partial, Path(directory) / RING_FILE)


def peer_in_ring(directory: Path, node: str) -> str | None:
    """The node whose keeper holds `node`'s replica now: the next one in the ring the supervisor
    wrote; None where the node is not in it (a spare, idle) or is alone."""
    raw = read_regular_file(Path(directory) / RING_FILE, limit=1 << 20)
    nodes = [line.strip() for line in raw.decode("utf-8", errors="replace").splitlines() if line.strip()] if raw else []
    return ring_peers(nodes).get(node)


def read_part_files(sources: Mapping[str, str], taken: Layout, step: int, rank: int) -> dict[str, memoryview]:
    """One rank's part of snapshot `step`, read whole from the keeper that holds its node's parts
    (`sources`: node -> HOST:PORT; `taken`: the layout of the round that took it), split into its
    files: views into the one buffer it was read into. KeeperRefused where there is none."""
    owner = taken.node_of(rank)
    if owner is None:
        raise KeeperRefused(f"rank {rank} was on no node of the snapshot's round")
    part = get_part(address(sources[owner]), owner, step, rank)
    files = unpack_files(bytes(part[:PART_HEAD_BYTES]))
    if files is None:
        raise KeeperRefused(f"the part of rank {rank} at step {step} has no head")
    view = memoryview(part)
    return {name: view[offset : offset + size] for name, (offset, size) in files.items()}
