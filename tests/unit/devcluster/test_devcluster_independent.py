"""Dev clusters on one machine share nothing another's `down` or death can take away, and `up`
clears what an earlier run of its folder left: the decisions, without daemons (Slurm faked at
hyperlaunch.slurm.runner.run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperlaunch.devcluster import cluster, config, hosts, install, leftovers, procs, services, state
from hyperlaunch.devcluster.layout import MACHINE_MUNGE_KEY, ClusterLayout
from hyperlaunch.slurm import runner as slurm_runner
from hyperlaunch.slurm.nodes import NodeInfo
from hyperlaunch.slurm.queue import HoldingJob


def _layout(root: Path, base_port: int = 20000) -> ClusterLayout:
    return ClusterLayout(root=root, nodes=2, cpus_per_node=2, base_port=base_port, hostname="box")


def _conf(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {k: v for k, v in pairs}


def test_each_cluster_names_its_own_munge_socket_for_every_connection(tmp_path: Path) -> None:
    first, second = _layout(tmp_path / "a"), _layout(tmp_path / "b", base_port=21000)
    for layout in (first, second):
        socket = str(layout.munge_socket)
        assert socket.startswith(str(layout.root))
        slurm = _conf(config.slurm_conf(layout))
        assert slurm["AuthInfo"] == f"socket={socket},cred_expire={config.CRED_EXPIRE_S}"
        # sacct, sacctmgr and slurmctld -> slurmdbd read this one, not AuthInfo.
        assert slurm["AccountingStoragePass"] == f"socket={socket}"
        assert _conf(config.slurmdbd_conf(layout, db_password="pw"))["AuthInfo"] == f"socket={socket}"
    assert first.munge_socket != second.munge_socket
    assert first.munge_key == second.munge_key == MACHINE_MUNGE_KEY


def test_a_missing_munge_key_is_made_by_mungekey_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "INSTALL_LOCK", tmp_path / "install.lock")
    fake = tmp_path / "mungekey"
    fake.write_text('#!/bin/sh\necho made >> "$(dirname "$0")/calls"\nprintf key > "${2#--keyfile=}"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(install, "find_binary", lambda name: str(fake) if name == "mungekey" else None)
    monkeypatch.setattr(install.pwd, "getpwnam", lambda name: (_ for _ in ()).throw(KeyError(name)))
    key = tmp_path / "etc-munge" / "munge.key"
    said: list[str] = []
    install.ensure_munge_key(key, said.append)
    install.ensure_munge_key(key, said.append)
    assert key.read_text() == "key" and (tmp_path / "calls").read_text() == "made\n"
    assert len(said) == 1 and str(key) in said[0]


def test_a_missing_mungekey_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "INSTALL_LOCK", tmp_path / "install.lock")
    monkeypatch.setattr(install, "find_binary", lambda name: None)
    with pytest.raises(install.ClusterError, match="mungekey"):
        install.ensure_munge_key(tmp_path / "munge.key", lambda _: None)


def test_names_another_cluster_lends_get_a_line_of_our_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # node1 and node2 resolve, but only through cluster a's line: a's `down` would take them away.
    monkeypatch.setattr(hosts, "_resolves", lambda name: True)
    path = tmp_path / "hosts"
    path.write_text(f"127.0.0.1 localhost\n127.0.0.1 node1 node2 node3 {hosts.MARKER} {tmp_path / 'a'}\n")
    hosts.add_node_names(["node1", "node2"], tmp_path / "b", hosts=path)
    assert path.read_text().count(hosts.MARKER) == 2
    hosts.remove_node_names(tmp_path / "a", hosts=path)
    assert path.read_text() == f"127.0.0.1 localhost\n127.0.0.1 node1 node2 {hosts.MARKER} {tmp_path / 'b'}\n"


def test_names_that_resolve_without_any_cluster_get_no_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosts, "_resolves", lambda name: True)
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 localhost node1 node2\n")
    hosts.add_node_names(["node1", "node2"], tmp_path / "b", hosts=path)
    assert path.read_text() == "127.0.0.1 localhost node1 node2\n"


def test_lost_jobs_are_requeued_when_they_may_be_and_cancelled_otherwise() -> None:
    lost = leftovers.lost_jobs(
        [HoldingJob("7", "RUNNING", True), HoldingJob("8", "RUNNING", False), HoldingJob("9", "SUSPENDED", True)]
    )
    assert lost == leftovers.LostJobs(requeue=["7", "9"], cancel=["8"])
    assert leftovers.lost_jobs_line(lost) == (
        "jobs running when the last run ended, their processes gone: requeued 7, 9; cancelled 8 (--no-requeue)"
    )
    assert leftovers.lost_jobs_line(leftovers.LostJobs(requeue=[], cancel=[])) is None


def test_end_lost_jobs_asks_squeue_then_requeues_and_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake(args: list[str], **_: object) -> slurm_runner.Result:
        calls.append(list(args))
        out = "12    RUNNING    1\n13    CONFIGURING    0\n" if args[0] == "squeue" else ""
        return slurm_runner.Result(tuple(args), 0, out, "")

    monkeypatch.setattr(slurm_runner, "run", fake)
    said: list[str] = []
    leftovers.end_lost_jobs({}, said.append)
    assert calls[0][:4] == ["squeue", "-h", "-t", "RUNNING,CONFIGURING,SUSPENDED"]
    assert calls[1:] == [["scontrol", "requeue", "12"], ["scancel", "13"]]
    assert said == ["jobs running when the last run ended, their processes gone: requeued 12; cancelled 13 (--no-requeue)"]


def test_no_lost_job_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, "", ""))
    said: list[str] = []
    leftovers.end_lost_jobs({}, said.append)
    assert said == []


def _node_states(monkeypatch: pytest.MonkeyPatch, answers: list[list[NodeInfo]], resumed: list[list[str]]) -> None:
    monkeypatch.setattr(services.slurm_nodes, "node_states", lambda env: answers.pop(0) if len(answers) > 1 else answers[0])
    monkeypatch.setattr(services.slurm_nodes, "resume", lambda names, env: resumed.append(list(names)))
    monkeypatch.setattr(services.time, "sleep", lambda _: None)


def test_a_fresh_start_resumes_a_node_an_earlier_run_drained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resumed: list[list[str]] = []
    _node_states(
        monkeypatch,
        [
            [NodeInfo("node1", "idle", "none"), NodeInfo("node2", "drained*", "Kill task failed")],  # not registered yet
            [NodeInfo("node1", "idle", "none"), NodeInfo("node2", "drained", "Kill task failed")],
            [NodeInfo("node1", "idle", "none"), NodeInfo("node2", "idle", "none")],
        ],
        resumed,
    )
    said: list[str] = []
    services.wait_nodes_ready(
        _layout(tmp_path), ["node1", "node2"], timeout_s=5, progress=said.append, logs={}, resume_drained=True
    )
    assert resumed == [["node2"]]
    assert "resumed node2 (Kill task failed): drained by an earlier run" in said


def test_without_resume_drained_a_drained_node_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resumed: list[list[str]] = []
    _node_states(monkeypatch, [[NodeInfo("node1", "drained", "x")]], resumed)
    with pytest.raises(services.ClusterError, match="node1 did not become ready"):
        services.wait_nodes_ready(_layout(tmp_path), ["node1"], timeout_s=0, progress=lambda _: None, logs={})
    assert resumed == []


def test_up_clears_the_record_and_runtime_files_an_unclean_end_left(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    dead = procs.ProcessRecord(name="slurmctld", pid=2**22 + 1, start_time=1, log="")
    layout.run_dir.mkdir(parents=True)
    state.save(state.ClusterState(layout=layout, daemons={"slurmctld": dead}), layout.state_file)
    for name in ("slurmctld.pid", "mariadb.sock", "mariadb.sock.lock", "munge.socket"):
        (layout.run_dir / name).write_text("")
    said: list[str] = []
    leftovers.clear_unclean_end(layout, said.append)
    assert said == ["the last run here ended without 'down': cleared 4 stale pid or socket files"]
    assert not layout.state_file.exists() and list(layout.run_dir.iterdir()) == []
    leftovers.clear_unclean_end(layout, said.append)
    assert len(said) == 1, "a clean folder: nothing to say"


@pytest.mark.slow
def test_up_kills_the_processes_an_unclean_end_left(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    env = dict(os.environ, **{procs.CLUSTER_MARKER: str(layout.root)})
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        for _ in range(100):
            if orphan.pid in procs.cluster_process_ids(layout.root):
                break
            subprocess.run(["sleep", "0.05"], check=True)
        said: list[str] = []
        leftovers.clear_unclean_end(layout, said.append)
        orphan.wait(timeout=5)  # killed (kill_pids may have reaped it already)
        assert procs.cluster_process_ids(layout.root) == []
        assert said == ["the last run here ended without 'down': cleared 1 leftover process"]
    finally:
        orphan.kill()


def test_up_on_a_cluster_with_a_dead_service_says_how_to_restart_it(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    layout.root.mkdir(parents=True, exist_ok=True)
    alive = procs.ProcessRecord(name="slurmctld", pid=os.getpid(), start_time=procs.start_time_of(os.getpid()) or 0, log="")
    dead = procs.ProcessRecord(name="slurmdbd", pid=2**22 + 1, start_time=1, log="")
    state.save(state.ClusterState(layout=layout, daemons={"slurmctld": alive, "slurmdbd": dead}), layout.state_file)
    result = cluster.up(root=layout.root, nodes=2, cpus_per_node=2, base_port=20000, progress=lambda _: None)
    assert result.already_running and result.dead_services == ["slurmdbd"]
