"""Dev clusters on one machine share nothing another's `down` or death can take away: the
decisions, without daemons."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.devcluster import config, hosts, install
from hyperlaunch.devcluster.layout import MACHINE_MUNGE_KEY, ClusterLayout


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
