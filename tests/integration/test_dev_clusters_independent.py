"""Two dev clusters on one machine at once, each with a job: bringing one down, then killing its
daemons with SIGKILL, leaves the other's job running to its end and its sacct answering; `up`
in the killed one's folder clears what was left, puts the job it lost back in the queue and runs
jobs again."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Iterator
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


@pytest.fixture
def two_clusters(tmp_path: Path) -> Iterator[tuple[DevCluster, DevCluster]]:
    require_root()
    # a first: where a cluster reused the munged another had started, a's end took it away.
    a = DevCluster(root=tmp_path / "a", base_port=BASE_PORT + 400, nodes=2)
    b = DevCluster(root=tmp_path / "b", base_port=BASE_PORT + 500, nodes=1)
    try:
        for cluster in (a, b):
            result = cluster.up()
            assert result.returncode == 0, result.stderr
        yield a, b
    finally:
        for cluster in (a, b):
            cluster.down()
    assert procs.cluster_process_ids(a.root) == [] and procs.cluster_process_ids(b.root) == []


def _completed(cluster: DevCluster, job: str) -> bool:
    attempts = cluster.sacct_attempts(job)
    return bool(attempts) and attempts[-1][0] == "COMPLETED"


def _kill_daemons(cluster: DevCluster) -> None:
    """An unclean end: SIGKILL every daemon the record names (job processes stay, orphaned)."""
    recorded = state.load(cluster.root / "cluster.json")
    assert recorded is not None
    for record in recorded.daemons.values():
        os.kill(record.pid, signal.SIGKILL)


@pytest.mark.solo
def test_one_cluster_down_or_killed_leaves_the_other_running(two_clusters: tuple[DevCluster, DevCluster], tmp_path: Path) -> None:
    a, b = two_clusters
    go = tmp_path / "go"
    b_job = b.sbatch(_script(tmp_path / "b.sh", f"until [ -e {go} ]; do sleep 0.2; done\n", f"--output={tmp_path}/b-%j.out"))
    a_first = a.sbatch(_script(tmp_path / "a1.sh", "sleep 300\n", f"--output={tmp_path}/a1-%j.out"))
    wait_until(lambda: b.job_field(b_job, "%T") == "RUNNING" and a.job_field(a_first, "%T") == "RUNNING", 60, "both jobs to start")

    assert a.down().returncode == 0
    assert a.up().returncode == 0
    attempts = tmp_path / "attempts.txt"
    lost = a.sbatch(
        _script(
            tmp_path / "a2.sh",
            f"""\
            echo "restart=${{SLURM_RESTART_COUNT:-0}}" >> {attempts}
            if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then sleep 300; fi
            """,
            "--requeue",
            f"--output={tmp_path}/a2-%j.out",
        )
    )
    wait_until(lambda: attempts.exists() and a.job_field(lost, "%T") == "RUNNING", 60, "a's job to start")
    # slurmctld saves its state a moment after a change: any change now, once saved, has the job
    # saved running (as it would be, some seconds into a real job).
    asked = time.time()
    a.run("scontrol", "update", f"JobId={lost}", "Comment=running")
    saved = a.root / "state" / "job_state"
    wait_until(lambda: saved.stat().st_mtime > asked, 15, "slurmctld to save its state", interval=0.2)
    left = [procs.ProcessRecord("left", pid, procs.start_time_of(pid) or 0, "") for pid in procs.cluster_process_ids(a.root)]
    _kill_daemons(a)

    # b's nodes answered all along (its controller pings them every few seconds, with
    # credentials from its own munged): a's end, clean or not, took nothing of b's away.
    assert b.job_field(b_job, "%T") == "RUNNING" and b.node_states()["node1"] in ("allocated", "mixed")
    go.touch()
    wait_until(lambda: _completed(b, b_job), 60, "b's job to complete in sacct")
    assert b.sacct_attempts(b_job) == [("COMPLETED", "node1")]

    again = a.up()
    assert again.returncode == 0, again.stderr
    assert "the last run here ended without 'down'" in again.stderr
    assert f"requeued {lost}" in again.stderr
    assert not any(procs.is_alive(record) for record in left), "the killed run's job processes are gone"
    wait_until(lambda: _completed(a, lost), 90, "a's lost job, requeued, to complete")
    assert attempts.read_text().split() == ["restart=0", "restart=1"]
    fresh = a.sbatch(_script(tmp_path / "a3.sh", "true\n", f"--output={tmp_path}/a3-%j.out"))
    wait_until(lambda: _completed(a, fresh), 60, "a new job on a to complete")
