"""The keeper: one small process on each node of a job that holds the memory snapshots of the
node's ranks, and the replica of its peer's, in its own memory, so that a snapshot outlives a
trainer that crashed, was killed or hung (hyperlaunch.core.memory_snapshots has the rules and
the wire).

A rank hands over its part of a step (`put`, owner = this node); once the keeper has every rank
of the node for that step, it sends the parts to its peer's keeper, in the background and in
order, and the peer holds them as this node's replica. For each owner node a keeper keeps the
newest `keep` whole steps and the parts of any newer one still arriving; older parts go as soon
as a newer step is whole. A part that would take the keeper past its byte budget is refused
(the rank goes on training; the disk checkpoint still stands).

    python3 -m hyperlaunch.supervisor.keeper --node node1 --port 29600 --peer node2:29600

Standard library only, Python 3.8 or later."""

from __future__ import annotations

import argparse
import os
import queue
import socket
import socketserver
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hyperlaunch.core.memory_snapshots import (
    GET,
    HOLDINGS,
    KEEP,
    PUT,
    address,
    header,
    peer_in_ring,
    put_part,
    read_header,
    read_keeper_address,
    read_payload,
    write_keeper_address,
)

if TYPE_CHECKING:
    from hyperlaunch.core.memory_snapshots import Payload



class Store:
    """The parts a keeper holds, by (owner, step, rank), and the rules of what it keeps."""

    def __init__(self, node: str, keep: int = KEEP, max_bytes: int | None = None) -> None:
        self.node = node
        self.keep = keep
        self.max_bytes = max_bytes
        self.parts: dict[tuple[str, int, int], Payload] = {}
        self.ranks_of: dict[str, frozenset[int]] = {}
        """Every rank of each owner node, as its parts said."""
        self.sent: set[int] = set()
        """This node's steps handed to the replication already."""
        self.lock = threading.Lock()

    @property
    def size(self) -> int:
        """Bytes held."""
        return sum(len(data) for data in self.parts.values())

    def put(self, owner: str, step: int, rank: int, ranks: Sequence[int], data: Payload) -> list[tuple[int, int, Payload]] | None:
        """Store a part; None where the budget has no room for it. The parts of this node's step
        to replicate, once this one made it whole (each step once), else []."""
        with self.lock:
            self.ranks_of[owner] = frozenset(ranks) | {rank}
            if self.max_bytes is not None and self.size - len(self.parts.get((owner, step, rank), b"")) + len(data) > self.max_bytes:
                self._evict(owner, room_for=len(data))
                if self.size + len(data) > self.max_bytes:
                    return None
            self.parts[(owner, step, rank)] = data
            self._evict(owner)
            if owner != self.node or step in self.sent or not self._whole(owner, step):
                return []
            self.sent.add(step)
            return [(step, r, self.parts[(owner, step, r)]) for r in sorted(self.ranks_of[owner])]

    def get(self, owner: str, step: int, rank: int) -> Payload | None:
        with self.lock:
            return self.parts.get((owner, step, rank))

    def held(self) -> dict[str, dict[int, list[int]]]:
        with self.lock:
            found: dict[str, dict[int, list[int]]] = {}
            for owner, step, rank in self.parts:
                found.setdefault(owner, {}).setdefault(step, []).append(rank)
            return {owner: {step: sorted(ranks) for step, ranks in steps.items()} for owner, steps in found.items()}

    def _whole(self, owner: str, step: int) -> bool:
        return all((owner, step, rank) in self.parts for rank in self.ranks_of.get(owner, ()))

    def _evict(self, owner: str, room_for: int = 0) -> None:
        """Drop the owner's parts older than its `keep` newest whole steps; with `room_for`, also
        whole steps before the newest, oldest first, until that many bytes fit."""
        steps = sorted({step for o, step, _ in self.parts if o == owner})
        whole = [step for step in steps if self._whole(owner, step)]
        if len(whole) > self.keep:
            self._drop(owner, {step for step in steps if step < whole[-self.keep]})
        if room_for and self.max_bytes is not None:
            for step in whole[:-1]:
                if self.size + room_for <= self.max_bytes:
                    break
                self._drop(owner, {step})

    def _drop(self, owner: str, steps: set[int]) -> None:
        for key in [k for k in self.parts if k[0] == owner and k[1] in steps]:
            del self.parts[key]


