"""hyperlaunch.aws.hyperpod, hyperpod_api and hyperpod_lookup: Slurm names of HyperPod nodes,
the resource config read without trusting it, sinfo's partition nodes, and the SageMaker API's
answers (a local moto server) cached briefly per cluster, in a private file written whole."""

from __future__ import annotations

import json
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperlaunch.aws import hyperpod, hyperpod_api, hyperpod_lookup
from hyperlaunch.core.errors import AwsError
from hyperlaunch.slurm import nodes as slurm_nodes
from hyperlaunch.slurm import runner as slurm_runner
from tests.support.hyperpod_cluster import ARN, create_cluster, resource_config, write_resource_config
from tests.support.moto_aws import LocalAws

P5_CLUSTER = [("controller-machine", "ml.m5.xlarge", 1), ("worker-group-1", "ml.p5.48xlarge", 2)]


def test_slurm_names_a_hyperpod_node_by_its_address() -> None:
    assert hyperpod.node_name("10.1.38.128") == "ip-10-1-38-128"
    assert hyperpod.region_of(ARN) == "us-west-2" and hyperpod.region_of("demo") is None
    assert hyperpod.check_cluster_name("demo-1") is None and hyperpod.check_cluster_name(ARN) is None
    assert hyperpod.check_cluster_name("x/y") and hyperpod.check_cluster_name("-demo") and hyperpod.check_cluster_name("a" * 64)


def test_the_resource_config_maps_node_names_to_groups_and_instance_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_resource_config(tmp_path / "resource_config.json", monkeypatch, resource_config())
    view = hyperpod.read_resource_config(path)
    assert (view.cluster, view.arn, view.source) == ("demo", ARN, "resource_config.json")
    assert [(g.name, g.instance_type, g.count) for g in view.groups] == [
        ("controller-machine", "ml.m5.xlarge", 1), ("worker-group-1", "ml.p5.48xlarge", 2),
    ]
    assert view.nodes is not None
    assert [(n.name, n.group) for n in view.nodes][1:] == [("ip-10-1-38-128", "worker-group-1"), ("ip-10-1-38-130", "worker-group-1")]
    assert view.gpu_types() == ["ml.p5.48xlarge"] and view.is_cluster("demo") and view.is_cluster(ARN)
    assert hyperpod.resource_config_path({}) == Path("/opt/ml/config/resource_config.json")
    assert hyperpod.resource_config_path({"SAGEMAKER_RESOURCE_CONFIG_PATH": str(path)}) == path


def test_a_resource_config_that_cannot_be_read_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(hyperpod.Unavailable, match="^no .*absent.json$"):
        hyperpod.read_resource_config(tmp_path / "absent.json")
    (tmp_path / "big.json").write_text(" " * (17 << 20))
    with pytest.raises(hyperpod.Unavailable, match="larger than"):
        hyperpod.read_resource_config(tmp_path / "big.json")
    (tmp_path / "deep.json").write_text("[" * 100_000)
    with pytest.raises(hyperpod.Unavailable, match="nested too deeply|not a HyperPod resource config"):
        hyperpod.read_resource_config(tmp_path / "deep.json")


def test_partition_nodes_come_from_one_sinfo_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    sinfo = "ip-10-1-10-10|idle|dev*|(null)\nip-10-1-38-130|idle|dev*|gpu:8\nip-10-1-38-128|idle|dev*|gpu:8\nip-10-1-38-128|idle|gpu|gpu:8\nip-10-1-38-[2-3]|idle|gpu|gpu:8\n"

    def run(args: Sequence[str], **_: object) -> slurm_runner.Result:
        calls.append(tuple(args))
        return slurm_runner.Result(tuple(args), 0, sinfo, "")

    monkeypatch.setattr(slurm_runner, "run", run)
    assert [n.name for n in slurm_nodes.partition_nodes(None)] == ["ip-10-1-10-10", "ip-10-1-38-128", "ip-10-1-38-130"]
    assert [(n.name, n.gres) for n in slurm_nodes.partition_nodes("gpu")] == [
        ("ip-10-1-38-2", "gpu:8"), ("ip-10-1-38-3", "gpu:8"), ("ip-10-1-38-128", "gpu:8"),
    ]
    assert slurm_nodes.partition_nodes("nope") == []
    assert calls[0] == ("sinfo", "-h", "-N", "-o", "%N|%T|%P|%G|%f")


