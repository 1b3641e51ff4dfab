"""The integration tests' Slurm cluster: one per test session, shared by every pytest-xdist
worker (the first to need it brings it up, under a file lock; `up` is idempotent), and
brought down by the controlling process at the end of the session (pytest_sessionfinish below:
`make test` names tests/integration, so the controller loads this file as well as the workers).

Only tests that ask for `dev_cluster` start it (trainer tests run without Slurm). Tests on
it must not assume they are alone: their jobs use --exclusive, and they kill only nodes of
their own jobs."""

from __future__ import annotations

import fcntl
import os

import pytest

from tests.support.devcluster_helpers import DevCluster, hyperlaunch, session_cluster_root

BASE_PORT = int(os.environ.get("HYPERLAUNCH_TEST_BASE_PORT", "27817"))
# Enough for three tests' 2-node exclusive jobs at once plus spares for requeues.
NODES = 8
# One node with (fake) GPU GRES, alone in partition `gpu`: the default partition `dev` keeps
# no GRES, as many HyperPod clusters have none.
GPU_NODES = 1


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the dev cluster runs slurmd and MariaDB as root; run the integration tests as root")


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> DevCluster:
    require_root()
    root = session_cluster_root(tmp_path_factory.getbasetemp())
    cluster = DevCluster(root=root, base_port=BASE_PORT, nodes=NODES, gpu_nodes=GPU_NODES)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / "devcluster.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = cluster.up()
    if result.returncode != 0:
        pytest.fail(f"dev-cluster up failed: {result.stderr.strip()}")
    return cluster


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller stops the cluster after every worker is done
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        root = session_cluster_root(factory.getbasetemp())
        if (root / "cluster.json").exists():
            hyperlaunch("dev-cluster", "down", "--dir", str(root), timeout=120)
