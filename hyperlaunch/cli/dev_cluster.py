"""`hyperlaunch dev-cluster ...`: a real multi-node Slurm cluster on one machine."""

from __future__ import annotations

from pathlib import Path

import typer

from hyperlaunch.cli._help import HelpCommand
from hyperlaunch.cli._output import out
from hyperlaunch.devcluster.layout import DEFAULT_BASE_PORT, GPU_PARTITION, GPUS_PER_GPU_NODE

app = typer.Typer(
    help=(
        "A real multi-node Slurm cluster on this machine (Slurm, slurmdbd + MariaDB for sacct, "
        "munge; one slurmd per node), for trying hyperlaunch before HyperPod and for its tests. "
        "Needs root; installs missing Debian packages. Typical use:\n\n"
        "  hyperlaunch dev-cluster up --nodes 3\n\n"
        "  export SLURM_CONF=~/.hyperlaunch/dev-cluster/etc/slurm.conf\n\n"
        "  hyperlaunch dev-cluster kill-node node2   # simulate a dead machine\n\n"
        "  hyperlaunch dev-cluster down"
    ),
    no_args_is_help=True,
)

DirOption = typer.Option(
    None,
    "--dir",
    help="Directory holding the cluster's config, state and logs [default: $HYPERLAUNCH_HOME/dev-cluster].",
    envvar="HYPERLAUNCH_DEV_CLUSTER_DIR",
)


def _root(directory: Path | None) -> Path:
    from hyperlaunch.devcluster import cluster

    return directory if directory is not None else cluster.default_root()


def _progress(message: str) -> None:
    out.note(message, source="dev-cluster")


@app.command(cls=HelpCommand)
def up(
    nodes: int = typer.Option(3, "--nodes", "-N", help="Number of nodes (slurmd daemons), named node1..nodeN."),
    cpus_per_node: int = typer.Option(2, "--cpus-per-node", help="CPUs each node offers to Slurm."),
    base_port: int = typer.Option(
        DEFAULT_BASE_PORT, "--base-port", help="slurmctld's port; slurmdbd, MariaDB and the slurmds use the ports after it."
    ),
    gpu_nodes: int = typer.Option(
        0,
        "--gpu-nodes",
        help=(
            f"Extra nodes gpu1..gpuN in a partition of their own ({GPU_PARTITION}), each declaring "
            f"Gres=gpu:{GPUS_PER_GPU_NODE} backed by fake device files (no GPU needed): to try jobs that "
            "request GPUs as GRES. The default partition stays without GRES."
        ),
    ),
    directory: Path | None = DirOption,
) -> None:
    """Start the cluster (idempotent: a running cluster is left as it is).

    \b
    Examples:
      hyperlaunch dev-cluster up --nodes 3
      export SLURM_CONF=~/.hyperlaunch/dev-cluster/etc/slurm.conf   # as `up` prints it
    """
    from hyperlaunch.devcluster import cluster

    result = cluster.up(
        root=_root(directory),
        nodes=nodes,
        cpus_per_node=cpus_per_node,
        base_port=base_port,
        gpu_nodes=gpu_nodes,
        progress=_progress,
    )
    layout = result.state.layout
    if result.already_running:
        killed = result.state.killed_nodes
        extra = f"; killed nodes: {', '.join(killed)} (revive with 'dev-cluster revive-node')" if killed else ""
        if result.dead_services:
            extra += f"; {', '.join(result.dead_services)} dead: 'dev-cluster down', then 'up', starts it afresh"
        if layout.gpu_nodes != gpu_nodes:
            extra += f"; it has {layout.gpu_nodes} GPU node(s), not {gpu_nodes}: 'dev-cluster down' first to change that"
        out.text(f"dev cluster already running in {layout.root} with {len(layout.node_names)} nodes; nothing changed{extra}")
    else:
        out.text(f"dev cluster up: {len(layout.node_names)} nodes ({', '.join(layout.node_names)}) in {layout.root}")
        if layout.gpu_nodes:
            out.text(f"partition {GPU_PARTITION}: {', '.join(layout.gpu_node_names)} with Gres=gpu:{GPUS_PER_GPU_NODE} each (fake devices)")
    out.text("use it with:")
    out.text(f"  export SLURM_CONF={layout.slurm_conf}")


@app.command(cls=HelpCommand)
def down(directory: Path | None = DirOption) -> None:
    """Stop every process the cluster started (daemons and their jobs), nothing else.

    \b
    Examples:
      hyperlaunch dev-cluster down
    """
    from hyperlaunch.devcluster import cluster

    stopped = cluster.down(root=_root(directory), progress=_progress)
    out.text("dev cluster stopped" if stopped else "no dev cluster was running")


@app.command(cls=HelpCommand)
def status(
    directory: Path | None = DirOption,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Which daemons are alive, and each node's Slurm state. Exits 5 when no dev cluster is
    running (with --json: 0, and "running": false).

    \b
    Examples:
      hyperlaunch dev-cluster status
      hyperlaunch dev-cluster status --json
    """
    from hyperlaunch.devcluster import cluster

    info = cluster.status(root=_root(directory))
    if as_json:
        doc = {
            "root": str(info.root),
            "running": info.running,
            "slurm_conf": str(info.slurm_conf) if info.slurm_conf else None,
            "daemons": [d.__dict__ for d in info.daemons],
            "nodes": [n.__dict__ for n in info.nodes],
            "killed_nodes": info.killed_nodes,
        }
        out.json(doc)  # "running" says it; the exit code stays 0 for scripts that read it
        return
    if not info.daemons:
        raise _not_running(info.root)  # its one line says it: nothing to list above it
    for daemon in info.daemons:
        mark = "alive" if daemon.alive else "DEAD "
        out.text(f"{mark}  {daemon.name:<14} pid {daemon.pid:<8} log {daemon.log}")
    for node in info.nodes:
        reason = f"  ({node.reason})" if node.reason and node.reason != "none" else ""
        out.text(f"node   {node.name:<14} {node.state}{reason}")
    if info.running and info.slurm_conf:
        out.text(f"export SLURM_CONF={info.slurm_conf}")
    if not info.running:
        raise _not_running(info.root)


def _not_running(root: Path) -> Exception:
    from hyperlaunch.core.errors import ClusterError

    return ClusterError(f"no dev cluster running in {root}", hint="start it with 'hyperlaunch dev-cluster up'")


@app.command("kill-node", cls=HelpCommand)
def kill_node(node: str = typer.Argument(..., help="Node name, e.g. node2."), directory: Path | None = DirOption) -> None:
    """Simulate a dead machine: SIGKILL the node's slurmd and every job process on it.

    \b
    Examples:
      hyperlaunch dev-cluster kill-node node2   # then watch: hyperlaunch status 42
    """
    from hyperlaunch.devcluster import cluster

    killed = cluster.kill_node(root=_root(directory), node=node)
    out.text(f"killed {node}: {len(killed)} processes ({' '.join(map(str, killed))})")


@app.command("revive-node", cls=HelpCommand)
def revive_node(
    node: str = typer.Argument(..., help="Node name, e.g. node2."),
    directory: Path | None = DirOption,
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once slurmd runs, before Slurm marks the node ready."),
) -> None:
    """Start a killed node's slurmd again; Slurm returns it to service when it registers.

    \b
    Examples:
      hyperlaunch dev-cluster revive-node node2
    """
    from hyperlaunch.devcluster import cluster

    record = cluster.revive_node(root=_root(directory), node=node, progress=_progress, wait=not no_wait)
    out.text(f"revived {node} (slurmd pid {record.pid})")
