"""Is a TCP port taken on this host? The rendezvous store (torchrun's, on the round's head node)
listens on every address, IPv6 and IPv4, and sets SO_REUSEADDR: a bind made the same way fails
exactly where the store's would, and a port left in TIME_WAIT by an ended round counts free."""

from __future__ import annotations

import errno
import socket


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
