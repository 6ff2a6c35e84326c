"""TCP port helpers for the embedded stack: is a port free, pick free ports, wait for a listener."""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterable
from pathlib import Path

LOOPBACK = "127.0.0.1"

#: The lowest port `free_ports` picks: above the registered ports most services listen on.
LOWEST_PICKED_PORT = 20000

#: Where Linux keeps the range it takes the local ports of outgoing connections from.
_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")

#: Linux's default range, for a system that does not say.
_DEFAULT_EPHEMERAL_RANGE = (32768, 60999)


def is_port_free(port: int, host: str = LOOPBACK, *, time_wait_is_free: bool = True) -> bool:
    """True when a server could bind ``host:port`` right now.

    SO_REUSEADDR is set like the JVM and uvicorn do, so a port whose last
    connections are in TIME_WAIT (a server that just stopped) counts as free,
    while one with a live listener (on this address or on 0.0.0.0) does not.
    With ``time_wait_is_free=False`` nothing may hold the port at all, not
    even a connection in TIME_WAIT.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if time_wait_is_free:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ephemeral_port_range(range_file: Path = _PORT_RANGE_FILE) -> tuple[int, int]:
    """The first and last port the OS gives outgoing connections as their local port."""
    with contextlib.suppress(OSError, ValueError):
        low, high = (int(field) for field in range_file.read_text().split())
        return low, high
    return _DEFAULT_EPHEMERAL_RANGE


def free_ports(
    count: int, host: str = LOOPBACK, exclude: Iterable[int] = (), range_file: Path = _PORT_RANGE_FILE
) -> list[int]:
    """``count`` distinct ports that are free on ``host`` now, picked at random below the ephemeral range.

    A port the OS picks itself (bind to port 0) lies inside the range that outgoing connections take their
    local ports from: a server restarted later on its recorded port can then find it held by a client's
    connection (a short PostgreSQL or Kafka client one, say). Below the range no client takes it. When there
    is no room below the range (a system whose range starts low), the OS picks.
    """
    excluded = set(exclude)
    chosen: list[int] = []
    low = LOWEST_PICKED_PORT
    high = ephemeral_port_range(range_file)[0]  # exclusive
    candidates = list(range(low, high)) if high > low else []
    random.shuffle(candidates)
    for port in candidates:
        if len(chosen) == count:
            return chosen
        if port not in excluded and is_port_free(port, host, time_wait_is_free=False):
            chosen.append(port)
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
