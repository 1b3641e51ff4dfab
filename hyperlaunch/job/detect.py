"""What hyperlaunch decides about the cluster before anything is rendered, each decision with
where it came from: the decided value goes into the JobSpec (so the job record holds it and
`resume` renders the same job), the source is printed beside the training settings.

Rendering never asks Slurm; this module does, through hyperlaunch.slurm.nodes, and only when the
user left the decision to it."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hyperlaunch.aws import hyperpod, hyperpod_lookup
from hyperlaunch.aws.hyperpod import HYPERPOD_MARKER_DIR
from hyperlaunch.core.errors import InvalidInput, SlurmError
from hyperlaunch.core.instances import canonical_instance_type, get_instance, known_instance_types
from hyperlaunch.slurm import nodes as slurm_nodes
from hyperlaunch.slurm.nodes import PartitionNode

_GPU_GRES = re.compile(r"(?:^|,)gpu(?::|$|\()")


@dataclass(frozen=True)
class Decision:
    """One job setting hyperlaunch decided (or the user set), and why."""

    name: str
    """The JobSpec field."""
    value: str | bool
    source: str
    warning: str = ""
    """Said on stderr beside the settings: the choice may not be what the user wants."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def gres_gpus(*, gpus: int, partition: str | None, slurm_env: Mapping[str, str] | None) -> Decision:
    """Whether to request the job's GPUs as GRES (`--gpus-per-node`), asked of the cluster: only
    where slurm.conf declares GPU GRES and the partition's nodes have it. Many HyperPod clusters
    declare none, and sbatch refuses a GPU request there ("Invalid generic resource
    specification"); whole nodes (--exclusive) and torchrun's process count do instead.
    No cluster to ask (`slurm_env` None, or none answers): no GRES."""
    def off(why: str) -> Decision:
        return Decision("gres_gpus", "off", why)

    if gpus == 0:
        return off("no GPUs to request")
    if slurm_env is None:
        return off("no Slurm cluster asked")
    try:
        kinds = slurm_nodes.gres_types(env=slurm_env)
        if "gpu" not in kinds:
            declared = ",".join(kinds) or "(null)"
            return off(f"the cluster declares no GPU GRES (scontrol show config: GresTypes = {declared})")
        rows = slurm_nodes.partition_nodes(partition, env=slurm_env)
    except SlurmError as err:
        where = "no Slurm here (scontrol not on PATH)" if "not found on PATH" in str(err) else "no Slurm cluster answered"
        return off(f"{where}; pass --gres-gpus to request them as GRES anyway")
    where = f"partition {partition}" if partition else "the default partition"
    if not rows:
        return off(f"sinfo lists no {where}")
    with_gpus = [row.gres for row in rows if _GPU_GRES.search(row.gres)]
    if not with_gpus:
        return off(f"{where}'s nodes have no GPU GRES (sinfo: {', '.join(sorted({r.gres for r in rows}))})")
    # Some nodes with GPU GRES and some without (a login node in the partition): requesting
    # GRES keeps the job on the ones with GPUs.
    return Decision("gres_gpus", "on", f"{where}'s nodes have GPU GRES (sinfo: {', '.join(sorted(set(with_gpus)))})")


def instance_type(
    *,
    partition: str | None,
    hyperpod_cluster: str | None,
    slurm_env: Callable[[], Mapping[str, str]] | None,
    environ: Mapping[str, str],
) -> Decision:
    """The instance type when no flag or config names one, from the HyperPod cluster: this
    node's resource_config.json (a file it cannot read is a reason to look further, never an
    error), else the SageMaker API for `hyperpod_cluster` (AWS's refusals are AwsErrors: the
    user named that cluster). Either maps the partition's Slurm nodes (asked of the cluster of
    `slurm_env()`, when there is one) to their instance groups; see hyperpod.choose_instance_type.
    Nothing: `cpu`, with a warning when the partition's nodes have GPU GRES."""
    where = f"partition {partition}" if partition else "the default partition"
    nodes = _partition_nodes(partition, slurm_env, where)
    view, passed_over = hyperpod_lookup.cluster_view(hyperpod_cluster, environ, nodes_matter=lambda: nodes()[0] is not None)
    if view is None:
        return _cpu([*passed_over, "no --hyperpod-cluster"], nodes, where)
    found, why = nodes()
    choice = hyperpod.choose_instance_type(view, None if found is None else [n.name for n in found], where, why)
    if choice.instance_type != "cpu":
        try:
            get_instance(choice.instance_type)
        except InvalidInput:
            raise InvalidInput(
                f"instance type {choice.instance_type} ({choice.source}) has no preset in hyperlaunch; "
                f"known: {', '.join(known_instance_types())}",
                hint="pass --instance-type, or add a file under env/ for it",
            ) from None
    return Decision("instance_type", canonical_instance_type(choice.instance_type), choice.source, choice.warning)


