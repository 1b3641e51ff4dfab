"""Processes of the dev cluster: start detached daemons, tell whether a recorded pid is
still the process we started, stop them, and find every process that belongs to one node.

A pid alone can be reused; a pid plus its start time (field 22 of /proc/PID/stat) cannot,
so nothing here ever signals a process the cluster did not start."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

# Every daemon gets these in its environment; slurmstepd inherits them from slurmd, so
# the job processes of one node can be found even after they are re-parented to init.
CLUSTER_MARKER = "HYPERLAUNCH_DEV_CLUSTER"
NODE_MARKER = "HYPERLAUNCH_DEV_NODE"


@dataclass(frozen=True)
class ProcessRecord:
    """A daemon the cluster started."""

    name: str
    pid: int
    start_time: int
    log: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessRecord:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),  # type: ignore[call-overload]
            start_time=int(data["start_time"]),  # type: ignore[call-overload]
            log=str(data["log"]),
        )


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def start_time_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def state_of(pid: int) -> str | None:
    """The process's state letter (R, S, T for stopped, Z for a zombie...); None when gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def is_alive(record: ProcessRecord) -> bool:
    """The recorded process still runs (not a zombie, and the pid was not reused)."""
    fields = _stat_fields(record.pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return int(fields[19]) == record.start_time


def start_daemon(
    name: str,
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str],
    cwd: Path,
) -> tuple[ProcessRecord, subprocess.Popen[bytes]]:
    """Start a daemon in the foreground of its own session, output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    start = None
    for _ in range(50):
        start = start_time_of(proc.pid)
        if start is not None:
            break
        time.sleep(0.01)
    record = ProcessRecord(name=name, pid=proc.pid, start_time=start or 0, log=str(log))
    return record, proc


def signal_record(record: ProcessRecord, sig: signal.Signals) -> bool:
    if not is_alive(record):
        return False
    try:
        os.kill(record.pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop(records: Iterable[ProcessRecord], *, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL whatever is still there after `grace_s`."""
    records = [r for r in records if signal_record(r, signal.SIGTERM)]
    deadline = time.monotonic() + grace_s
    while records and time.monotonic() < deadline:
        _reap_children()
        records = [r for r in records if is_alive(r)]
        time.sleep(0.1)
    for record in records:
        signal_record(record, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(is_alive(r) for r in records) and time.monotonic() < deadline:
        _reap_children()
        time.sleep(0.05)


def _reap_children() -> None:
    # Daemons started by this very process turn into zombies until reaped.
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def environ(pid: int) -> dict[str, str]:
    """The environment process `pid` started with ({} when it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _marked_with_descendants(wanted: Mapping[str, str]) -> list[int]:
    """Live processes whose environment holds every `wanted` item, with all their
    descendants (job tasks do not carry the markers, but descend from slurmstepd)."""
    pids = _all_pids()
    parents = {pid: parent_of(pid) for pid in pids}
    found = set()
    for pid in pids:
        env = environ(pid)
        if all(env.get(key) == value for key, value in wanted.items()):
            found.add(pid)
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                changed = True
    return sorted(p for p in found if p != os.getpid())


def node_process_ids(cluster_root: Path, node: str) -> list[int]:
    """Every live process of `node`: its slurmd, the slurmstepd daemons it forked (they
    inherit the markers) and all their descendants (the job's tasks)."""
    return _marked_with_descendants({CLUSTER_MARKER: str(cluster_root), NODE_MARKER: node})


def cluster_process_ids(cluster_root: Path) -> list[int]:
    """Every live process of the cluster: daemons, slurmstepd and job tasks."""
    return _marked_with_descendants({CLUSTER_MARKER: str(cluster_root)})


def kill_pids(pids: Iterable[int]) -> list[int]:
    """SIGKILL each pid; returns those that were signalled."""
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    _reap_children()
    return killed


def port_in_use(port: int) -> bool:
    """True when something already listens on `port` (TIME_WAIT leftovers do not count)."""
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as err:
                if err.errno in (errno.EADDRINUSE, errno.EACCES):
                    return True
                raise
    return False


def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
