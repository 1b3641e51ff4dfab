"""The Slurm environment every command uses, with the CLI's one extra: on a machine without a
Slurm config, a running dev cluster (said on stderr)."""

from __future__ import annotations

from hyperlaunch.cli._output import out


def slurm_env(recorded_conf: str | None = None) -> dict[str, str]:
    from hyperlaunch.slurm.env import slurm_environment

    return slurm_environment(recorded_conf, local_cluster=running_dev_cluster_conf, notify=out.note)


def running_dev_cluster_conf() -> str | None:
    """SLURM_CONF of the dev cluster in the default place, when one is running."""
    from hyperlaunch.devcluster.cluster import default_root, running_state

    running = running_state(default_root())
    return str(running.layout.slurm_conf) if running is not None else None
