"""doctor says which instance type jobs here render for and what decided it, as submit does:
a config layer, else the HyperPod cluster (resource_config.json, or the SageMaker API through a
local moto server), else cpu with a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.aws import hyperpod_lookup
from hyperlaunch.doctor.checks import check_instance_type
from tests.support.hyperpod_cluster import create_cluster, no_resource_config, resource_config, write_resource_config
from tests.support.moto_aws import LocalAws


def _from_cluster(**kwargs: object):
    return lambda: hyperpod_lookup.describe_instance_source(**kwargs)  # type: ignore[arg-type]


def test_a_configured_type_is_reported_with_its_layer() -> None:
    result = check_instance_type("p5.48xlarge", "hyperlaunch.toml", lambda: pytest.fail("the cluster was asked"))
    assert (result.status, result.detail) == ("pass", "p5.48xlarge (from hyperlaunch.toml)")


def test_resource_config_decides_on_a_hyperpod_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_resource_config(tmp_path / "resource_config.json", monkeypatch, resource_config())
    result = check_instance_type(None, None, _from_cluster(partition_nodes=["ip-10-1-38-128", "ip-10-1-38-130"], where="partition dev"))
    assert result.status == "pass"
    assert result.detail.startswith("p5.48xlarge (") and "resource_config.json" in result.detail


def test_the_api_decides_for_a_named_cluster(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_resource_config(tmp_path, monkeypatch)
    create_cluster(aws, [("controller-machine", "ml.m5.xlarge", 1), ("worker-group-1", "ml.p5.48xlarge", 2)])
    result = check_instance_type(None, None, _from_cluster(cluster="demo"))
    assert result.status == "pass" and result.detail.startswith("p5.48xlarge (")


def test_nothing_to_ask_warns_that_jobs_render_for_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_resource_config(tmp_path, monkeypatch)
    result = check_instance_type(None, None, _from_cluster())
    assert result.status == "warn" and "--instance-type" in result.hint


def test_an_unknown_cluster_is_a_warning_with_awss_reason(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_resource_config(tmp_path, monkeypatch)
    result = check_instance_type(None, None, _from_cluster(cluster="nope"))
    assert result.status == "warn" and result.detail.startswith("cannot tell") and "nope" in result.detail
