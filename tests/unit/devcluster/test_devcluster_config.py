"""The dev cluster's files and records, without starting anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperlaunch.devcluster import config, hosts, procs, state
from hyperlaunch.devcluster.layout import ClusterLayout


def _layout(tmp_path: Path, nodes: int = 3) -> ClusterLayout:
    return ClusterLayout(root=tmp_path, nodes=nodes, cpus_per_node=2, base_port=20000, hostname="box")


def _conf(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {k: v for k, v in pairs}


def test_slurm_conf_has_the_fast_fault_handling_settings(tmp_path: Path) -> None:
    conf = _conf(config.slurm_conf(_layout(tmp_path)))
    assert conf["JobRequeue"] == "1"
    assert conf["SlurmdTimeout"] == "10"
    assert "cred_expire=5" in conf["AuthInfo"]
    assert conf["ReturnToService"] == "2"
    assert "bf_interval=5" in conf["SchedulerParameters"], "a requeued job must not wait 30 s for backfill"
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["AccountingStoragePort"] == "20001"
    assert conf["SlurmdSpoolDir"].endswith("/spool/%n"), "several slurmd on one host need per-node spools"


def test_nodes_are_distinct_slurmds_on_this_host(tmp_path: Path) -> None:
    text = config.slurm_conf(_layout(tmp_path, nodes=3))
    node_line = next(line for line in text.splitlines() if line.startswith("NodeName="))
    assert "NodeName=node1,node2,node3" in node_line
    assert "NodeHostname=box" in node_line
    assert "Port=[20010-20012]" in node_line
    assert "PartitionName=dev" in text and "Default=YES" in text


def test_single_node_gets_a_single_port(tmp_path: Path) -> None:
    assert "Port=20010 " in config.slurm_conf(_layout(tmp_path, nodes=1))


def test_every_path_is_under_the_cluster_directory(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    conf = _conf(config.slurm_conf(layout))
    for key in ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile"):
        assert conf[key].startswith(str(tmp_path)), key
    dbd = _conf(config.slurmdbd_conf(layout, db_password="pw"))
    assert dbd["LogFile"].startswith(str(tmp_path))
    assert dbd["StoragePort"] == "20002" and dbd["StoragePass"] == "pw"


def test_ports_do_not_overlap(tmp_path: Path) -> None:
    ports = _layout(tmp_path, nodes=8).all_ports
    assert len(ports) == len(set(ports))


def test_state_round_trips(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    rec = procs.ProcessRecord(name="slurmctld", pid=123, start_time=456, log="/x.log")
    state.save(state.ClusterState(layout=layout, daemons={"slurmctld": rec}, killed_nodes=["node2"]), tmp_path / "c.json")
    loaded = state.load(tmp_path / "c.json")
    assert loaded is not None
    assert loaded.layout == layout
    assert loaded.daemons["slurmctld"] == rec
    assert loaded.killed_nodes == ["node2"]


def test_unreadable_state_is_no_state(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text("{not json")
    assert state.load(tmp_path / "c.json") is None


def test_a_reused_pid_is_not_our_process() -> None:
    me = procs.ProcessRecord(name="me", pid=os.getpid(), start_time=procs.start_time_of(os.getpid()) or 0, log="")
    assert procs.is_alive(me)
    impostor = procs.ProcessRecord(name="me", pid=os.getpid(), start_time=me.start_time + 1, log="")
    assert not procs.is_alive(impostor)
    assert not procs.signal_record(impostor, procs.signal.SIGTERM)


@pytest.mark.slow
def test_an_exited_daemon_is_not_alive(tmp_path: Path) -> None:
    record, proc = procs.start_daemon("t", [sys.executable, "-c", "pass"], log=tmp_path / "t.log", env=os.environ, cwd=tmp_path)
    proc.wait()
    assert not procs.is_alive(record)


@pytest.mark.slow
def test_node_processes_are_found_by_marker_and_parentage(tmp_path: Path) -> None:
    env = dict(os.environ, **{procs.CLUSTER_MARKER: str(tmp_path), procs.NODE_MARKER: "node2"})
    # A "slurmstepd" stand-in that starts a child without the markers, as tasks are.
    script = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(30)'], env={}); time.sleep(30)"
    record, proc = procs.start_daemon("stepd", [sys.executable, "-c", script], log=tmp_path / "s.log", env=env, cwd=tmp_path)
    try:
        for _ in range(100):
            found = procs.node_process_ids(tmp_path, "node2")
            if len(found) >= 2:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert record.pid in found and len(found) == 2
        assert procs.node_process_ids(tmp_path, "node1") == []
        procs.kill_pids(found)
        proc.wait(timeout=5)
    finally:
        procs.kill_pids(procs.node_process_ids(tmp_path, "node2"))


def test_port_in_use_is_detected() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert procs.port_in_use(sock.getsockname()[1])


def test_hosts_lines_are_added_and_removed_by_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosts, "_resolves", lambda name: False)
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 localhost\n10.0.0.1 other\n")
    hosts.add_node_names(["node1", "node2"], tmp_path / "a", hosts=path)
    hosts.add_node_names(["node1", "node2"], tmp_path / "a", hosts=path)
    hosts.add_node_names(["node1"], tmp_path / "b", hosts=path)
    assert path.read_text().count(hosts.MARKER) == 2
    assert "127.0.0.1 node1 node2" in path.read_text()
    hosts.remove_node_names(tmp_path / "b", hosts=path)
    assert path.read_text().count(hosts.MARKER) == 1, "another cluster's names stay"
    hosts.remove_node_names(tmp_path / "a", hosts=path)
    assert path.read_text() == "127.0.0.1 localhost\n10.0.0.1 other\n"


def test_without_gpu_nodes_there_is_no_gres_at_all(tmp_path: Path) -> None:
    text = config.slurm_conf(_layout(tmp_path))
    assert "Gres" not in text and config.gres_conf(_layout(tmp_path)) is None
    assert config.fake_gpu_files(_layout(tmp_path)) == []


def test_gpu_nodes_declare_gres_in_a_partition_of_their_own(tmp_path: Path) -> None:
    layout = ClusterLayout(root=tmp_path, nodes=3, cpus_per_node=2, base_port=20000, hostname="box", gpu_nodes=2)
    lines = config.slurm_conf(layout).splitlines()
    assert "GresTypes=gpu" in lines
    cpu_line, gpu_line = (line for line in lines if line.startswith("NodeName="))
    assert cpu_line.startswith("NodeName=node1,node2,node3 ") and "Port=[20010-20012]" in cpu_line and "Gres" not in cpu_line
    assert gpu_line.startswith("NodeName=gpu1,gpu2 ") and "Port=[20013-20014]" in gpu_line and " Gres=gpu:8 " in gpu_line
    partitions = [line for line in lines if line.startswith("PartitionName=")]
    assert partitions[0].startswith("PartitionName=dev Nodes=node1,node2,node3 Default=YES")
    assert partitions[1].startswith("PartitionName=gpu Nodes=gpu1,gpu2 ") and "Default" not in partitions[1]
    gres = config.gres_conf(layout)
    assert gres is not None and "AutoDetect=off" in gres
    assert f"NodeName=gpu1,gpu2 Name=gpu File={tmp_path}/fake-dev/nvidia[0-7]" in gres
    assert [p.name for p in config.fake_gpu_files(layout)] == [f"nvidia{i}" for i in range(8)]
    assert layout.node_names == ["node1", "node2", "node3", "gpu1", "gpu2"]
    assert len(set(layout.all_ports)) == len(layout.all_ports) == 3 + 5
    assert tmp_path / "spool" / "gpu2" in layout.directories()


def test_gpu_nodes_survive_the_record_and_old_records_have_none(tmp_path: Path) -> None:
    layout = ClusterLayout(root=tmp_path, nodes=2, base_port=20000, hostname="box", gpu_nodes=1)
    state.save(state.ClusterState(layout=layout), tmp_path / "c.json")
    loaded = state.load(tmp_path / "c.json")
    assert loaded is not None and loaded.layout == layout
    old = state.ClusterState(layout=_layout(tmp_path)).to_json()
    del old["gpu_nodes"]
    assert state.ClusterState.from_json(old).layout.gpu_nodes == 0


def test_gres_files_are_written_for_gpu_nodes_and_removed_without(tmp_path: Path) -> None:
    from hyperlaunch.devcluster import cluster

    layout = ClusterLayout(root=tmp_path, nodes=1, base_port=20000, hostname="box", gpu_nodes=1)
    for directory in layout.directories():
        directory.mkdir(parents=True, exist_ok=True)
    cluster._write_gres_files(layout)
    cluster._write_gres_files(layout)  # a second `up` finds them in place
    assert layout.gres_conf.read_text() == config.gres_conf(layout)
    # slurmd logs an error for File= entries that are not character devices
    assert all(path.is_char_device() for path in config.fake_gpu_files(layout))
    cluster._write_gres_files(ClusterLayout(root=tmp_path, nodes=1, base_port=20000, hostname="box"))
    assert not layout.gres_conf.exists()
