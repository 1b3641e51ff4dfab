"""What a SageMaker HyperPod cluster says about its nodes: the instance group (and so the
instance type) behind each Slurm node, and each node's instance id, which changes when
HyperPod replaces a node under the same Slurm name; and which instance type a partition's
nodes give a job.

This module reads `/opt/ml/config/resource_config.json` on a HyperPod node
(SAGEMAKER_RESOURCE_CONFIG_PATH overrides the path, as AWS's own tools allow). It is often
readable by root alone, so a file that cannot be read is a reason to look elsewhere, never an
error. The SageMaker API, the other source, is hyperlaunch.aws.hyperpod_api's;
hyperlaunch.aws.hyperpod_lookup picks between the two.

Slurm names a HyperPod node `ip-` + its address with dashes (`ip-10-1-38-128`): that is how
a partition's nodes map to their instance group. Torch-free, and no boto3."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core.bounded_read import NotRegularFile, read_regular
from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.instances import canonical_instance_type, get_instance

HYPERPOD_MARKER_DIR = "/opt/sagemaker_cluster"
"""A folder every HyperPod node has: where it exists, srun gets --auto-resume=1."""
RESOURCE_CONFIG_ENV = "SAGEMAKER_RESOURCE_CONFIG_PATH"
DEFAULT_RESOURCE_CONFIG = Path("/opt/ml/config/resource_config.json")
RESOURCE_CONFIG_NAME = "resource_config.json"
_MAX_CONFIG_BYTES = 16 << 20
_CLUSTER_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
_CLUSTER_ARN = re.compile(r"arn:aws[a-z-]*:sagemaker:([a-z0-9-]+):[0-9]{12}:cluster/[a-z0-9]{1,63}")
_ACCELERATED = re.compile(r"(p|g|trn|inf)[0-9]")
"""EC2's accelerated families (GPU, Trainium, Inferentia), for types no preset knows."""


class Unavailable(Exception):
    """A source cannot say (no file, unreadable, not the expected shape, no answer); the
    message is the reason, shown where the decision's source is."""


@dataclass(frozen=True)
class Group:
    """One instance group of the cluster."""

    name: str
    instance_type: str
    """As SageMaker writes it: `ml.p5.48xlarge`."""
    count: int


@dataclass(frozen=True)
class Node:
    """One cluster node, by the name Slurm gives it."""

    name: str
    """`ip-10-1-38-128`."""
    instance_id: str
    group: str


@dataclass(frozen=True)
class ClusterView:
    """What one source says about the cluster."""

    cluster: str
    """The cluster's name."""
    arn: str
    source: str
    """Where it was read: the resource config's file name, or `cluster NAME (SageMaker API)`."""
    groups: tuple[Group, ...]
    nodes: tuple[Node, ...] | None = None
    """None when the source was not asked for them (the API without describe_cluster_node)."""

    def is_cluster(self, name_or_arn: str) -> bool:
        return name_or_arn in (self.cluster, self.arn)

    def gpu_types(self) -> list[str]:
        return sorted({g.instance_type for g in self.groups if is_accelerated(g.instance_type)})


@dataclass(frozen=True)
class Choice:
    """The instance type a view gives a partition, and why."""

    instance_type: str
    """`cpu`, or SageMaker's name (`ml.p5.48xlarge`)."""
    source: str
    warning: str = ""


# -- names -----------------------------------------------------------------------------------


def node_name(address: str) -> str:
    """Slurm's name of a HyperPod node: `10.1.38.128` -> `ip-10-1-38-128`."""
    return "ip-" + address.replace(".", "-")


def check_cluster_name(value: str) -> str | None:
    """Why `value` is neither a HyperPod cluster name nor a cluster ARN; None when it is one."""
    if _CLUSTER_NAME.fullmatch(value) or _CLUSTER_ARN.fullmatch(value):
        return None
    return "a cluster name is letters, digits and hyphens (at most 63), or its ARN arn:aws:sagemaker:REGION:ACCOUNT:cluster/ID"


def region_of(cluster: str) -> str | None:
    """The region in a cluster ARN; None for a plain name (the AWS configuration's region)."""
    match = _CLUSTER_ARN.fullmatch(cluster)
    return match.group(1) if match else None


def is_accelerated(instance_type: str) -> bool:
    """GPUs (or other accelerators) in the type: the preset says, else the family's letter."""
    try:
        return get_instance(instance_type).gpus_per_node > 0
    except InvalidInput:
        return _ACCELERATED.match(canonical_instance_type(instance_type)) is not None


# -- resource_config.json ----------------------------------------------------------------------


def resource_config_path(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(RESOURCE_CONFIG_ENV) or DEFAULT_RESOURCE_CONFIG)


