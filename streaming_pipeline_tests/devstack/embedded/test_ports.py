"""The stack's servers get ports no outgoing connection can be holding: below the OS's ephemeral range."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming_pipeline.devstack.embedded import ports


def _consecutive_free_ports(count: int) -> int:
    """The first of `count` consecutive ports below the ephemeral range that nothing holds now."""
    first, _ = ports.ephemeral_port_range()
    for start in range(ports.LOWEST_PICKED_PORT, first - count):
        if all(ports.is_port_free(port, time_wait_is_free=False) for port in range(start, start + count)):
            return start
    raise AssertionError(f"no {count} free consecutive ports between {ports.LOWEST_PICKED_PORT} and {first}")


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    """Sockets a test appends here are closed after it."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        with contextlib.suppress(OSError):
            sock.close()


def test_the_ephemeral_range_is_read_from_the_os_and_defaults_to_linuxs(tmp_path: Path) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("40000\t50999\n")
    assert ports.ephemeral_port_range(range_file) == (40000, 50999)
    range_file.write_text("not a range\n")
    assert ports.ephemeral_port_range(range_file) == (32768, 60999)
    assert ports.ephemeral_port_range(tmp_path / "missing") == (32768, 60999)


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    first, _ = ports.ephemeral_port_range()
    chosen = ports.free_ports(5, exclude=[ports.LOWEST_PICKED_PORT])
    assert len(set(chosen)) == 5
    assert all(ports.LOWEST_PICKED_PORT < port < first for port in chosen)
    assert all(ports.is_port_free(port, time_wait_is_free=False) for port in chosen)


def test_a_port_held_by_a_listener_or_by_a_clients_connection_is_not_picked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sockets: list[socket.socket]
) -> None:
    start = _consecutive_free_ports(4)
    # Only start .. start+3 can be picked.
    monkeypatch.setattr(ports, "LOWEST_PICKED_PORT", start)
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text(f"{start + 4} 60999\n")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sockets.append(listener)
    listener.bind((ports.LOOPBACK, start))
    listener.listen(1)
    # A client whose outgoing connection has start+2 as its local port, as a PostgreSQL client's may: the port is
    # not free for a server even though nothing listens on it.
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sockets.append(client)
    client.bind((ports.LOOPBACK, start + 2))
    client.connect((ports.LOOPBACK, start))
    accepted, _ = listener.accept()
    sockets.append(accepted)
    assert sorted(ports.free_ports(2, range_file=range_file)) == [start + 1, start + 3]
    assert ports.free_ports(1, exclude=[start + 1], range_file=range_file) == [start + 3]


def test_with_no_room_below_the_ephemeral_range_the_os_picks(tmp_path: Path) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("1024 65535\n")
    chosen = ports.free_ports(3, range_file=range_file)
    assert len(set(chosen)) == 3
    assert all(ports.is_port_free(port, time_wait_is_free=False) for port in chosen)
