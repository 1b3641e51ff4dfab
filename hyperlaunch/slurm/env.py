"""Which Slurm cluster the commands talk to: SLURM_CONF when set; the one a job was submitted
to; the system's /etc/slurm; otherwise a local cluster that `local_cluster` names (the CLI
passes the running dev cluster's, so `dev-cluster up` followed by `submit` just works).

Knows nothing of the dev cluster itself: the CLI hands that in, and says so through `notify`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


def slurm_environment(
    recorded_conf: str | None = None,
    *,
    local_cluster: Callable[[], str | None] | None = None,
    notify: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """This process's environment with SLURM_CONF pointing at the cluster to use."""
    env = dict(os.environ)
    if env.get("SLURM_CONF"):
        return env
    if recorded_conf and Path(recorded_conf).exists():
        env["SLURM_CONF"] = recorded_conf
        return env
    if SYSTEM_CONF.exists() or local_cluster is None:
        return env
    conf = local_cluster()
    if conf is not None:
        env["SLURM_CONF"] = conf
        if notify is not None:
            notify(f"using the dev cluster (SLURM_CONF={conf})")
    return env
