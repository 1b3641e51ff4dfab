"""The idle spares, watched while a round trains: a spare whose node dies is given back to Slurm
at once, as a lost training node is. Left in the allocation, Slurm would notice it only after
SlurmdTimeout and then requeue the whole job, losing the training since its last checkpoint for
a node that never trained.

The probe (hyperlaunch.supervisor.probe) of a dead node takes seconds, so it runs in a thread of
its own, every SPARE_PROBE_INTERVAL_S, and the supervisor's loop only looks for its answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

SPARE_PROBE_INTERVAL_S = 2.0


class SpareWatch:
    """Probes `spares()` in the background; `poll()` gives back those found gone."""

    def __init__(
        self,
        spares: Callable[[], Sequence[str]],
        gone: Callable[[Sequence[str]], list[str]],
        give_back: Callable[[Sequence[str]], None],
        interval_s: float = SPARE_PROBE_INTERVAL_S,
    ) -> None:
        self.spares = spares
        self.gone = gone
        self.give_back = give_back
        self.interval_s = interval_s
        self._next = 0.0
        self._thread: threading.Thread | None = None
        self._found: list[str] | None = None

    def poll(self) -> None:
        """Start a probe when one is due, and give back the spares the last one found gone."""
        if self._thread is not None and not self._thread.is_alive():
            self._thread = None
            found, self._found = self._found or [], None
            dead = [node for node in found if node in self.spares()]  # a spare taken meanwhile is a training node
            if dead:
                self.give_back(dead)
        if self._thread is None and time.monotonic() >= self._next and self.spares():
            self._next = time.monotonic() + self.interval_s
            nodes = list(self.spares())
            self._thread = threading.Thread(target=self._probe, args=(nodes,), daemon=True)
            self._thread.start()

    def _probe(self, nodes: list[str]) -> None:
        self._found = self.gone(nodes)
