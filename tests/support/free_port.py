"""A TCP port for a server a test starts itself (a torchrun store, an mlflow server): free now,
and from 30000-32767, where nothing else the tests run takes one unasked. A port from bind(0)
comes from Linux's ephemeral range (32768 and up), where any outgoing connection can take it
between the probe and the server's bind; 20000-29999 are the rendezvous ports of the dev
cluster's jobs (hyperlaunch.supervisor.decisions), and the dev cluster's daemons listen from
17817 and 27817 on."""

from __future__ import annotations

import random

from hyperlaunch.supervisor.ports import in_use

FIRST, LAST = 30000, 32767


def free_port() -> int:
    for port in random.sample(range(FIRST, LAST + 1), LAST + 1 - FIRST):
        if not in_use(port):
            return port
    raise AssertionError(f"no free port in {FIRST}-{LAST}")
