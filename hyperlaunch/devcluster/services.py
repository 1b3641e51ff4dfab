"""Start each daemon of the dev cluster and wait until it answers. A daemon that exits or
does not answer in time raises ClusterError naming its log file."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from hyperlaunch.core.errors import ClusterError, SlurmError
from hyperlaunch.devcluster import procs
from hyperlaunch.devcluster.install import find_binary
from hyperlaunch.devcluster.layout import CLUSTER_NAME, ClusterLayout
from hyperlaunch.slurm import accounting as slurm_accounting
from hyperlaunch.slurm import nodes as slurm_nodes
from hyperlaunch.slurm.nodes import NodeInfo


def daemon_env(layout: ClusterLayout, node: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["SLURM_CONF"] = str(layout.slurm_conf)
    env[procs.CLUSTER_MARKER] = str(layout.root)
    env.pop(procs.NODE_MARKER, None)
    if node is not None:
        env[procs.NODE_MARKER] = node
    return env


def _binary(name: str) -> str:
    path = find_binary(name)
    if path is None:
        raise ClusterError(f"{name} not found", hint="run 'hyperlaunch dev-cluster up' as root to install it")
    return path


def _wait(
    record: procs.ProcessRecord,
    proc: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    *,
    what: str,
    timeout_s: float,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{what} exited with code {proc.returncode} at start", hint=f"read {record.log}")
        if ready():
            return
        time.sleep(0.2)
    raise ClusterError(f"{what} did not become ready within {timeout_s:.0f} s", hint=f"read {record.log}")


def start_munge(layout: ClusterLayout) -> procs.ProcessRecord:
    """The cluster's own munged, on its own socket: bringing another cluster down or killing
    its daemons leaves this one's credentials working."""
    layout.munge_socket.unlink(missing_ok=True)
    argv = [
        _binary("munged"),
        "--foreground",
        # Past a socket an unclean end left, and the machine's key belonging to munge's user,
        # not root: munged would refuse both.
        "--force",
        f"--socket={layout.munge_socket}",
        f"--key-file={layout.munge_key}",
        f"--pid-file={layout.run_dir / 'munged.pid'}",
        f"--log-file={layout.log('munged')}",
        f"--seed-file={layout.state_dir / 'munged.seed'}",
    ]
    record, proc = procs.start_daemon(
        "munged", argv, log=layout.log("munged"), env=daemon_env(layout), cwd=layout.root
    )
    _wait(record, proc, lambda: _munge_answers(layout.munge_socket), what="munged", timeout_s=15)
    return record


def _munge_answers(socket_path: Path) -> bool:
    if not socket_path.exists():
        return False
    probe = subprocess.run(
        ["munge", "-n", f"--socket={socket_path}"], capture_output=True, check=False, timeout=10
    )
    return probe.returncode == 0


def _mariadb_client(layout: ClusterLayout, sql: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_binary("mariadb"), "--no-defaults", f"--socket={layout.mariadb_socket}", "-u", "root", "-e", sql],
        capture_output=True,
        text=True,
        check=False,
    )


