"""Is a TCP port taken on this host? The rendezvous store (torchrun's, on the round's head node)
listens on every address, IPv6 and IPv4, and sets SO_REUSEADDR: a bind made the same way fails
exactly where the store's would, and a port left in TIME_WAIT by an ended round counts free.

A port is also taken while another job's round has claimed it and its store may not be bound
yet (torchrun binds a few seconds after the step starts; two supervisors on one host choosing in
that window would both see it free): a claim is a file in the host's temporary folder naming the
round, `hyperlaunch-rendezvous-PORT`, created exclusively, and held for CLAIM_TTL_S at most."""

from __future__ import annotations

import errno
import os
import socket
import stat
import tempfile
import time

CLAIM_TTL_S = 60.0
"""How long a claim holds a port its round's store has not bound yet."""
_CLAIM_PREFIX = "hyperlaunch-rendezvous-"


def _claim_path(port: int) -> str:
    return os.path.join(tempfile.gettempdir(), _CLAIM_PREFIX + str(port))


def _owner(path: str) -> str:
    """Whose claim the file is ('' when it cannot be read or is no regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, 200).decode("utf-8", "replace")
    finally:
        os.close(fd)


def claim(port: int, owner: str, now: float | None = None) -> bool:
    """Claim `port` on this host for `owner` (`JOB.ROUND`): True when it is this owner's (or the
    claims cannot be kept here: the bind check decides alone); False while another owner's claim
    younger than CLAIM_TTL_S holds it. A stale claim is replaced; another user's stale one (which
    the sticky temporary folder keeps) is ignored."""
    try:
        path = _claim_path(port)
    except OSError:  # no usable temporary folder
        return True
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue  # released meanwhile
            except OSError:
                return True
            if _owner(path) == owner:
                return True
            if (time.time() if now is None else now) - info.st_mtime < CLAIM_TTL_S:
                return False
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            except OSError:
                return True
            continue
        except OSError:
            return True  # no temporary folder to write in
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(owner)
        except OSError:
            pass  # a full disk: the empty claim still holds the port, for CLAIM_TTL_S
        return True
    return False


def release(port: int, owner: str) -> None:
    """Remove `owner`'s claim on `port`, once its round has ended."""
    try:
        path = _claim_path(port)
        if _owner(path) == owner:
            os.unlink(path)
    except OSError:
        pass


def in_use(port: int) -> bool:
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                try:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                except OSError:
                    pass
            try:
                sock.bind((address, port))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    return True
                continue  # IPv6 is off on this host: IPv4 decides
            return False
    return False
