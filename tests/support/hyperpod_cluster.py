"""A HyperPod cluster for tests, as each source shows it: a resource_config.json in REFERENCE
§5's shape (pointed at with SAGEMAKER_RESOURCE_CONFIG_PATH), a cluster created in the local
moto server, and the Slurm node names of a partition (hyperlaunch.slurm.nodes.partition_nodes faked)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.slurm import nodes as slurm_nodes
from tests.support.moto_aws import LocalAws

ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456"
CONTROLLER = ("controller-machine", "ml.m5.xlarge", {"10.1.10.10": "i-0c0ffee0000000001"})
WORKERS = ("worker-group-1", "ml.p5.48xlarge", {"10.1.38.128": "i-0aaa0000000000001", "10.1.38.130": "i-0bbb0000000000001"})
Group = tuple[str, str, dict[str, str]]
"""(instance group name, SageMaker instance type, {CustomerIpAddress: InstanceId})."""


def resource_config(groups: Sequence[Group] = (CONTROLLER, WORKERS), *, name: str = "demo") -> dict[str, object]:
    return {
        "ClusterConfig": {"ClusterArn": ARN, "ClusterName": name},
        "InstanceGroups": [
            {
                "Name": group,
                "InstanceType": instance_type,
                "Instances": [
                    {"AgentIpAddress": f"172.16.{i}.1", "CustomerIpAddress": ip, "InstanceId": iid, "InstanceName": f"{group}-{i + 1}"}
                    for i, (ip, iid) in enumerate(instances.items())
                ],
            }
            for group, instance_type, instances in groups
        ],
    }


def write_resource_config(path: Path, monkeypatch: pytest.MonkeyPatch, document: object | str) -> Path:
    """`document` (JSON, or text as it is) at `path`, the path this process's tools read."""
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    monkeypatch.setenv("SAGEMAKER_RESOURCE_CONFIG_PATH", str(path))
    return path


def no_resource_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGEMAKER_RESOURCE_CONFIG_PATH", str(tmp_path / "no-resource-config.json"))


def create_cluster(aws: LocalAws, groups: Sequence[tuple[str, str, int]], name: str = "demo") -> str:
    """A Slurm HyperPod cluster in moto with these (group, instance type, count); its ARN."""
    instance_groups = [
        {
            "InstanceGroupName": group,
            "InstanceType": instance_type,
            "InstanceCount": count,
            "ThreadsPerCore": 1,
            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/config/", "OnCreate": "on_create.sh"},
            "ExecutionRole": f"arn:aws:iam::{aws.account}:role/hyperpod",
        }
        for group, instance_type, count in groups
    ]
    return aws.client("sagemaker").create_cluster(ClusterName=name, InstanceGroups=instance_groups)["ClusterArn"]


class FakePartition:
    """slurm.partition_nodes answering with these nodes (None: no Slurm answers); calls kept."""

    def __init__(self, names: Sequence[str] | None, gres: str = "(null)", features: Sequence[Sequence[str]] = ()) -> None:
        self.names, self.gres, self.features, self.calls = names, gres, list(features), []

    def __call__(self, partition: str | None, *, env: object = None) -> list[slurm_nodes.PartitionNode]:
        self.calls.append(partition)
        if self.names is None:
            raise SlurmError("sinfo failed: Unable to contact slurm controller")
        features = self.features or [()] * len(self.names)
        return [slurm_nodes.PartitionNode(name=name, gres=self.gres, features=tuple(f)) for name, f in zip(self.names, features, strict=True)]


def fake_partition(
    monkeypatch: pytest.MonkeyPatch, names: Sequence[str] | None, gres: str = "(null)", features: Sequence[Sequence[str]] = ()
) -> FakePartition:
    """Nodes of the partition; `features`: each node's (sinfo %f), in the order of `names`."""
    fake = FakePartition(names, gres, features)
    monkeypatch.setattr(slurm_nodes, "partition_nodes", fake)
    return fake
