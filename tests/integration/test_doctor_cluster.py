"""`hyperlaunch doctor` against the real dev cluster: Slurm and accounting pass, Pyxis is
reported missing with a hint, a local checkpoint folder passes because every node runs on this
host, and the probe of the compute nodes finds the job's venv there - or fails when the job's
torchrun is one the nodes cannot see - and leaves no job behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch import __version__
from tests.support.devcluster_helpers import DevCluster, hyperlaunch

pytestmark = pytest.mark.integration


# It probes every idle node of the partition: under the parallel run, other tests' jobs once held or
# had planned all eight, and doctor rightly skipped them all (CI, 2026-11-27).
@pytest.mark.solo
def test_doctor_on_the_dev_cluster(dev_cluster: DevCluster, tmp_path: Path) -> None:
    result = hyperlaunch("doctor", "--json", "--checkpoint-dir", str(tmp_path / "ckpt"), env=dev_cluster.env, timeout=120)
    document = json.loads(result.stdout)
    checks = {check["name"]: check for check in document["checks"]}
    for name in ("sbatch", "sacct", "accounting"):
        assert checks[name]["status"] == "pass", checks[name]
    assert "slurmdbd" in checks["accounting"]["detail"]
    pyxis = checks["pyxis"]
    assert pyxis["status"] in ("warn", "fail") and "Pyxis" in pyxis["detail"] and pyxis["hint"]
    shared = checks["shared filesystem"]
    assert shared["status"] == "pass" and "this host" in shared["detail"], shared
    # The cluster-wide GPU check sees the gpu partition's node beside the dev partition's.
    assert f"0: {dev_cluster.nodes} node(s), 8: {dev_cluster.gpu_nodes} node(s)" in checks["gpus per node"]["detail"]
    probe = document["node_probe"]
    assert probe["partition"] == "dev" and checks["compute nodes"]["status"] == "pass", checks["compute nodes"]
    # Nodes a job holds or Slurm has planned for one are skipped and named.
    probed = {node["node"]: node for node in probe["nodes"]}
    assert probed and set(probed) | {s["node"] for s in probe["skipped"]} == {f"node{i}" for i in range(1, dev_cluster.nodes + 1)}
    for node in probed.values():
        assert node["status"] == "pass" and node["python"] and node["hyperlaunch"] == __version__, node
    assert "probing" in result.stderr and "idle node(s) in partition dev" in result.stderr
    # Nothing failed, so the exit code is 0 and the warnings do not count against it.
    assert document["ok"] is True and result.returncode == 0, result.stderr


def test_doctor_table_for_people(dev_cluster: DevCluster, tmp_path: Path) -> None:
    result = hyperlaunch("doctor", "--checkpoint-dir", str(tmp_path), env=dev_cluster.env, timeout=120)
    assert result.returncode == 0, result.stderr
    for text in ("sbatch", "accounting", "pyxis", "shared filesystem", "pass", "warn"):
        assert text in result.stdout


def _probe_jobs(dev_cluster: DevCluster) -> list[str]:
    return [name for name in dev_cluster.run("squeue", "-h", "-o", "%j").split() if name.startswith("hyperlaunch-probe")]


def test_probe_of_the_gpu_partition(dev_cluster: DevCluster, tmp_path: Path) -> None:
    result = hyperlaunch("doctor", "--json", "--partition", "gpu", "--checkpoint-dir", str(tmp_path), env=dev_cluster.env, timeout=120)
    probe = json.loads(result.stdout)["node_probe"]
    assert probe["partition"] == "gpu" and [n["node"] for n in probe["nodes"]] == ["gpu1"], probe
    assert probe["nodes"][0]["status"] == "pass" and result.returncode == 0, result.stderr
    assert _probe_jobs(dev_cluster) == []


def test_a_venv_the_nodes_cannot_see_fails_doctor(dev_cluster: DevCluster, tmp_path: Path) -> None:
    env = {**dev_cluster.env, "HYPERLAUNCH_TORCHRUN": str(tmp_path / "login-only-venv" / "bin" / "torchrun")}
    result = hyperlaunch("doctor", "--json", "--partition", "gpu", "--checkpoint-dir", str(tmp_path), env=env, timeout=120)
    document = json.loads(result.stdout)
    checks = {check["name"]: check for check in document["checks"]}
    assert checks["compute nodes"]["status"] == "fail" and "login-only-venv" in checks["compute nodes"]["hint"]
    assert result.returncode == 8 and document["ok"] is False
    skipped = hyperlaunch("doctor", "--json", "--no-probe", "--checkpoint-dir", str(tmp_path), env=env, timeout=120)
    assert json.loads(skipped.stdout)["node_probe"] is None and skipped.returncode == 0
