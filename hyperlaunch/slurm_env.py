"""Which Slurm cluster the commands talk to: SLURM_CONF when set; otherwise, on a machine
with no system Slurm config but a running dev cluster, that dev cluster - so `dev-cluster
up` followed by `submit` just works."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


def slurm_environment(recorded_conf: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if env.get("SLURM_CONF"):
        return env
    if recorded_conf and Path(recorded_conf).exists():
        env["SLURM_CONF"] = recorded_conf
        return env
    if SYSTEM_CONF.exists():
        return env
    from hyperlaunch.devcluster.cluster import default_root, running_state

    running = running_state(default_root())
    if running is not None:
        env["SLURM_CONF"] = str(running.layout.slurm_conf)
        print(f"hyperlaunch: using the dev cluster (SLURM_CONF={env['SLURM_CONF']})", file=sys.stderr)
    return env
