"""The integration tests' Slurm cluster: brought up once per session, down at the end.

Only tests that ask for `dev_cluster` start it (trainer tests run without Slurm)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.integration.devcluster_helpers import DevCluster

BASE_PORT = int(os.environ.get("HYPERLAUNCH_TEST_BASE_PORT", "27817"))


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the dev cluster runs slurmd and MariaDB as root; run the integration tests as root")


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    require_root()
    cluster = DevCluster(root=tmp_path_factory.mktemp("devcluster"), base_port=BASE_PORT, nodes=3)
    result = cluster.up()
    if result.returncode != 0:
        pytest.fail(f"dev-cluster up failed: {result.stderr.strip()}")
    try:
        yield cluster
    finally:
        cluster.down()
