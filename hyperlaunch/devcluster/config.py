"""slurm.conf and slurmdbd.conf for a dev cluster: pure text from a ClusterLayout.

Settings chosen for quick fault handling, so node-failure tests finish in seconds, not
minutes: SlurmdTimeout=10, cred_expire=5 (a requeued job waits that long before it may
start again), JobRequeue=1, ReturnToService=2 (a revived node rejoins by itself)."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.devcluster.layout import CLUSTER_NAME, GPU_PARTITION, GPUS_PER_GPU_NODE, PARTITION, ClusterLayout

SLURMD_TIMEOUT_S = 10
CRED_EXPIRE_S = 5


def _ports(layout: ClusterLayout, first_index: int, count: int) -> str:
    first, last = layout.slurmd_port(first_index), layout.slurmd_port(first_index + count - 1)
    return f"{first}" if first == last else f"[{first}-{last}]"


def slurm_conf(layout: ClusterLayout) -> str:
    lines = [
        "# Written by `hyperlaunch dev-cluster up`; rewritten on every start.",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={layout.hostname}(127.0.0.1)",
        f"SlurmctldPort={layout.slurmctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket},cred_expire={CRED_EXPIRE_S}",
        f"StateSaveLocation={layout.state_dir}",
        f"SlurmdSpoolDir={layout.spool}/%n",
        f"SlurmctldPidFile={layout.run_dir}/slurmctld.pid",
        f"SlurmdPidFile={layout.run_dir}/slurmd-%n.pid",
        f"SlurmctldLogFile={layout.log('slurmctld')}",
        f"SlurmdLogFile={layout.log_dir}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # No systemd or cgroups here: track processes by parentage, bind nothing.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/linux",
        "JobAcctGatherFrequency=30",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SchedulerType=sched/backfill",
        # A requeued job becomes eligible cred_expire seconds later, but only a scheduling
        # pass starts it: every 5 s here instead of the backfill's default 30 s.
        "SchedulerParameters=bf_interval=5,sched_interval=10",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        # Nodes advertise what the config says, not what this one machine has.
        "SlurmdParameters=config_overrides",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={layout.slurmdbd_port}",
        # With slurmdbd, this names the munge socket of the accounting connections.
        f"AccountingStoragePass=socket={layout.munge_socket}",
        "JobCompType=jobcomp/none",
        "JobRequeue=1",
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        "SlurmctldTimeout=30",
        "MessageTimeout=10",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=300",
        "ReturnToService=2",
        "KillOnBadExit=1",
        *_node_lines(layout),
    ]
    return "\n".join(lines) + "\n"


def _node_lines(layout: ClusterLayout) -> list[str]:
    """The nodes and partitions. Without GPU nodes the file declares no GRES at all (as many
    HyperPod clusters do); with them, the GPU nodes sit in a partition of their own, so jobs
    on the default partition never land on them."""
    def nodes(names: list[str], first_index: int, extra: str = "") -> str:
        return (
            f"NodeName={','.join(names)} NodeHostname={layout.hostname} NodeAddr=127.0.0.1 "
            f"Port={_ports(layout, first_index, len(names))} CPUs={layout.cpus_per_node} "
            f"RealMemory={layout.memory_mb_per_node}{extra} State=UNKNOWN"
        )

    cpu = layout.cpu_node_names
    if not layout.gpu_nodes:
        return [nodes(cpu, 0), f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP"]
    gpu = layout.gpu_node_names
    return [
        "GresTypes=gpu",
        nodes(cpu, 0),
        nodes(gpu, len(cpu), f" Gres=gpu:{GPUS_PER_GPU_NODE}"),
        f"PartitionName={PARTITION} Nodes={','.join(cpu)} Default=YES MaxTime=INFINITE State=UP",
        f"PartitionName={GPU_PARTITION} Nodes={','.join(gpu)} MaxTime=INFINITE State=UP",
    ]


def gres_conf(layout: ClusterLayout) -> str | None:
    """gres.conf for the GPU nodes, None without them. AutoDetect=off: there is no NVML here;
    File= names the fake device files (fake_gpu_files), which slurmd requires to exist."""
    if not layout.gpu_nodes:
        return None
    files = f"{layout.fake_gpu_dir}/nvidia[0-{GPUS_PER_GPU_NODE - 1}]"
    return (
        "# Written by `hyperlaunch dev-cluster up`; rewritten on every start.\n"
        "AutoDetect=off\n"
        f"NodeName={','.join(layout.gpu_node_names)} Name=gpu File={files}\n"
    )


def fake_gpu_files(layout: ClusterLayout) -> list[Path]:
    """The files gres.conf's File= names, shared by every GPU node (all on this host)."""
    return [layout.fake_gpu_dir / f"nvidia{i}" for i in range(GPUS_PER_GPU_NODE)] if layout.gpu_nodes else []


def slurmdbd_conf(layout: ClusterLayout, *, db_password: str) -> str:
    lines = [
        "# Written by `hyperlaunch dev-cluster up`; rewritten on every start.",
        "AuthType=auth/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        f"DbdHost={layout.hostname}",
        "DbdAddr=127.0.0.1",
        f"DbdPort={layout.slurmdbd_port}",
        "SlurmUser=root",
        "DebugLevel=info",
        f"LogFile={layout.log('slurmdbd')}",
        f"PidFile={layout.run_dir}/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={layout.mariadb_port}",
        "StorageUser=slurm",
        f"StoragePass={db_password}",
        "StorageLoc=slurm_acct_db",
    ]
    return "\n".join(lines) + "\n"
