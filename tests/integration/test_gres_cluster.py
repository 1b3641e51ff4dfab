"""A p5-class job (8 GPUs per node, whole nodes) against real Slurm, with and without GPU GRES:
`hyperlaunch render` asks the cluster (hyperlaunch.job.detect.gres_gpus) and sbatch --test-only
accepts what it rendered. No GPU is here: the gpu partition's GRES are backed by fake device
files (`dev-cluster up --gpu-nodes`), and --test-only checks feasibility without running."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import BASE_PORT, require_root
from tests.support.devcluster_helpers import DevCluster

pytestmark = pytest.mark.integration

P5 = ("render", "-m", "qwen3_0_6b", "-N", "1", "--instance-type", "p5.48xlarge")


def _render(cluster: DevCluster, tmp_path: Path, *flags: str) -> tuple[Path, str]:
    """The rendered script's path and render's notes (the decisions and their sources)."""
    result = cluster.hyperlaunch(*P5, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    path = tmp_path / "p5.sbatch"
    path.write_text(result.stdout)
    return path, result.stderr


def _test_only(cluster: DevCluster, script: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """sbatch --test-only: Slurm's answer on whether and where the job would start; nothing is queued."""
    return subprocess.run(
        ["sbatch", "--test-only", *flags, str(script)], capture_output=True, text=True, env=cluster.env, timeout=60, check=False
    )


def test_on_the_gres_partition_the_gpus_are_requested_and_accepted(dev_cluster: DevCluster, tmp_path: Path) -> None:
    script, notes = _render(dev_cluster, tmp_path, "--partition", "gpu")
    text = script.read_text()
    assert "#SBATCH --gpus-per-node=8\n" in text and "#SBATCH --exclusive\n" in text and "--nproc_per_node=8" in text
    assert "partition gpu's nodes have GPU GRES (sinfo: gpu:8)" in notes
    answer = _test_only(dev_cluster, script)
    assert answer.returncode == 0 and "on nodes gpu1 in partition gpu" in answer.stderr, answer.stderr


def test_on_the_plain_partition_no_gres_is_asked_for_and_whole_nodes_are_accepted(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    script, notes = _render(dev_cluster, tmp_path)  # the default partition, dev
    text = script.read_text()
    assert "--gpus-per-node" not in text and "#SBATCH --exclusive\n" in text and "--nproc_per_node=8" in text
    assert "the default partition's nodes have no GPU GRES" in notes
    answer = _test_only(dev_cluster, script)
    assert answer.returncode == 0 and "in partition dev" in answer.stderr, answer.stderr
    # What rendering spared the job: the same script asking for the GPUs is refused there.
    refused = _test_only(dev_cluster, script, "--gpus-per-node=8")
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr, refused.stderr


def test_a_cluster_that_declares_no_gres_gets_whole_nodes(tmp_path: Path) -> None:
    """As many HyperPod clusters: no GresTypes at all (`up` without --gpu-nodes)."""
    require_root()
    cluster = DevCluster(root=tmp_path / "cluster", base_port=BASE_PORT + 400, nodes=1)
    started = cluster.up()
    assert started.returncode == 0, started.stderr
    try:
        assert not (cluster.root / "etc" / "gres.conf").exists()
        script, notes = _render(cluster, tmp_path)
        assert "--gpus-per-node" not in script.read_text() and "GresTypes = (null)" in notes
        answer = _test_only(cluster, script)
        assert answer.returncode == 0 and "on nodes node1 in partition dev" in answer.stderr, answer.stderr
        refused = _test_only(cluster, script, "--gpus-per-node=8")
        assert refused.returncode != 0 and "Invalid generic resource" in refused.stderr, refused.stderr
    finally:
        assert cluster.down().returncode == 0
