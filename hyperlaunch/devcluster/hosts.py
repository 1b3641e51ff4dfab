"""Make the node names resolve: torchrun's rendezvous and Slurm's host lists use them.
Lines we add carry a marker naming the cluster's directory, so its `down` removes exactly
those (another dev cluster on this machine may rely on its own)."""

from __future__ import annotations

import contextlib
import fcntl
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

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


def _named_by_other_clusters(text: str, root: Path) -> set[str]:
    """Names that resolve only while another dev cluster's line is there: its `down` takes
    them away."""
    lines = [line for line in text.splitlines() if MARKER in line and not _is_ours(line, root)]
    return {name for line in lines for name in line.split(MARKER)[0].split()[1:]}


def add_node_names(names: list[str], root: Path, hosts: Path = HOSTS) -> None:
    with _locked(hosts) as handle:
        text = handle.read()
        borrowed = _named_by_other_clusters(text, root)
        if all(_resolves(n) and n not in borrowed for n in names):
            return
        kept = [line for line in text.splitlines() if not _is_ours(line, root)]
        kept.append(f"127.0.0.1 {' '.join(names)} {_marker(root)}")
        _rewrite(handle, "\n".join(kept) + "\n")


def remove_node_names(root: Path, hosts: Path = HOSTS) -> None:
    if not hosts.exists():
        return
    with _locked(hosts) as handle:
        lines = handle.read().splitlines()
        kept = [line for line in lines if not _is_ours(line, root)]
        if len(kept) != len(lines):
            _rewrite(handle, "\n".join(kept) + "\n")


@contextlib.contextmanager
def _locked(hosts: Path) -> Iterator[TextIO]:
    """The file, open and locked: two clusters' `up` or `down` at once would each rewrite it
    from what they read, and one would drop the other's line."""
    with open(hosts, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        yield handle


def _rewrite(handle: TextIO, text: str) -> None:
    # In place, not by a rename: /etc/hosts is often a bind mount in containers, and the lock
    # is on this very file.
    handle.truncate(0)
    handle.write(text)