_NodesAnswer = tuple[list[PartitionNode] | None, str]
"""The partition's nodes, or None and why not."""


def _partition_nodes(
    partition: str | None, slurm_env: Callable[[], Mapping[str, str]] | None, where: str
) -> Callable[[], _NodesAnswer]:
    """The partition's nodes, asked of Slurm at most once and only when needed; None with the
    reason when there is no answer."""
    @functools.cache
    def ask() -> _NodesAnswer:
        if slurm_env is None:
            return None, "no Slurm cluster asked"
        try:
            found = slurm_nodes.partition_nodes(partition, env=slurm_env())
        except SlurmError as err:
            return None, "no Slurm here" if "not found on PATH" in str(err) else "no Slurm cluster answered"
        return (found, "") if found else (None, f"sinfo lists no node in {where}")
    return ask


_SET_THE_TYPE = (
    "pass --instance-type (e.g. p5.48xlarge), set instance_type in hyperlaunch.toml (or "
    "HYPERLAUNCH_INSTANCE_TYPE), or --hyperpod-cluster on HyperPod"
)
"""The three ways to name the instance type, for every warning that had to guess."""


def _cpu(tried: list[str], nodes: Callable[[], _NodesAnswer], where: str) -> Decision:
    """No HyperPod answer: the GPU instance type the partition's nodes carry as a feature
    (sinfo %f, as AWS ParallelCluster and many sites set it), else `cpu`, warned about where
    the nodes have GPU GRES."""
    source = "default, nothing names another (no --instance-type; " + "; ".join(tried) + ")"
    found, _ = nodes()
    by_feature = _featured_types(found or [])
    if by_feature:
        chosen = max(by_feature, key=lambda name: (by_feature[name], name))
        named = f"the features of {where}'s nodes name it (sinfo %f: {chosen} on {by_feature[chosen]} node(s))"
        if len(by_feature) == 1:
            return Decision("instance_type", chosen, named)
        others = ", ".join(f"{name} on {count}" for name, count in sorted(by_feature.items()) if name != chosen)
        return Decision(
            "instance_type", chosen, f"{named}; warning: also {others}",
            f"{where}'s nodes are of several GPU types ({chosen} the most numerous; also {others}): {_SET_THE_TYPE}",
        )
    with_gpus = sorted({node.gres for node in found or () if _GPU_GRES.search(node.gres)})
    if not with_gpus:
        return Decision("instance_type", "cpu", source)
    gres = ", ".join(with_gpus)
    return Decision(
        "instance_type", "cpu", f"{source}; warning: {where}'s nodes have GPU GRES ({gres})",
        f"{where}'s nodes have GPUs (GRES {gres}), but the job is rendered for cpu (one process per node, "
        f"no GPU): {_SET_THE_TYPE}",
    )


def _featured_types(nodes: list[PartitionNode]) -> dict[str, int]:
    """GPU instance types with a preset that the nodes' features name, with how many nodes each."""
    known = set(known_instance_types())
    counts: dict[str, int] = {}
    for node in nodes:
        for feature in node.features:
            name = canonical_instance_type(feature.strip().lower())
            if name in known and get_instance(name).gpus_per_node:
                counts[name] = counts.get(name, 0) + 1
                break
    return counts


def hyperpod_mode(*, hyperpod_cluster: str | None, environ: Mapping[str, str], marker: str | None = None) -> Decision:
    """HyperPod auto-resume (`srun --auto-resume=1`) when no flag or config decides it: on
    where this host shows it is part of a HyperPod cluster (its marker folder, or its
    resource_config.json) or the user named one (--hyperpod-cluster); else left to each node
    when the job starts (`auto`: the supervisor looks for the marker there)."""
    from hyperlaunch.core import paths

    marker = marker or HYPERPOD_MARKER_DIR
    if hyperpod_cluster:
        return Decision("hyperpod", "on", f"--hyperpod-cluster {hyperpod_cluster}")
    if paths.is_dir(marker):
        return Decision("hyperpod", "on", f"this host is a HyperPod node ({marker})")
    config = hyperpod.resource_config_path(environ)
    if paths.is_file(config):
        return Decision("hyperpod", "on", f"this host has HyperPod's {config}")
    return Decision("hyperpod", "auto", f"no HyperPod seen here: each node looks for {marker} when the job starts")
