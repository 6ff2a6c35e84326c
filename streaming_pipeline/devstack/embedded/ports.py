"""TCP port helpers for the embedded stack: is a port free, pick free ports, wait for a listener."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterable

LOOPBACK = "127.0.0.1"


def is_port_free(port: int, host: str = LOOPBACK) -> bool:
    """True when a server could bind ``host:port`` right now.

    SO_REUSEADDR is set like the JVM and uvicorn do, so a port whose last
    connections are in TIME_WAIT (a server that just stopped) counts as free,
    while one with a live listener (on this address or on 0.0.0.0) does not.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = LOOPBACK, exclude: Iterable[int] = ()) -> list[int]:
    """``count`` distinct ports that the OS reports free on ``host`` (all held open until chosen)."""
    excluded = set(exclude)
    chosen: list[int] = []
    held: list[socket.socket] = []
    try:
        while len(chosen) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind((host, 0))
            port = sock.getsockname()[1]
            if port not in excluded and port not in chosen:
                chosen.append(port)
    finally:
        for sock in held:
            sock.close()
    return chosen


def free_port(host: str = LOOPBACK, exclude: Iterable[int] = ()) -> int:
    """One port that is free on ``host`` now."""
    return free_ports(1, host, exclude)[0]


def port_accepts(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """True when something accepts a TCP connection on ``host:port``."""
    with contextlib.suppress(OSError):
        with socket.create_connection((host, port), timeout=timeout):
            return True
    return False


def wait_for_port(port: int, host: str = LOOPBACK, timeout: float = 30.0) -> bool:
    """Poll until ``host:port`` accepts connections; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_accepts(port, host):
            return True
        time.sleep(0.1)
    return False