class Replicator:
    """Sends this node's whole steps to the peer's keeper, one part after another, in the order
    they became whole; a peer that does not answer is told on stderr and its replica is not
    sent (its node is lost, or is being lost: the supervisor finds it so). The peer is fixed
    (`peer`), or looked up before each part in the job's keepers folder (`directory`): the
    next node of the ring the supervisor wrote for the round, at the address its keeper wrote."""

    def __init__(self, node: str, peer: tuple[str, int] | None, directory: Path | None = None) -> None:
        self.node = node
        self.peer = peer
        self.directory = directory
        self.queue: queue.Queue[tuple[int, int, frozenset[int], Payload]] = queue.Queue()
        threading.Thread(target=self._run, name="replicate", daemon=True).start()

    def send(self, step: int, parts: Sequence[tuple[int, int, Payload]], ranks: frozenset[int]) -> None:
        for _, rank, data in parts:
            self.queue.put((step, rank, ranks, data))

    def _peer(self) -> tuple[str, int] | None:
        if self.peer is not None or self.directory is None:
            return self.peer
        node = peer_in_ring(self.directory, self.node)
        where = read_keeper_address(self.directory, node) if node is not None else None
        return address(where) if where is not None else None

    def _run(self) -> None:
        while True:
            step, rank, ranks, data = self.queue.get()
            peer = self._peer()
            if peer is None:
                continue
            try:
                put_part(peer, self.node, step, rank, sorted(ranks), data)
            except Exception as error:  # noqa: BLE001 - a lost peer must not stop the keeper
                print(f"hyperlaunch keeper {self.node}: replica of step {step} rank {rank} not sent: {error}", file=sys.stderr, flush=True)


class _Handler(socketserver.StreamRequestHandler):
    server: KeeperServer

    def handle(self) -> None:
        request = read_header(self.rfile)
        if request is None:
            return
        op = request.get("op")
        owner, step, rank = request.get("owner"), request.get("step"), request.get("rank")
        if op == HOLDINGS:
            self._answer(held=self.server.store.held(), node=self.server.store.node, bytes=self.server.store.size)
            return
        if not isinstance(owner, str) or not isinstance(step, int) or not isinstance(rank, int):
            self._answer(error=f"a {op} names owner, step and rank")
            return
        if op == PUT:
            self._put(owner, step, rank, request)
        elif op == GET:
            data = self.server.store.get(owner, step, rank)
            if data is None:
                self._answer(error=f"no part of step {step} rank {rank} of {owner} here")
                return
            offset, length = request.get("offset", 0), request.get("length", len(data))
            if not isinstance(offset, int) or not isinstance(length, int) or not 0 <= offset <= offset + length <= len(data):
                self._answer(error=f"bytes {offset}+{length} are not inside the part's {len(data)}")
                return
            self._answer(size=length)
            self.wfile.write(memoryview(data)[offset : offset + length])
        else:
            self._answer(error=f"unknown op {op!r}: put, get or holdings")

    def _put(self, owner: str, step: int, rank: int, request: dict[str, object]) -> None:
        size, ranks = request.get("size"), request.get("ranks")
        rank_list = [r for r in ranks if isinstance(r, int)] if isinstance(ranks, list) else []
        data = read_payload(self.rfile, size) if isinstance(size, int) and size >= 0 else None
        if data is None:
            self._answer(error="the part ended before its size")
            return
        store = self.server.store
        whole = store.put(owner, step, rank, rank_list, data)
        if whole is None:
            self._answer(error=f"no room: {len(data)} bytes more would pass the keeper's budget of {store.max_bytes}")
            return
        if whole:
            self.server.replicator.send(step, whole, store.ranks_of[owner])
        self._answer(stored=True)

    def _answer(self, **fields: object) -> None:
        self.wfile.write(header("answer", **fields))


class KeeperServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: Store, replicator: Replicator) -> None:
        self.store = store
        self.replicator = replicator
        super().__init__(address, _Handler)


def _address(text: str) -> tuple[str, int]:
    try:
        return address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m hyperlaunch.supervisor.keeper", description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", default=os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                        help="this node's name, the owner of its ranks' parts [default: SLURMD_NODENAME]")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="[default: any free one]")
    parser.add_argument("--peer", type=_address, help="HOST:PORT of the keeper that holds this node's replica")
    parser.add_argument("--directory", type=Path,
                        help="the job's keepers folder: this keeper writes its address there, and finds its peer by the ring")
    parser.add_argument("--keep", type=int, default=KEEP)
    parser.add_argument("--max-bytes", type=int, help="refuse parts past this many bytes held")
    args = parser.parse_args(argv)
    store = Store(args.node, args.keep, args.max_bytes)
    with KeeperServer((args.host, args.port), store, Replicator(args.node, args.peer, args.directory)) as server:
        port = server.server_address[1]
        print(f"hyperlaunch keeper {args.node}: listening on {args.host}:{port}", flush=True)
        if args.directory is not None:
            host = socket.gethostname() if args.host in ("0.0.0.0", "") else args.host
            write_keeper_address(args.directory, args.node, f"{host}:{port}")
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
