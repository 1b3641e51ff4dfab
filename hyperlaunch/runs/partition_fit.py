"""A job asking for more nodes than its partition has never starts: Slurm accepts it (unless the
site sets EnforcePartLimits) and leaves it PENDING (PartitionNodeLimit) for good. `submit`,
`resume` and `sweep` refuse it before sbatch instead, counting the partition's nodes in any
state (a drained or powered-down node may come back; a missing one will not) less the ones
the job excludes. Where the count may be short of what Slurm can start, nothing is refused:
a cluster that powers nodes up on demand (ResumeProgram: sinfo may not list its cloud nodes
while they are down) or a node sinfo marks as powered down or cloud."""

from __future__ import annotations

from collections.abc import Mapping

from hyperlaunch.core.errors import InvalidInput, SlurmError
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.slurm import hostlist
from hyperlaunch.slurm import nodes as slurm_nodes
from hyperlaunch.slurm.nodes import PartitionNode


def refuse_more_nodes_than_partition(spec: JobSpec, *, env: Mapping[str, str]) -> None:
    """InvalidInput when `spec` asks for more nodes (spares included) than its partition has
    outside `--exclude`. No answer from sinfo, or a partition it does not list, is left to
    sbatch to judge."""
    partition = spec.cluster.partition or env.get("SBATCH_PARTITION") or None  # sbatch's default, as sbatch takes it
    try:
        listed = slurm_nodes.partition_nodes(partition, env=env)
        nodes = [node.name for node in listed]
        excluded = {name for pattern in spec.cluster.exclude for name in hostlist.expand(pattern)}
        usable = [name for name in nodes if name not in excluded]
        if not listed or spec.job.nodes + spec.recovery.spare_nodes <= len(usable) or _grows_on_demand(listed, env):
            return
    except SlurmError:
        return
    where = f"partition {partition}" if partition else "the default partition"
    held = f"{where} has {len(nodes)} node(s)"
    if len(usable) < len(nodes):
        held += f", {len(nodes) - len(usable)} of them excluded (--exclude)"
    raise InvalidInput(
        f"the job asks for {spec.nodes_text} but {held}: Slurm would queue it and never start it (PartitionNodeLimit)",
        hint=f"ask for {len(usable)} node(s) or fewer, spares included, or name another --partition",
    )


_POWER_STATE_MARKS = ("~", "#", "%", "!", "cloud", "power")
"""sinfo's marks of a node powered down or up on demand (`idle~`, `alloc#`, `cloud`, ...)."""


def _grows_on_demand(nodes: list[PartitionNode], env: Mapping[str, str]) -> bool:
    """Whether Slurm may start nodes sinfo does not count now: a power-saving cluster."""
    if any(mark in node.state.lower() for node in nodes for mark in _POWER_STATE_MARKS):
        return True
    program = slurm_nodes.config_values(env=env).get("ResumeProgram", "")
    return program not in ("", "(null)")
