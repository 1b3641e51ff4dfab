"""Where every file of a dev cluster lives and which ports it uses: one directory holds
config, state, spool, logs and pids, so `down` and a fresh `up` know exactly what is theirs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_BASE_PORT = 17817
CLUSTER_NAME = "hldev"
PARTITION = "dev"
GPU_PARTITION = "gpu"
GPUS_PER_GPU_NODE = 8
"""As on a p5.48xlarge, so a p5 job's `--gpus-per-node=8` fits one node."""
MACHINE_MUNGE_KEY = Path("/etc/munge/munge.key")
"""The key munge's Debian package makes, which a munged on munge's default socket reads: every
dev cluster's munged reads it too, so a credential one of them encodes decodes anywhere here."""


@dataclass(frozen=True, kw_only=True)
class ClusterLayout:
    """The paths and ports of one dev cluster."""

    root: Path
    """Directory holding everything the cluster writes."""
    nodes: int = 3
    """Number of slurmd daemons, named node1..nodeN."""
    cpus_per_node: int = 2
    """CPUs each node advertises to Slurm (config_overrides: it may exceed the real count)."""
    memory_mb_per_node: int = 4096
    """RealMemory each node advertises."""
    base_port: int = DEFAULT_BASE_PORT
    """slurmctld listens here; slurmdbd, MariaDB and the slurmd daemons on the ports after it."""
    hostname: str = "localhost"
    """This machine's host name: every node is a slurmd on it."""
    gpu_nodes: int = 0
    """Extra nodes gpu1..gpuN, alone in partition `gpu`, each declaring GPU GRES backed by fake
    device files (no GPU is here): for jobs that request GPUs as GRES. 0: no GRES at all."""

    @property
    def node_names(self) -> list[str]:
        """Every node (every slurmd): node1..nodeN, then gpu1..gpuM."""
        return self.cpu_node_names + self.gpu_node_names

    @property
    def cpu_node_names(self) -> list[str]:
        """The nodes of the default partition `dev`, without GRES."""
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    @property
    def gpu_node_names(self) -> list[str]:
        return [f"gpu{i}" for i in range(1, self.gpu_nodes + 1)]

    # ports
    @property
    def slurmctld_port(self) -> int:
        return self.base_port

    @property
    def slurmdbd_port(self) -> int:
        return self.base_port + 1

    @property
    def mariadb_port(self) -> int:
        return self.base_port + 2

    def slurmd_port(self, index: int) -> int:
        """Port of node{index+1}; Slurm assigns Port=[a-b] to node names in order."""
        return self.base_port + 10 + index

    @property
    def all_ports(self) -> list[int]:
        return [self.slurmctld_port, self.slurmdbd_port, self.mariadb_port] + [
            self.slurmd_port(i) for i in range(len(self.node_names))
        ]

    # directories
    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def mariadb_data(self) -> Path:
        return self.root / "mariadb"

    # files
    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        """Slurm reads gres.conf from slurm.conf's directory."""
        return self.etc / "gres.conf"

    @property
    def fake_gpu_dir(self) -> Path:
        """Stand-ins for /dev/nvidia0..7: gres.conf's File= must name character devices (slurmd
        logs an error for anything else), so each is a link to /dev/null."""
        return self.root / "fake-dev"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.etc / "slurmdbd.conf"

    @property
    def munge_key(self) -> Path:
        """Not the cluster's own: the machine's (MACHINE_MUNGE_KEY)."""
        return MACHINE_MUNGE_KEY

    @property
    def munge_socket(self) -> Path:
        """The cluster's own munged listens here, not on munge's default socket, so no other
        cluster depends on it: slurm.conf names it in AuthInfo (daemons, commands, job
        credentials) and AccountingStoragePass (sacct, sacctmgr, slurmctld -> slurmdbd, which
        ignore AuthInfo), slurmdbd.conf in AuthInfo."""
        return self.run_dir / "munge.socket"

    @property
    def mariadb_socket(self) -> Path:
        return self.run_dir / "mariadb.sock"

    @property
    def db_password_file(self) -> Path:
        return self.etc / "db.password"

    @property
    def state_file(self) -> Path:
        """The record of what is running: pids, nodes, ports."""
        return self.root / "cluster.json"

    def log(self, daemon: str) -> Path:
        return self.log_dir / f"{daemon}.log"

    def directories(self) -> list[Path]:
        gpu_dirs = [self.fake_gpu_dir] if self.gpu_nodes else []
        return [self.etc, self.state_dir, self.log_dir, self.run_dir, self.mariadb_data, *gpu_dirs] + [
            self.spool / name for name in self.node_names
        ]
