"""A job asking for more nodes than its partition has never starts: Slurm accepts it (unless the
site sets EnforcePartLimits) and leaves it PENDING (PartitionNodeLimit) for good. `submit`,
`resume` and `sweep` refuse it before sbatch instead, counting the partition's nodes in any
state (a drained or powered-down node may come back; a missing one will not) less the ones
the job excludes."""

from __future__ import annotations

from collections.abc import Mapping

from hyperlaunch.core.errors import InvalidInput, SlurmError
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.slurm import commands as slurm
from hyperlaunch.slurm import hostlist


def refuse_more_nodes_than_partition(spec: JobSpec, *, env: Mapping[str, str]) -> None:
    """InvalidInput when `spec` asks for more nodes (spares included) than its partition has
    outside `--exclude`. No answer from sinfo, or a partition it does not list, is left to
    sbatch to judge."""
    try:
        nodes = [node.name for node in slurm.partition_nodes(spec.partition, env=env)]
    except SlurmError:
        return
    if not nodes:
        return
    excluded = {name for pattern in spec.exclude for name in hostlist.expand(pattern)}
    usable = [name for name in nodes if name not in excluded]
    wanted = spec.nodes + spec.spare_nodes
    if wanted <= len(usable):
        return
    where = f"partition {spec.partition}" if spec.partition else "the default partition"
    held = f"{where} has {len(nodes)} node(s)"
    if len(usable) < len(nodes):
        held += f", {len(nodes) - len(usable)} of them excluded (--exclude)"
    raise InvalidInput(
        f"the job asks for {spec.nodes_text} but {held}: Slurm would queue it and never start it (PartitionNodeLimit)",
        hint=f"ask for {len(usable)} node(s) or fewer, spares included, or name another --partition",
    )