def start_mariadb(layout: ClusterLayout) -> procs.ProcessRecord:
    log = layout.log("mariadb")
    if not (layout.mariadb_data / "mysql").exists():
        init = subprocess.run(
            [
                _binary("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={layout.mariadb_data}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        with open(log, "a") as out:
            out.write(init.stdout + init.stderr)
        if init.returncode != 0:
            raise ClusterError("mariadb-install-db failed to create the accounting database", hint=f"read {log}")
    argv = [
        _binary("mariadbd"),
        "--no-defaults",
        f"--datadir={layout.mariadb_data}",
        f"--socket={layout.mariadb_socket}",
        f"--port={layout.mariadb_port}",
        "--bind-address=127.0.0.1",
        "--user=root",
        f"--pid-file={layout.run_dir / 'mariadb.pid'}",
        f"--log-error={log}",
        "--skip-name-resolve",
        "--innodb-buffer-pool-size=64M",
        "--innodb-lock-wait-timeout=900",
    ]
    record, proc = procs.start_daemon("mariadb", argv, log=log, env=daemon_env(layout), cwd=layout.root)
    _wait(
        record,
        proc,
        lambda: _mariadb_client(layout, "SELECT 1").returncode == 0,
        what="MariaDB",
        timeout_s=60,
    )
    password = db_password(layout)
    grants = "".join(
        f"CREATE USER IF NOT EXISTS 'slurm'@'{host}' IDENTIFIED BY '{password}';"
        f"ALTER USER 'slurm'@'{host}' IDENTIFIED BY '{password}';"
        f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{host}';"
        for host in ("localhost", "127.0.0.1")
    )
    result = _mariadb_client(layout, grants)
    if result.returncode != 0:
        raise ClusterError(f"could not create the slurm database user: {result.stderr.strip()}", hint=f"read {log}")
    return record


def db_password(layout: ClusterLayout) -> str:
    """The accounting database password, made once per cluster directory."""
    path = layout.db_password_file
    if not path.exists():
        path.write_text(secrets.token_hex(16))
        os.chmod(path, 0o600)
    return path.read_text().strip()


def start_slurmdbd(layout: ClusterLayout) -> procs.ProcessRecord:
    argv = [_binary("slurmdbd"), "-D"]
    record, proc = procs.start_daemon(
        "slurmdbd", argv, log=layout.log("slurmdbd.stdout"), env=daemon_env(layout), cwd=layout.root
    )
    record = procs.ProcessRecord(record.name, record.pid, record.start_time, str(layout.log("slurmdbd")))
    _wait(record, proc, lambda: procs.port_accepts(layout.slurmdbd_port), what="slurmdbd", timeout_s=60)
    try:
        slurm_accounting.ensure_accounting_cluster(CLUSTER_NAME, env=daemon_env(layout))
    except SlurmError as err:
        raise ClusterError(str(err), hint=f"read {record.log}") from err
    return record


def start_slurmctld(layout: ClusterLayout) -> procs.ProcessRecord:
    argv = [_binary("slurmctld"), "-D", "-i"]
    record, proc = procs.start_daemon(
        "slurmctld", argv, log=layout.log("slurmctld.stdout"), env=daemon_env(layout), cwd=layout.root
    )
    record = procs.ProcessRecord(record.name, record.pid, record.start_time, str(layout.log("slurmctld")))
    env = daemon_env(layout)
    _wait(record, proc, lambda: slurm_nodes.controller_responds(env=env), what="slurmctld", timeout_s=60)
    return record


def start_slurmd(layout: ClusterLayout, node: str) -> procs.ProcessRecord:
    argv = [_binary("slurmd"), "-D", "-N", node]
    record, proc = procs.start_daemon(
        f"slurmd-{node}",
        argv,
        log=layout.log(f"slurmd-{node}.stdout"),
        env=daemon_env(layout, node),
        cwd=layout.root,
    )
    record = procs.ProcessRecord(record.name, record.pid, record.start_time, str(layout.log(f"slurmd-{node}")))
    port = layout.slurmd_port(layout.node_names.index(node))
    _wait(record, proc, lambda: procs.port_accepts(port), what=f"slurmd of {node}", timeout_s=30)
    return record


def wait_nodes_ready(
    layout: ClusterLayout,
    nodes: list[str],
    *,
    timeout_s: float,
    progress: Callable[[str], None],
    logs: Mapping[str, str],
    resume_drained: bool = False,
) -> None:
    """Wait until each node answers and accepts work (idle, allocated or mixed). With
    `resume_drained` (a fresh start), a node that answers drained is resumed, once, saying so:
    the drain is an earlier run's, which Slurm's saved state keeps."""
    env = daemon_env(layout)
    deadline = time.monotonic() + timeout_s
    last = ""
    resumed: set[str] = set()
    while True:
        states = {n.name: n for n in slurm_nodes.node_states(env=env)}
        pending = [n for n in nodes if not _ready(states.get(n))]
        if not pending:
            return
        drained = [states[n] for n in pending if resume_drained and n not in resumed and _drained(states.get(n))]
        if drained:
            slurm_nodes.resume([n.name for n in drained], env=env)
            resumed.update(n.name for n in drained)
            progress(f"resumed {_drain_summary(drained)}: drained by an earlier run")
            continue
        summary = ", ".join(f"{n}={states[n].state if n in states else '?'}" for n in pending)
        if summary != last:
            progress(f"waiting for nodes: {summary}")
            last = summary
        if time.monotonic() > deadline:
            first = pending[0]
            raise ClusterError(
                f"{first} did not become ready within {timeout_s:.0f} s ({summary})",
                hint=f"read {logs.get(first, layout.log('slurmctld'))}",
            )
        time.sleep(0.5)


def _drained(node: NodeInfo | None) -> bool:
    """Drained (or failing), and answering: its slurmd registered."""
    if node is None:
        return False
    state = node.state.lower()
    return ("drain" in state or "fail" in state) and not state.endswith("*")


def _drain_summary(nodes: list[NodeInfo]) -> str:
    return ", ".join(f"{n.name} ({n.reason})" if n.reason and n.reason != "none" else n.name for n in nodes)


def _ready(node: NodeInfo | None) -> bool:
    if node is None:
        return False
    state = node.state.lower()
    not_responding = state.endswith("*") or "down" in state or "drain" in state or "fail" in state
    return not not_responding and any(word in state for word in ("idle", "alloc", "mix", "complet"))


def ensure_layout(layout: ClusterLayout) -> None:
    for directory in layout.directories():
        directory.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.root, 0o755)
