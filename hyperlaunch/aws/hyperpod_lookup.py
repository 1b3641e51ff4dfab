"""Which source answers about the HyperPod cluster a job runs on: this node's resource config
(hyperlaunch.aws.hyperpod) when it is the named cluster's, or none is named, else the
SageMaker API for the cluster the user named (hyperlaunch.aws.hyperpod_api). Asked only when
the user left the instance type to the cluster, or when a job's instance ids are recorded."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from hyperlaunch.aws.hyperpod import (
    ClusterView,
    Unavailable,
    choose_instance_type,
    read_resource_config,
    resource_config_path,
)
from hyperlaunch.aws.hyperpod_api import describe_cluster
from hyperlaunch.core.errors import AwsError, HyperlaunchError
from hyperlaunch.core.instances import canonical_instance_type, known_instance_types


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
