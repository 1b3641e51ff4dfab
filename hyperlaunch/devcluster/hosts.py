"""Make the node names resolve: torchrun's rendezvous and Slurm's host lists use them.
Lines we add carry a marker naming the cluster's directory, so its `down` removes exactly
those (another dev cluster on this machine may rely on its own)."""

from __future__ import annotations

import socket
from pathlib import Path

HOSTS = Path("/etc/hosts")
MARKER = "# hyperlaunch dev-cluster"


def _resolves(name: str) -> bool:
    try:
        socket.gethostbyname(name)
        return True
    except OSError:
        return False


def _marker(root: Path) -> str:
    return f"{MARKER} {root}"


def _is_ours(line: str, root: Path) -> bool:
    return line.endswith(_marker(root))


def add_node_names(names: list[str], root: Path, hosts: Path = HOSTS) -> None:
    if all(_resolves(n) for n in names):
        return
    text = hosts.read_text() if hosts.exists() else ""
    kept = [line for line in text.splitlines() if not _is_ours(line, root)]
    kept.append(f"127.0.0.1 {' '.join(names)} {_marker(root)}")
    _write_in_place(hosts, "\n".join(kept) + "\n")


def remove_node_names(root: Path, hosts: Path = HOSTS) -> None:
    if not hosts.exists():
        return
    lines = hosts.read_text().splitlines()
    kept = [line for line in lines if not _is_ours(line, root)]
    if len(kept) != len(lines):
        _write_in_place(hosts, "\n".join(kept) + "\n")


def _write_in_place(path: Path, text: str) -> None:
    # /etc/hosts is often a bind mount in containers: a rename over it fails, so rewrite it.
    with open(path, "r+" if path.exists() else "w") as handle:
        handle.write(text)
        handle.truncate()
