"""hyperlaunch.aws.client against a local moto server: AWS's answers and failures become one-line
AwsErrors with exit code 10."""

from __future__ import annotations

import pytest

from hyperlaunch.aws import client as hl_aws
from hyperlaunch.core.errors import AwsError
from tests.support.moto_aws import LocalAws


def test_client_reaches_the_local_server(aws: LocalAws) -> None:
    sagemaker = hl_aws.client("sagemaker")
    clusters = hl_aws.paginate("list clusters", sagemaker, "list_clusters", "ClusterSummaries")
    assert clusters == []


def test_aws_refusal_is_one_line_with_awss_code(aws: LocalAws) -> None:
    sagemaker = hl_aws.client("sagemaker")
    with pytest.raises(AwsError) as caught:
        hl_aws.call("HyperPod cluster nope", sagemaker.describe_cluster, ClusterName="nope")
    assert caught.value.exit_code == 10
    line = caught.value.one_line()
    assert line.startswith("HyperPod cluster nope: ") and "\n" not in line


def test_no_region_is_named(aws: LocalAws, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(AwsError, match="no AWS region"):
        hl_aws.client("ecr")


def test_no_credentials_is_named(aws: LocalAws, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    ecr = hl_aws.client("ecr")
    with pytest.raises(AwsError, match="no AWS credentials"):
        hl_aws.call("ECR login", ecr.get_authorization_token)


def test_unreachable_endpoint_is_one_line(aws: LocalAws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    ecr = hl_aws.client("ecr")
    with pytest.raises(AwsError, match="cannot reach AWS"):
        hl_aws.call("ECR login", ecr.get_authorization_token)
