"""`hyperlaunch doctor` against the real dev cluster: Slurm and accounting pass, Pyxis is
reported missing with a hint, and a local checkpoint folder passes because every node runs
on this host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.devcluster_helpers import DevCluster, hyperlaunch

pytestmark = pytest.mark.integration


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
    assert f"{dev_cluster.nodes} Slurm node(s)" in checks["gpus per node"]["detail"]
    # Nothing failed, so the exit code is 0 and the warnings do not count against it.
    assert document["ok"] is True and result.returncode == 0, result.stderr


def test_doctor_table_for_people(dev_cluster: DevCluster, tmp_path: Path) -> None:
    result = hyperlaunch("doctor", "--checkpoint-dir", str(tmp_path), env=dev_cluster.env, timeout=120)
    assert result.returncode == 0, result.stderr
    for text in ("sbatch", "accounting", "pyxis", "shared filesystem", "pass", "warn"):
        assert text in result.stdout
