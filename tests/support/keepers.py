"""Keepers (hyperlaunch.supervisor.keeper) as the nodes of a job would run them, on loopback: one
process a node, each replicating to the next node of the ring."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperlaunch.core.memory_snapshots import address, holdings, ring_peers
from tests.support.free_port import free_port

if TYPE_CHECKING:
    from hyperlaunch.core.memory_snapshots import Held


@dataclass
class Keeper:
    process: subprocess.Popen[bytes]
    where: str
    """HOST:PORT."""

    @property
    def address(self) -> tuple[str, int]:
        return address(self.where)

    def kill(self) -> None:
        """The node is lost, and its keeper with it."""
        self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def running_keepers(nodes: Sequence[str]) -> Iterator[dict[str, Keeper]]:
    ports = {node: free_port() for node in nodes}
    peers = ring_peers(list(nodes))
    started: dict[str, Keeper] = {}
    try:
        for node, port in ports.items():
            argv = [sys.executable, "-m", "hyperlaunch.supervisor.keeper", "--node", node, "--host", "127.0.0.1", "--port", str(port)]
            if node in peers:
                argv += ["--peer", f"127.0.0.1:{ports[peers[node]]}"]
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            started[node] = Keeper(process, f"127.0.0.1:{port}")
            assert process.stdout is not None and b"listening" in process.stdout.readline(), f"keeper {node} did not start"
        yield started
    finally:
        for keeper in started.values():
            keeper.kill()


def held_by_live(keepers: dict[str, Keeper]) -> dict[str, Held]:
    """What each keeper still running holds."""
    return {node: holdings(keeper.address) for node, keeper in keepers.items() if keeper.process.poll() is None}
