"""Make the node names resolve: torchrun's rendezvous and Slurm's host lists use them.
Lines we add carry a marker so `down` removes exactly those."""

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


def add_node_names(names: list[str], hosts: Path = HOSTS) -> None:
    if all(_resolves(n) for n in names):
        return
    text = hosts.read_text() if hosts.exists() else ""
    kept = [line for line in text.splitlines() if MARKER not in line]
    kept.append(f"127.0.0.1 {' '.join(names)} {MARKER}")
    _write_in_place(hosts, "\n".join(kept) + "\n")


def remove_node_names(hosts: Path = HOSTS) -> None:
    if not hosts.exists():
        return
    text = hosts.read_text()
    if MARKER not in text:
        return
    kept = [line for line in text.splitlines() if MARKER not in line]
    _write_in_place(hosts, "\n".join(kept) + "\n")


def _write_in_place(path: Path, text: str) -> None:
    # /etc/hosts is often a bind mount in containers: a rename over it fails, so rewrite it.
    with open(path, "r+" if path.exists() else "w") as handle:
        handle.write(text)
        handle.truncate()