def test_the_api_view_maps_nodes_that_have_an_address() -> None:
    answer = {
        "ClusterName": "demo", "ClusterArn": ARN,
        "InstanceGroups": [{"InstanceGroupName": "worker-group-1", "InstanceType": "ml.p5.48xlarge", "CurrentCount": 2, "TargetCount": 2}],
    }
    details = [
        {"InstanceId": "i-1", "InstanceGroupName": "worker-group-1", "PrivatePrimaryIp": "10.1.38.128"},
        {"InstanceId": "i-2", "InstanceGroupName": "worker-group-1"},  # still starting: no address yet
    ]
    view = hyperpod_api.view_from_api(answer, details)
    assert view.source == "cluster demo (SageMaker API)" and view.groups == (hyperpod.Group("worker-group-1", "ml.p5.48xlarge", 2),)
    assert view.nodes == (hyperpod.Node("ip-10-1-38-128", "i-1", "worker-group-1"),)
    assert hyperpod_api.view_from_api(answer, None).nodes is None


def test_the_api_answer_is_cached_briefly_in_a_private_file(aws: LocalAws) -> None:
    create_cluster(aws, P5_CLUSTER)
    first = hyperpod_api.describe_cluster("demo")
    assert [(g.instance_type, g.count) for g in first.groups] == [("ml.m5.xlarge", 1), ("ml.p5.48xlarge", 2)]
    [cache] = list((hyperpod_api._cache_path("demo") or Path("/")).parent.glob("hyperpod-cluster-*.json"))
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600 and stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    assert not list(cache.parent.glob(".*")), "no temporary file left behind"
    aws.reset()  # AWS forgets the cluster: only the cache can still answer
    assert hyperpod_api.describe_cluster("demo") == first
    with pytest.raises(AwsError, match="Could not find cluster 'demo'"):
        hyperpod_api.describe_cluster("demo", fresh=True)
    with pytest.raises(AwsError):
        hyperpod_api.describe_cluster("demo", with_nodes=True)  # the cache holds no nodes: AWS is asked


def test_the_cache_expires(aws: LocalAws) -> None:
    create_cluster(aws, P5_CLUSTER)
    hyperpod_api.describe_cluster("demo")
    cache = hyperpod_api._cache_path("demo")
    assert cache is not None
    data = json.loads(cache.read_text())
    data["written_at"] -= hyperpod_api.CACHE_TTL_S + 1
    cache.write_text(json.dumps(data))
    aws.reset()
    with pytest.raises(AwsError, match="hyperpod cluster 'demo': ValidationException"):
        hyperpod_api.describe_cluster("demo")


def test_a_broken_cache_is_asked_again(aws: LocalAws) -> None:
    create_cluster(aws, P5_CLUSTER)
    cache = hyperpod_api._cache_path("demo")
    assert cache is not None
    cache.parent.mkdir(parents=True)
    cache.write_text('{"written_at": "soon", "view": []}')
    assert hyperpod_api.describe_cluster("demo").cluster == "demo"
    assert json.loads(cache.read_text())["view"]["cluster"] == "demo"


def test_nodes_from_the_api_are_listed_across_pages_and_described(aws: LocalAws) -> None:
    create_cluster(aws, [("worker-group-1", "ml.p5.48xlarge", 2), ("small", "ml.g5.48xlarge", 1)])
    view = hyperpod_api.describe_cluster("demo", with_nodes=True)
    # moto's describe_cluster_node gives no PrivatePrimaryIp: no node has a Slurm name yet
    assert view.nodes == () and view.gpu_types() == ["ml.g5.48xlarge", "ml.p5.48xlarge"]
    aws.reset()
    assert hyperpod_api.describe_cluster("demo", with_nodes=True) == view  # cached, nodes and all


def test_describe_instance_source_says_where_the_type_comes_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws: LocalAws) -> None:
    path = write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config())
    environ = {"SAGEMAKER_RESOURCE_CONFIG_PATH": str(path)}
    line = hyperpod_lookup.describe_instance_source(environ=environ)
    assert line == "p5.48xlarge (rc.json, worker-group-1: the GPU group with the most instances (2; the default partition's nodes not asked))"
    line = hyperpod_lookup.describe_instance_source(environ=environ, partition_nodes=["ip-10-1-38-128"], where="partition gpu")
    assert line == "p5.48xlarge (rc.json, worker-group-1: 1 of partition gpu's 1 node(s))"
    line = hyperpod_lookup.describe_instance_source(environ={"SAGEMAKER_RESOURCE_CONFIG_PATH": str(tmp_path)})
    assert line.startswith("none from the cluster (") and "is a folder" in line
    assert hyperpod_lookup.describe_instance_source(environ={}, cluster="nope").startswith("cannot tell: hyperpod cluster 'nope': ")
