"""What a SageMaker HyperPod cluster says about its nodes: the instance group (and so the
instance type) behind each Slurm node, and each node's instance id, which changes when
HyperPod replaces a node under the same Slurm name.

Two sources, asked only when the user left the instance type to the cluster (or when a job's
instance ids are recorded):

- `/opt/ml/config/resource_config.json` on a HyperPod node (SAGEMAKER_RESOURCE_CONFIG_PATH
  overrides the path, as AWS's own tools allow). It is often readable by root alone, so a
  file that cannot be read is a reason to look elsewhere, never an error.
- The SageMaker API for a cluster named with `--hyperpod-cluster`: `describe_cluster` for the
  instance groups, `list_cluster_nodes` + `describe_cluster_node` for each node's address and
  instance id. Through hyperlaunch.aws.client only; answers are cached for a few minutes per cluster.

Slurm names a HyperPod node `ip-` + its address with dashes (`ip-10-1-38-128`): that is how
a partition's nodes map to their instance group. Torch-free, boto3 only through hyperlaunch.aws.client."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.aws import client as aws
from hyperlaunch.core.bounded_read import NotRegularFile, read_regular
from hyperlaunch.core.errors import AwsError, HyperlaunchError, InvalidInput
from hyperlaunch.core.instances import canonical_instance_type, get_instance, known_instance_types

RESOURCE_CONFIG_ENV = "SAGEMAKER_RESOURCE_CONFIG_PATH"
DEFAULT_RESOURCE_CONFIG = Path("/opt/ml/config/resource_config.json")
RESOURCE_CONFIG_NAME = "resource_config.json"
API_SOURCE = "SageMaker API"
CACHE_TTL_S = 300.0
"""How long an API answer about a cluster is reused: long enough for render-then-submit, short
enough that a scaled or repaired cluster is seen again soon."""
_MAX_CONFIG_BYTES = 16 << 20
_DESCRIBE_WORKERS = 8
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


# -- which source -----------------------------------------------------------------------------


def cluster_view(
    cluster: str | None, environ: Mapping[str, str], *, nodes_matter: Callable[[], bool] = lambda: False
) -> tuple[ClusterView | None, list[str]]:
    """What the cluster a job here runs on says, and why sources were passed over: this node's
    resource config (when it is `cluster`'s, or none is named), else the SageMaker API for
    `cluster` (its AwsErrors raised: the user named that cluster), each node described too
    when the groups have several GPU types and `nodes_matter()` (the partition's nodes are
    known). (None, reasons) when neither applies."""
    path = resource_config_path(environ)
    passed_over: list[str] = []
    try:
        view = read_resource_config(path)
        if cluster is None or view.is_cluster(cluster):
            return view, passed_over
        passed_over.append(f"{path} describes cluster {view.cluster or '?'}, not {cluster}")
    except Unavailable as why:
        passed_over.append(str(why))
    if cluster is None:
        return None, passed_over
    view = describe_cluster(cluster)
    if len(view.gpu_types()) > 1 and nodes_matter():
        view = describe_cluster(cluster, with_nodes=True)
    return view, passed_over


# -- the SageMaker API, cached ---------------------------------------------------------------


def describe_cluster(cluster: str, *, with_nodes: bool = False, fresh: bool = False) -> ClusterView:
    """The cluster as the SageMaker API describes it (groups; with `with_nodes`, every node's
    Slurm name and instance id too), from the cache when an answer younger than CACHE_TTL_S
    holds what is asked and `fresh` is not set. AwsError (exit 10) for AWS's refusals."""
    cache = _cache_path(cluster)
    if not fresh:
        cached = _read_cache(cache)
        if cached is not None and (cached.nodes is not None or not with_nodes):
            return cached
    what = f"hyperpod cluster {cluster!r}"
    client = aws.client("sagemaker", region=region_of(cluster))
    answer = aws.call(what, client.describe_cluster, ClusterName=cluster)
    nodes = _describe_nodes(what, client, cluster) if with_nodes else None
    view = view_from_api(answer, nodes)
    _write_cache(cache, view)
    return view


def view_from_api(answer: Mapping[str, Any], node_details: Sequence[Mapping[str, Any]] | None) -> ClusterView:
    """The view in describe_cluster's answer and describe_cluster_node's NodeDetails; a node
    without PrivatePrimaryIp (still starting) has no Slurm name yet and is left out."""
    groups = tuple(
        Group(
            str(group.get("InstanceGroupName", "")),
            str(group.get("InstanceType", "")),
            int(group.get("CurrentCount", group.get("TargetCount", 0)) or 0),
        )
        for group in answer.get("InstanceGroups", [])
    )
    nodes = None
    if node_details is not None:
        nodes = tuple(
            Node(node_name(str(d["PrivatePrimaryIp"])), str(d.get("InstanceId", "")), str(d.get("InstanceGroupName", "")))
            for d in node_details
            if d.get("PrivatePrimaryIp")
        )
    name = str(answer.get("ClusterName", ""))
    return ClusterView(name, str(answer.get("ClusterArn", "")), f"cluster {name} ({API_SOURCE})", groups, nodes)


def _describe_nodes(what: str, client: Any, cluster: str) -> list[Mapping[str, Any]]:
    summaries = aws.paginate(what, client, "list_cluster_nodes", "ClusterNodeSummaries", ClusterName=cluster)

    def describe(summary: Mapping[str, Any]) -> Mapping[str, Any]:
        node = summary["InstanceId"]
        answer = aws.call(f"{what} node {node}", client.describe_cluster_node, ClusterName=cluster, NodeId=node)
        return dict(answer.get("NodeDetails", {}))

    with ThreadPoolExecutor(max_workers=_DESCRIBE_WORKERS) as pool:  # one call per node
        return list(pool.map(describe, summaries))


def _cache_path(cluster: str) -> Path | None:
    """One file per cluster and AWS identity in use (a profile, region or endpoint of its own
    is another answer). None when the hyperlaunch home cannot hold one."""
    from hyperlaunch.core.paths import hyperlaunch_home

    key = "\0".join([cluster, *(os.environ.get(name, "") for name in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"))])
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    try:
        return hyperlaunch_home() / "cache" / f"hyperpod-cluster-{digest}.json"
    except HyperlaunchError:
        return None


def _read_cache(path: Path | None, now: float | None = None) -> ClusterView | None:
    if path is None:
        return None
    try:
        data = json.loads(read_regular(path, _MAX_CONFIG_BYTES))
        age = (time.time() if now is None else now) - float(data["written_at"])
        if not 0 <= age < CACHE_TTL_S:
            return None
        view = data["view"]
        nodes = view["nodes"]
        return ClusterView(
            cluster=str(view["cluster"]),
            arn=str(view["arn"]),
            source=str(view["source"]),
            groups=tuple(Group(str(g["name"]), str(g["instance_type"]), int(g["count"])) for g in view["groups"]),
            nodes=None if nodes is None else tuple(Node(str(n["name"]), str(n["instance_id"]), str(n["group"])) for n in nodes),
        )
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None  # none, stale, or not ours: ask AWS again


def _write_cache(path: Path | None, view: ClusterView) -> None:
    """Written whole or not at all (a temporary file renamed into place), private to the user;
    a cache that cannot be written only costs the next call a request."""
    if path is None:
        return
    from hyperlaunch.core.atomic_file import write_atomically
    from hyperlaunch.core.private_files import FILE_MODE, private_dir

    with contextlib.suppress(OSError):
        private_dir(path.parent)
        document = json.dumps({"written_at": time.time(), "view": asdict(view)}) + "\n"
        write_atomically(path, document.encode("utf-8"), mode=FILE_MODE)


# -- instance ids, for nodes HyperPod replaced ------------------------------------------------


def instance_ids(cluster: str | None, environ: Mapping[str, str], *, fresh: bool = False) -> dict[str, str] | None:
    """Every cluster node's instance id by Slurm name: from this node's resource config, else
    the API for `cluster`. None when nothing says this is HyperPod (no resource config, no
    cluster named); Unavailable (with the reason) when it is but the ids cannot be read."""
    path = resource_config_path(environ)
    try:
        view: ClusterView | None = read_resource_config(path)
    except Unavailable:
        if cluster is None and os.path.lexists(path):
            raise  # a HyperPod node whose config this user cannot read
        view = None
    if view is not None and (cluster is None or view.is_cluster(cluster)):
        return {node.name: node.instance_id for node in view.nodes or ()}
    if cluster is None:
        return None
    try:
        view = describe_cluster(cluster, with_nodes=True, fresh=fresh)
    except AwsError as err:
        raise Unavailable(err.one_line()) from None
    return {node.name: node.instance_id for node in view.nodes or ()}


def describe_instance_source(
    *,
    cluster: str | None = None,
    partition_nodes: Sequence[str] | None = None,
    where: str = "the default partition",
    environ: Mapping[str, str] | None = None,
) -> str:
    """One line for `doctor`: the instance type a job here gets from the HyperPod cluster, and
    where it comes from, or why none does (jobs then render for cpu unless --instance-type
    says otherwise). `partition_nodes`: the Slurm names of `where`'s nodes, when the caller
    has asked Slurm. Never raises a HyperlaunchError."""
    try:
        view, passed_over = cluster_view(cluster, os.environ if environ is None else environ, nodes_matter=lambda: partition_nodes is not None)
    except HyperlaunchError as err:
        return f"cannot tell: {err.one_line()}"
    if view is None:
        return f"none from the cluster ({'; '.join(passed_over)}): cpu unless --instance-type or --hyperpod-cluster"
    choice = choose_instance_type(view, partition_nodes, where, "" if partition_nodes is not None else f"{where}'s nodes not asked")
    text = f"{canonical_instance_type(choice.instance_type)} ({choice.source})"
    if choice.instance_type != "cpu" and canonical_instance_type(choice.instance_type) not in known_instance_types():
        text += "; hyperlaunch has no preset for it: pass --instance-type"
    return f"{text}; warning: {choice.warning}" if choice.warning else text