def read_resource_config(path: Path) -> ClusterView:
    """The cluster as this node's resource config describes it; Unavailable (with the reason:
    none, not readable, not JSON, not its shape) otherwise."""
    try:
        raw = read_regular(path, _MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise Unavailable(f"no {path}") from None
    except NotRegularFile as err:
        raise Unavailable(f"{path} is {'a folder' if err.is_dir else 'not a regular file'}") from None
    except OSError as err:
        raise Unavailable(f"{path} cannot be read ({err.strerror or err}; often root-only)") from None
    if len(raw) > _MAX_CONFIG_BYTES:
        raise Unavailable(f"{path} is larger than {_MAX_CONFIG_BYTES} bytes")
    try:
        return parse_resource_config(json.loads(raw), source=path.name)
    except RecursionError:
        raise Unavailable(f"{path} is nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, the shape
        raise Unavailable(f"{path} is not a HyperPod resource config ({_short(err)})") from None


def parse_resource_config(data: Any, *, source: str = RESOURCE_CONFIG_NAME) -> ClusterView:
    """The view in a resource_config.json document; ValueError says what does not fit."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    cluster = data.get("ClusterConfig") or {}
    groups, nodes = [], []
    raw_groups = data.get("InstanceGroups")
    if not isinstance(cluster, dict) or not isinstance(raw_groups, list):
        raise ValueError("no ClusterConfig and InstanceGroups")
    for raw in raw_groups:
        name, instance_type = _text(raw, "Name"), _text(raw, "InstanceType")
        instances = raw.get("Instances") or []
        if not isinstance(instances, list):
            raise ValueError(f"Instances of {name} is not a list")
        for instance in instances:
            nodes.append(Node(node_name(_text(instance, "CustomerIpAddress")), _text(instance, "InstanceId"), name))
        groups.append(Group(name, instance_type, len(instances)))
    return ClusterView(
        cluster=str(cluster.get("ClusterName") or ""),
        arn=str(cluster.get("ClusterArn") or ""),
        source=source,
        groups=tuple(groups),
        nodes=tuple(nodes),
    )


def _text(item: object, key: str) -> str:
    value = item.get(key) if isinstance(item, dict) else None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} missing in {_short(item)}")
    return value


def _short(value: object, limit: int = 80) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- choosing the instance type ------------------------------------------------------------


def choose_instance_type(view: ClusterView, partition_nodes: Sequence[str] | None, where: str, why_no_nodes: str = "") -> Choice:
    """The instance type of `where` (a partition, said in words): the accelerated type with
    the most of the partition's nodes, matched by name to their groups (login and controller
    nodes often sit in the default partition); without the partition's nodes (Slurm did not
    answer, or none of them is in the view), the accelerated group with the most instances.
    Several accelerated types: the most numerous, with a warning. None at all: cpu."""
    if partition_nodes is not None and view.nodes is not None:
        group_of = {node.name: node.group for node in view.nodes}
        counts = Counter(group_of[name] for name in partition_nodes if name in group_of)
        if counts:
            return _from_partition(view, counts, where, len(partition_nodes))
        why_no_nodes = f"none of {where}'s {len(partition_nodes)} node(s) is in the cluster"
    counts = Counter({group.name: group.count for group in view.groups})
    return _from_groups(view, counts, why_no_nodes)


def _by_type(view: ClusterView, counts: Mapping[str, int]) -> dict[str, list[tuple[str, int]]]:
    """Instance type -> [(group, count)], groups with no nodes left out."""
    types: dict[str, list[tuple[str, int]]] = {}
    for group in view.groups:
        if counts.get(group.name):
            types.setdefault(group.instance_type, []).append((group.name, counts[group.name]))
    return types


def _total(groups: list[tuple[str, int]]) -> int:
    return sum(count for _, count in groups)


def _names(groups: list[tuple[str, int]]) -> str:
    return ", ".join(name for name, _ in groups)


def _most_numerous(types: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Accelerated types, most nodes first (then most GPUs per node, then by name)."""
    def gpus(instance_type: str) -> int:
        try:
            return get_instance(instance_type).gpus_per_node
        except InvalidInput:
            return 0

    accelerated = [t for t in types if is_accelerated(t)]
    return sorted(accelerated, key=lambda t: (-_total(types[t]), -gpus(t), t))


def _mixed_warning(where: str, types: dict[str, list[tuple[str, int]]], ranked: list[str], counted: str) -> str:
    listed = ", ".join(f"{t} x{_total(types[t])} ({_names(types[t])})" for t in ranked)
    return (
        f"{where} has several accelerated instance types ({listed}); chose {ranked[0]}, the one with the most "
        f"{counted}: pass --instance-type, or a --partition of one type"
    )


def _from_partition(view: ClusterView, counts: Mapping[str, int], where: str, total: int) -> Choice:
    types = _by_type(view, counts)
    ranked = _most_numerous(types)
    if not ranked:
        found = "; ".join(f"{t} ({_names(g)})" for t, g in types.items())
        return Choice("cpu", f"{view.source}: {where}'s nodes are {found}, none with GPUs")
    chosen = ranked[0]
    source = f"{view.source}, {_names(types[chosen])}: {_total(types[chosen])} of {where}'s {total} node(s)"
    others = [t for t in types if t != chosen and t not in ranked]
    if others:
        source += "; not its " + ", ".join(f"{t} ({_names(types[t])})" for t in others)
    warning = _mixed_warning(where, types, ranked, "nodes") if len(ranked) > 1 else ""
    return Choice(chosen, source, warning)


def _from_groups(view: ClusterView, counts: Mapping[str, int], why: str) -> Choice:
    types = _by_type(view, counts)
    ranked = _most_numerous(types)
    if not ranked:
        found = "; ".join(f"{t} ({_names(g)})" for t, g in types.items()) or "no instances"
        return Choice("cpu", f"{view.source}: no GPU instance group ({found})")
    chosen = ranked[0]
    reason = f"{_total(types[chosen])}; {why}" if why else str(_total(types[chosen]))
    source = f"{view.source}, {_names(types[chosen])}: the GPU group with the most instances ({reason})"
    warning = _mixed_warning(f"cluster {view.cluster or '?'}", types, ranked, "instances") if len(ranked) > 1 else ""
    return Choice(chosen, source, warning)
