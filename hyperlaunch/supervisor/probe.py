"""Is a node gone? A TCP connection to its slurmd: a node that is up accepts it however busy or
stopped its processes are (the kernel answers); one that refuses or ignores it three times in a
row, 0.2 s apart, 2 s each, is gone. The nodes of a round are probed in parallel."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence

from hyperlaunch.supervisor import slurm_calls

TRIES = 3
TRY_TIMEOUT_S = 2.0
TRY_INTERVAL_S = 0.2

UP, GONE, UNKNOWN = "up", "gone", "unknown"


def connects(address: str, port: int, timeout: float = TRY_TIMEOUT_S) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def probe(address: str | None, port: str | None, connect: Callable[[str, int], bool] = connects) -> str:
    """UP, GONE, or UNKNOWN when Slurm does not say where the node's slurmd listens."""
    if not address or not port or not port.isdigit() or " " in address:
        return UNKNOWN
    for attempt in range(TRIES):
        if connect(address, int(port)):
            return UP
        if attempt < TRIES - 1:
            time.sleep(TRY_INTERVAL_S)
    return GONE


class NodeProber:
    """Probes the nodes of a job; the batch host, which runs the supervisor itself, is up."""

    def __init__(self, batch_host: str) -> None:
        self.batch_host = batch_host
        self._port: str | None = None
        self._addresses: dict[str, tuple[str | None, str | None]] = {}
        """Where each node's slurmd listens, asked once: the spares are probed every few seconds."""

    def _probe_node(self, node: str) -> str:
        if node not in self._addresses or self._addresses[node][0] is None:
            self._addresses[node] = slurm_calls.node_address(node)
        address, port = self._addresses[node]
        if address is None and port is None:
            return UNKNOWN
        if not port:
            if self._port is None:
                self._port = slurm_calls.slurmd_port() or ""
            port = self._port
        return probe(address, port)

    def gone(self, nodes: Sequence[str]) -> list[str]:
        """The nodes among `nodes` that are gone, in their order."""
        others = [node for node in nodes if node != self.batch_host]
        verdicts: dict[str, str] = {}

        def run(node: str) -> None:
            verdicts[node] = self._probe_node(node)

        threads = [threading.Thread(target=run, args=(node,), daemon=True) for node in others]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [node for node in others if verdicts.get(node) == GONE]
