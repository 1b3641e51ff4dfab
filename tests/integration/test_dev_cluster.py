"""The dev cluster against real Slurm: nodes, multi-node jobs, accounting, node death and
requeue, and a clean `down`."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path

import pytest

from hyperlaunch.devcluster import procs, state
from tests.integration.conftest import BASE_PORT, require_root
from tests.support.devcluster_helpers import DevCluster, wait_until

pytestmark = pytest.mark.integration


def _script(path: Path, body: str, *flags: str) -> Path:
    header = "\n".join(f"#SBATCH {flag}" for flag in flags)
    path.write_text("#!/bin/bash\n" + header + "\n" + textwrap.dedent(body))
    return path


def test_up_gives_its_nodes_and_up_again_changes_nothing(dev_cluster: DevCluster) -> None:
    # Other tests run jobs and kill nodes on this shared cluster meanwhile: the strict "all
    # idle" check is on a private cluster below.
    assert sorted(dev_cluster.node_states()) == sorted(f"node{i}" for i in range(1, dev_cluster.nodes + 1))
    before = state.load(dev_cluster.root / "cluster.json")
    again = dev_cluster.up()
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout
    after = state.load(dev_cluster.root / "cluster.json")
    assert before is not None and after is not None
    # slurmd records change when other tests revive the nodes they killed; the rest must not.
    services = ("munged", "mariadb", "slurmdbd", "slurmctld")
    assert {k: v for k, v in before.daemons.items() if k in services} == {k: v for k, v in after.daemons.items() if k in services}
    status = json.loads(dev_cluster.cli("dev-cluster", "status", "--json").stdout)
    assert status["running"] and all(d["alive"] for d in status["daemons"] if d["name"] in services)
    assert len(status["nodes"]) == dev_cluster.nodes + dev_cluster.gpu_nodes


def test_two_node_job_runs_on_two_nodes_and_sacct_records_it(dev_cluster: DevCluster, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    script = _script(
        tmp_path / "job.sh",
        f"srun --ntasks-per-node=1 bash -c 'echo $SLURMD_NODENAME' > {out}\n",
        "--nodes=2",
        "--exclusive",
        f"--output={tmp_path}/slurm-%j.out",
    )
    job = dev_cluster.sbatch(script)
    wait_until(lambda: dev_cluster.job_field(job, "%T") == "", 120, f"job {job} to finish")
    nodes = out.read_text().split()
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes
    wait_until(lambda: dev_cluster.sacct_attempts(job)[-1:] != [] and dev_cluster.sacct_attempts(job)[-1][0] == "COMPLETED", 30, "sacct COMPLETED")


def test_killed_node_fails_the_job_and_slurm_requeues_it_on_healthy_nodes(dev_cluster: DevCluster, tmp_path: Path) -> None:
    log = tmp_path / "attempts.txt"
    script = _script(
        tmp_path / "requeue.sh",
        f"""\
        echo "restart=${{SLURM_RESTART_COUNT:-0}} nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)" >> {log}
        if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then pause=120; else pause=1; fi
        srun --ntasks-per-node=1 sleep "$pause"
        """,
        "--nodes=2",
        "--exclusive",
        "--requeue",
        "--open-mode=append",
        f"--output={tmp_path}/slurm-%j.out",
    )
    job = dev_cluster.sbatch(script)
    wait_until(lambda: log.exists() and dev_cluster.job_field(job, "%T") == "RUNNING", 60, "first attempt to start")
    first_nodes = log.read_text().split("nodes=")[1].split()[0].split(",")
    victim = first_nodes[1]
    killed = dev_cluster.cli("dev-cluster", "kill-node", victim)
    assert killed.returncode == 0, killed.stderr
    try:
        wait_until(lambda: "restart=1" in log.read_text(), 150, "the requeued attempt to start")
        wait_until(lambda: dev_cluster.job_field(job, "%T") == "", 60, "the requeued attempt to finish")
        second = log.read_text().split("restart=1 nodes=")[1].split()[0].split(",")
        assert len(second) == 2 and victim not in second, (victim, second)
        # slurmdbd records the end a moment after squeue stops listing the job (fresh-ci met it).
        wait_until(lambda: dev_cluster.sacct_attempts(job)[-1][0] != "RUNNING", 30, "sacct to record the attempt's end")
        attempts = dev_cluster.sacct_attempts(job)
        assert attempts[0][0] == "NODE_FAIL" and attempts[-1][0] == "COMPLETED", attempts
        assert "down" in dev_cluster.node_states()[victim]
    finally:
        revived = dev_cluster.cli("dev-cluster", "revive-node", victim)
    assert revived.returncode == 0, revived.stderr
    assert dev_cluster.node_states()[victim] in ("idle", "allocated", "mixed")


def _private_cluster(tmp_path: Path, offset: int, nodes: int = 1) -> DevCluster:
    require_root()
    return DevCluster(root=tmp_path / "cluster", base_port=BASE_PORT + offset, nodes=nodes)


def test_up_gives_idle_nodes_and_down_stops_every_process_it_started(tmp_path: Path) -> None:
    cluster = _private_cluster(tmp_path, 100, nodes=2)
    result = cluster.up()
    assert result.returncode == 0, result.stderr
    assert cluster.node_states() == {"node1": "idle", "node2": "idle"}
    recorded = state.load(cluster.root / "cluster.json")
    assert recorded is not None and procs.cluster_process_ids(cluster.root)
    assert cluster.down().returncode == 0
    assert procs.cluster_process_ids(cluster.root) == []
    assert not any(procs.is_alive(rec) for rec in recorded.daemons.values())
    assert not (cluster.root / "cluster.json").exists()


def test_port_in_use_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    cluster = _private_cluster(tmp_path, 200)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", cluster.base_port + 1))
        blocker.listen()
        result = cluster.up()
    assert result.returncode == 5
    assert f"port {cluster.base_port + 1} already in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (cluster.root / "cluster.json").exists()


def test_a_daemon_that_does_not_start_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _private_cluster(tmp_path, 300)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "slurmd").write_text("#!/bin/sh\necho 'fatal: cannot start' >&2\nexit 1\n")
    (fake_bin / "slurmd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    result = cluster.up()
    assert result.returncode == 5
    error = result.stderr.strip().splitlines()[-1]
    assert "slurmd of node1 exited" in error and "slurmd-node1.log" in error, error
    assert procs.cluster_process_ids(cluster.root) == []
    assert not (cluster.root / "cluster.json").exists()
