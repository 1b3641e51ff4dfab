"""The SageMaker API's answers about a HyperPod cluster named with `--hyperpod-cluster`:
`describe_cluster` for the instance groups, `list_cluster_nodes` + `describe_cluster_node` for
each node's address and instance id. Through hyperlaunch.aws.client only (boto3 is imported
there, when a call is made); answers are cached for a few minutes per cluster."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hyperlaunch.aws import client as aws
from hyperlaunch.aws.hyperpod import ClusterView, Group, Node, node_name, region_of
from hyperlaunch.core.bounded_read import read_regular
from hyperlaunch.core.errors import HyperlaunchError

API_SOURCE = "SageMaker API"
CACHE_TTL_S = 300.0
"""How long an API answer about a cluster is reused: long enough for render-then-submit, short
enough that a scaled or repaired cluster is seen again soon."""
_MAX_CACHE_BYTES = 16 << 20
_DESCRIBE_WORKERS = 8


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
        data = json.loads(read_regular(path, _MAX_CACHE_BYTES))
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
