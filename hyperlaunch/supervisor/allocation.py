"""The job's nodes as an attempt uses them: the allocation Slurm gave it, the round's nodes, the
spares waiting for a lost node, and what becomes of a lost node (given back to Slurm, replaced by
a spare, kept away from the next start). The choices are hyperlaunch.supervisor.decisions'; this
module keeps the nodes and asks Slurm."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.supervisor import slurm_calls
from hyperlaunch.supervisor.decisions import exclusions, replace_lost
from hyperlaunch.supervisor.output import err


class Allocation:
    """The attempt's nodes, known once taken (take()): before, all lists are empty."""

    def __init__(self, options: SupervisorOptions, environ: Mapping[str, str], slurm_job: str) -> None:
        self.options = options
        self.environ = environ
        self.slurm_job = slurm_job
        self.nodes: list[str] = []
        """The allocation's nodes the job still holds (lost ones are given back)."""
        self.round_nodes: list[str] = []
        """The nodes the round's trainers run on, one task each, in rank order."""
        self.spares: list[str] = []
        """Nodes waiting to take a lost node's place."""
        self.nodes_needed = 0
        """How many nodes a round trains on (the allocation but its spares)."""
        self.srun_flags = list(options.srun_flags)
        """The flags of every round's srun step (HyperPod's --auto-resume=1 added where detected)."""
        self.fast_node_check = False
        """Whether a round's nodes are probed for lost ones before Slurm notices them."""

    def take(self) -> None:
        """The allocation as Slurm names it (SLURM_JOB_NODELIST): the first nodes train, the last
        `spare_nodes` wait."""
        self.nodes = slurm_calls.hostnames(self.environ.get("SLURM_JOB_NODELIST", ""))
        self.nodes_needed = max(len(self.nodes) - self.options.spare_nodes, 0)
        self.round_nodes = self.nodes[: self.nodes_needed]
        self.spares = self.nodes[self.nodes_needed :]
        hyperpod, hyperpod_dir = self.options.hyperpod, self.options.hyperpod_dir
        on_hyperpod = hyperpod == "on" or (hyperpod == "auto" and bool(hyperpod_dir) and os.path.isdir(hyperpod_dir))
        if on_hyperpod and hyperpod == "auto":
            # HyperPod replaces a failed node and re-runs the step with --auto-resume=1; other
            # Slurm clusters reject the flag, so it is added only where HyperPod's folder exists.
            self.srun_flags.append("--auto-resume=1")
        # Lost nodes are looked for before Slurm notices them, but not where HyperPod replaces
        # them itself, and not when the node list is unknown.
        self.fast_node_check = not on_hyperpod and bool(self.nodes)

    def replace(self, lost: Sequence[str]) -> tuple[str, ...] | None:
        """A spare in each lost node's place, the lost ones given back: the spares that came in,
        or None where the next round cannot have all its nodes (no spare left, or Slurm did not
        take the lost nodes back)."""
        if not self.spares or not self.give_back(lost):
            return None
        replacement = replace_lost(self.round_nodes, lost, self.spares)
        self.spares = list(replacement.spares_left)
        if len(replacement.nodes) == self.nodes_needed:
            self.round_nodes = list(replacement.nodes)
            return replacement.replaced_by
        short = self.nodes_needed - len(replacement.nodes)
        err(f"hyperlaunch: {short} node(s) short after losing {','.join(lost)}: no spare left")
        return None

    def drop_spares(self, dead: Sequence[str]) -> None:
        """Spares whose nodes died while they waited: no longer spares, and given back to Slurm,
        which would otherwise requeue the whole job once it marks them down."""
        self.spares = [node for node in self.spares if node not in dead]
        given = self.give_back(dead)
        err(
            f"hyperlaunch: spare node(s) {','.join(dead)} stopped answering while idle: "
            + ("given back to Slurm" if given else "could not be given back; Slurm may requeue the job once it marks them down")
            + f"; {len(self.spares)} spare(s) left"
        )

    def give_back(self, lost: Sequence[str]) -> bool:
        """Give the allocation's lost nodes back: Slurm then never waits on them to end the job
        or a requeue, nor ends the job when it marks them down."""
        self.nodes = [node for node in self.nodes if node not in lost]
        return slurm_calls.shrink_to(self.slurm_job, self.nodes)

    def all_gone(self, lost: Sequence[str], gone: Callable[[Sequence[str]], list[str]]) -> list[str]:
        """`lost` and the allocation's other nodes that are gone by now (`gone` probes them), before
        a requeue gives the lost ones back: a node that died with them but was not seen yet, kept
        in the shrunk job, is marked down while the requeue completes, and Slurm (22.05) then finds
        the requeued job never runnable (BadConstraints, held) however many nodes are free."""
        if not lost or not self.fast_node_check:
            return list(lost)
        return [*lost, *gone([node for node in self.nodes if node not in lost])]

    def leave(self, lost: Sequence[str]) -> list[str]:
        """Before a requeue: the lost nodes given back (else the requeue waits until Slurm marks
        them down), and the job's excluded nodes for its next start (none without lost nodes)."""
        if not lost:
            return []
        if not self.give_back(lost):
            err(f"hyperlaunch: could not give back node(s) {','.join(lost)}; the requeue waits until Slurm marks them down")
        return self._exclusions(lost)

    def keep_away(self, lost: Sequence[str], excluded: Sequence[str]) -> None:
        """Once the job is requeued (a running job's excluded nodes cannot change): the next
        start excludes `excluded`, which leave() chose for `lost`."""
        if lost and not slurm_calls.exclude_nodes(self.slurm_job, list(excluded)):
            err(f"hyperlaunch: could not exclude node(s) {','.join(lost)} from the next start")

    def _exclusions(self, lost: Sequence[str]) -> list[str]:
        partition = self.environ.get("SLURM_JOB_PARTITION", "")
        total = slurm_calls.partition_size(partition)
        needs = self.nodes_needed + self.options.spare_nodes
        chosen = exclusions(slurm_calls.excluded_nodes(self.slurm_job), lost, self.options.exclude, total, needs)
        if chosen.dropped:
            err(
                f"hyperlaunch: excluding at most {chosen.room} node(s) (partition {partition or '?'} has {total},"
                f" the job needs {needs}): no longer excluding {','.join(chosen.dropped)}"
            )
        return list(chosen.nodes)

    def down_nodes(self) -> list[str]:
        """The allocation's nodes Slurm lists down (not those given back already)."""
        return slurm_calls.down_nodes(",".join(self.nodes))
