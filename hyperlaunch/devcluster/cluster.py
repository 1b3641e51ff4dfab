"""`dev-cluster up | down | status | kill-node | revive-node`: the orchestration.

`up` either brings the whole cluster up or leaves nothing behind: on any failure it stops
the daemons it started in this call and removes its record. Before it starts anything, it
clears what an earlier run of the folder left without `down` (leftovers)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hyperlaunch.core.errors import ClusterError, HyperlaunchError, InvalidInput
from hyperlaunch.core.paths import hyperlaunch_home
from hyperlaunch.devcluster import config, hosts, install, leftovers, procs, services, state
from hyperlaunch.devcluster.layout import DEFAULT_BASE_PORT, ClusterLayout
from hyperlaunch.slurm import nodes as slurm_nodes
from hyperlaunch.slurm import queue as slurm_queue
from hyperlaunch.slurm.nodes import NodeInfo

Progress = Callable[[str], None]
NODE_READY_TIMEOUT_S = 90.0
MAX_GPU_NODES = 8


def default_root() -> Path:
    return hyperlaunch_home() / "dev-cluster"


def _require_root() -> None:
    if os.geteuid() != 0:
        raise ClusterError(
            "dev-cluster must run as root: it starts slurmd, which runs jobs as their users",
            hint="run it with sudo",
        )


@dataclass(frozen=True)
class UpResult:
    state: state.ClusterState
    already_running: bool
    dead_services: list[str] = field(default_factory=list)
    """Of a cluster already running: its daemons other than slurmd that are dead."""


def running_state(root: Path) -> state.ClusterState | None:
    """The recorded cluster, if any of its daemons is still alive."""
    recorded = state.load(root / "cluster.json")
    if recorded is None:
        return None
    if any(procs.is_alive(rec) for rec in recorded.daemons.values()):
        return recorded
    return None


def up(
    *,
    root: Path,
    nodes: int,
    cpus_per_node: int,
    base_port: int = DEFAULT_BASE_PORT,
    gpu_nodes: int = 0,
    progress: Progress,
) -> UpResult:
    if nodes < 1 or nodes > 64:
        raise InvalidInput(f"--nodes must be between 1 and 64, got {nodes}")
    if not 0 <= gpu_nodes <= MAX_GPU_NODES:
        raise InvalidInput(f"--gpu-nodes must be between 0 and {MAX_GPU_NODES}, got {gpu_nodes}")
    if cpus_per_node < 1:
        raise InvalidInput(f"--cpus-per-node must be at least 1, got {cpus_per_node}")
    if not 1024 <= base_port <= 65535 - 90:
        raise InvalidInput(f"--base-port must be between 1024 and {65535 - 90}, got {base_port}")
    root = root.expanduser().resolve()
    existing = running_state(root)
    if existing is not None:
        dead = [name for name, rec in existing.daemons.items() if not name.startswith("slurmd-") and not procs.is_alive(rec)]
        return UpResult(state=existing, already_running=True, dead_services=dead)
    _require_root()
    install.ensure_installed(progress)
    layout = ClusterLayout(
        root=root,
        nodes=nodes,
        cpus_per_node=cpus_per_node,
        memory_mb_per_node=_memory_per_node_mb(nodes + gpu_nodes),
        base_port=base_port,
        hostname=socket.gethostname().split(".")[0],
        gpu_nodes=gpu_nodes,
    )
    install.ensure_munge_key(layout.munge_key, progress)
    leftovers.clear_unclean_end(layout, progress)
    busy = [port for port in layout.all_ports if procs.port_in_use(port)]
    if busy:
        raise ClusterError(
            f"port{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))} already in use",
            hint="stop what listens there or pick other ports with --base-port",
        )
    services.ensure_layout(layout)
    layout.slurm_conf.write_text(config.slurm_conf(layout))
    layout.slurmdbd_conf.write_text(config.slurmdbd_conf(layout, db_password=services.db_password(layout)))
    _write_gres_files(layout)
    os.chmod(layout.slurmdbd_conf, 0o600)
    current = state.ClusterState(layout=layout)
    try:
        hosts.add_node_names(layout.node_names, layout.root)
        services_first: list[tuple[str, Callable[[], procs.ProcessRecord]]] = [
            ("munge", lambda: services.start_munge(layout)),
            ("MariaDB", lambda: services.start_mariadb(layout)),
            ("slurmdbd", lambda: services.start_slurmdbd(layout)),
            ("slurmctld", lambda: services.start_slurmctld(layout)),
        ]
        for label, start in services_first:
            _start(current, label, start, progress)
        # Before any slurmd starts: a job the saved state has running cannot be running for real.
        leftovers.end_lost_jobs(services.daemon_env(layout), progress)
        for node in layout.node_names:
            _start(current, f"slurmd {node}", lambda n=node: services.start_slurmd(layout, n), progress)  # type: ignore[misc]
        services.wait_nodes_ready(
            layout,
            layout.node_names,
            timeout_s=NODE_READY_TIMEOUT_S,
            progress=progress,
            logs={n: current.daemons[f"slurmd-{n}"].log for n in layout.node_names},
            resume_drained=True,
        )
    except (HyperlaunchError, OSError, KeyboardInterrupt) as err:
        progress("start failed: stopping what was started")
        _stop_everything(current)
        if isinstance(err, OSError):
            raise ClusterError(f"could not set up the cluster: {err}") from err
        raise
    return UpResult(state=current, already_running=False)


def _start(
    current: state.ClusterState, label: str, start: Callable[[], procs.ProcessRecord], progress: Progress
) -> None:
    """Start one daemon and record it at once, so a failure later stops it."""
    progress(f"starting {label}")
    record = start()
    current.daemons[record.name] = record
    state.save(current, current.layout.state_file)


def _write_gres_files(layout: ClusterLayout) -> None:
    """gres.conf and its fake device files for GPU nodes; without them no gres.conf is left
    from an earlier `up --gpu-nodes`."""
    text = config.gres_conf(layout)
    if text is None:
        layout.gres_conf.unlink(missing_ok=True)
        return
    for path in config.fake_gpu_files(layout):
        if not path.is_symlink():
            path.symlink_to(os.devnull)
    layout.gres_conf.write_text(text)


def _memory_per_node_mb(nodes: int) -> int:
    try:
        total_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        total_kb = 8 * 1024 * 1024
    return max(512, int(total_kb / 1024 * 0.8 / nodes))


def _stop_everything(current: state.ClusterState) -> None:
    layout = current.layout
    ctld = current.daemons.get("slurmctld")
    if ctld is not None and procs.is_alive(ctld):
        # A job left running would come back from slurmctld's saved state at the next `up`
        # as RUNNING with no process behind it: cancel it while Slurm can still record that.
        env = services.daemon_env(layout)
        try:
            slurm_queue.cancel_running_jobs(env=env)
            wait_for(lambda: slurm_queue.running_job_count(env=env) == 0, timeout_s=15)
        except HyperlaunchError:
            pass
    # Job processes first (they would otherwise outlive their slurmd), then daemons in
    # the reverse order of their start, then anything left that carries the cluster's
    # marker. slurmctld's own helper (slurmscriptd) must not be killed before slurmctld:
    # it then waits 15 s for it on shutdown.
    order = [f"slurmd-{n}" for n in layout.node_names] + ["slurmctld", "slurmdbd", "mariadb", "munged"]
    slurmds = len(layout.node_names)
    procs.stop([current.daemons[name] for name in order[:slurmds] if name in current.daemons], grace_s=5)
    for node in layout.node_names:
        procs.kill_pids(procs.node_process_ids(layout.root, node))
    for name in order[slurmds:]:
        if name in current.daemons:
            procs.stop([current.daemons[name]], grace_s=15)
    procs.kill_pids(procs.cluster_process_ids(layout.root))
    layout.state_file.unlink(missing_ok=True)
    hosts.remove_node_names(layout.root)


def down(*, root: Path, progress: Progress) -> list[str]:
    """Stop exactly what `up` started. Returns the names of the daemons that were running."""
    root = root.expanduser().resolve()
    recorded = state.load(root / "cluster.json")
    if recorded is None:
        return []
    _require_root()
    alive = [name for name, rec in recorded.daemons.items() if procs.is_alive(rec)]
    progress(f"stopping {', '.join(alive) if alive else 'nothing (no daemon alive)'}")
    _stop_everything(recorded)
    return alive


@dataclass(frozen=True)
class DaemonStatus:
    name: str
    pid: int
    alive: bool
    log: str


@dataclass(frozen=True)
class ClusterStatus:
    root: Path
    running: bool
    daemons: list[DaemonStatus]
    nodes: list[NodeInfo]
    killed_nodes: list[str]
    slurm_conf: Path | None


def status(*, root: Path) -> ClusterStatus:
    root = root.expanduser().resolve()
    recorded = state.load(root / "cluster.json")
    if recorded is None:
        return ClusterStatus(root, False, [], [], [], None)
    daemons = [
        DaemonStatus(name, rec.pid, procs.is_alive(rec), rec.log) for name, rec in recorded.daemons.items()
    ]
    nodes: list[NodeInfo] = []
    ctld = recorded.daemons.get("slurmctld")
    if ctld is not None and procs.is_alive(ctld):
        try:
            nodes = slurm_nodes.node_states(env=services.daemon_env(recorded.layout))
        except HyperlaunchError:
            nodes = []
    return ClusterStatus(
        root=root,
        running=any(d.alive for d in daemons),
        daemons=daemons,
        nodes=nodes,
        killed_nodes=list(recorded.killed_nodes),
        slurm_conf=recorded.layout.slurm_conf,
    )


def _running_or_fail(root: Path) -> state.ClusterState:
    current = running_state(root.expanduser().resolve())
    if current is None:
        raise ClusterError("no dev cluster is running here", hint="start one with 'hyperlaunch dev-cluster up'")
    return current


def _check_node(current: state.ClusterState, node: str) -> None:
    if node not in current.layout.node_names:
        raise InvalidInput(f"unknown node {node!r}; this cluster has {', '.join(current.layout.node_names)}")


def kill_node(*, root: Path, node: str) -> list[int]:
    """Simulate a dead machine: SIGKILL the node's slurmd and every job process on it."""
    current = _running_or_fail(root)
    _check_node(current, node)
    _require_root()
    slurmd = current.daemons.get(f"slurmd-{node}")
    # slurmd first, so it cannot report the end of the job processes to the controller.
    killed = []
    if slurmd is not None and procs.signal_record(slurmd, procs.signal.SIGKILL):
        killed.append(slurmd.pid)
    killed += procs.kill_pids(procs.node_process_ids(current.layout.root, node))
    if node not in current.killed_nodes:
        current.killed_nodes.append(node)
    state.save(current, current.layout.state_file)
    return sorted(set(killed))


def revive_node(*, root: Path, node: str, progress: Progress, wait: bool = True) -> procs.ProcessRecord:
    """Start the node's slurmd again; ReturnToService=2 returns it to service on registration."""
    current = _running_or_fail(root)
    _check_node(current, node)
    _require_root()
    old = current.daemons.get(f"slurmd-{node}")
    if old is not None and procs.is_alive(old):
        raise ClusterError(f"{node} is not dead: its slurmd (pid {old.pid}) is running")
    record = services.start_slurmd(current.layout, node)
    current.daemons[record.name] = record
    if node in current.killed_nodes:
        current.killed_nodes.remove(node)
    state.save(current, current.layout.state_file)
    if wait:
        services.wait_nodes_ready(
            current.layout, [node], timeout_s=NODE_READY_TIMEOUT_S, progress=progress, logs={node: record.log}
        )
    return record


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
