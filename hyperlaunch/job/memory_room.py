"""Whether a job's memory snapshots fit in its nodes' host memory (`submit
--memory-checkpoint-every`), told at submit: the keeper on each node holds the two newest whole
snapshots of its own node's ranks and two of its peer's, each rank keeps the buffers it copies
its state into (the snapshot is taken in the background), and the one being taken passes
through node-local memory (/dev/shm) on its way to the keeper; a job whose snapshots cannot fit
is refused before it waits in the queue, rather than losing nodes to the out-of-memory killer
mid-run."""

from __future__ import annotations

from hyperlaunch.core.disk_space import CHECKPOINT_BYTES_PER_PARAM, format_size
from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.instances import InstancePreset
from hyperlaunch.core.memory_snapshots import KEEP
from hyperlaunch.core.models import ModelSpec
from hyperlaunch.job.spec import JobSpec

HOST_SHARE = 0.5
"""Of a node's memory, the most its snapshots may take: the rest is the training's own (data
loading, pinned buffers, the CUDA context, state offloaded to the CPU)."""
GIB = 1 << 30
COPIES = 2 * KEEP + 2
"""A node's share of the state, as many times as a node with a peer holds it at most."""
COPIES_ALONE = KEEP + 2


def per_node(spec: JobSpec, model: ModelSpec) -> int:
    """Bytes of snapshots one node holds at most: its share of the training state (fp32 weights
    and AdamW's two moments) KEEP times for itself, KEEP times for its peer (none alone), once
    in its ranks' copy buffers and once on its way through node-local memory."""
    share = -(-CHECKPOINT_BYTES_PER_PARAM * model.num_params // spec.job.nodes)
    return share * (COPIES_ALONE if spec.job.nodes == 1 else COPIES)


def note(spec: JobSpec, model: ModelSpec, instance: InstancePreset) -> str | None:
    """The line submit shows for a job that keeps snapshots (None for one that does not);
    InvalidInput where they would take more than HOST_SHARE of the instance's memory."""
    if not spec.recovery.memory_checkpoint_every:
        return None
    needed = per_node(spec, model)
    if instance.host_memory_gib is None:
        return f"memory snapshots: up to {format_size(needed)} of host memory on each node ({instance.name} does not say how much it has)"
    memory = int(instance.host_memory_gib * GIB)
    budget = int(memory * HOST_SHARE)
    if needed > budget:
        state = CHECKPOINT_BYTES_PER_PARAM * model.num_params
        fewer = max(2, -(-state * COPIES // budget))  # the nodes whose share fits, each holding its peer's too
        raise InvalidInput(
            f"--memory-checkpoint-every: {spec.derived.checkpoint_name}'s snapshots need up to {format_size(needed)} of host memory on each "
            f"of {spec.job.nodes} node(s), more than the {format_size(budget)} they may use of {instance.name}'s "
            f"{format_size(memory)}; use at least {fewer} nodes, or drop --memory-checkpoint-every"
        )
    return f"memory snapshots: up to {format_size(needed)} of host memory on each node, of {format_size(memory)}"
