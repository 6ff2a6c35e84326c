"""Dagster on PostgreSQL: the embedded PostgreSQL server (`embedded.postgres`) and the stack's `--dagster-postgres`
option. The live path on that storage (sensor -> run -> materializations, checked in PostgreSQL itself) is
test_live.py's, whose `dagster dev` keeps its storage there. Every process a test starts is stopped by a fixture,
also when the test fails."""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from streaming_pipeline.devstack.embedded import postgres as postgres_module
from streaming_pipeline.devstack.embedded.ports import free_port, is_port_free
from streaming_pipeline.devstack.embedded.postgres import PostgresServer, find_binaries, server_children
from streaming_pipeline.devstack.embedded.processes import pid_alive
from streaming_pipeline.devstack.embedded.stack import EmbeddedStack
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline_tests.devstack.embedded.helpers import FAKE_REGISTRY_MODULE, processes_mentioning

# --------------------------------------------------------------------------- helpers


def _alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that are still live (non-zombie) processes."""
    return [pid for pid in pids if pid_alive(pid)]


def _listening_addresses(port: int) -> list[str]:
    """The local addresses of the TCP sockets listening on ``port`` (IPv4 and IPv6), from /proc/net."""
    addresses = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                if width == 8:
                    addresses.append(".".join(str(b) for b in reversed(raw)))
                else:
                    addresses.append("ipv6:" + address)
    return addresses


def _password(passfile: Path) -> str:
    return passfile.read_text().splitlines()[0].rsplit(":", 1)[1]


@pytest.fixture
def servers() -> Iterator[list[PostgresServer]]:
    """Servers a test appends here are always stopped."""
    started: list[PostgresServer] = []
    yield started
    for server in started:
        server.stop(timeout=10)


# --------------------------------------------------------------------------- binaries


def _fake_version(root: Path, version: str, *, with_postgres: bool = True) -> None:
    bin_dir = root / version / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("initdb", "postgres") if with_postgres else ("initdb",):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)


def test_binaries_newest_version_or_the_data_directory_s_version(tmp_path: Path) -> None:
    for version in ("9.6", "13", "15"):
        _fake_version(tmp_path, version)
    _fake_version(tmp_path, "17", with_postgres=False)  # incomplete: not a candidate
    (tmp_path / "common").mkdir()
    assert find_binaries(root=tmp_path).version == "15"
    assert find_binaries(root=tmp_path).bin_dir == tmp_path / "15" / "bin"
    assert find_binaries("13", root=tmp_path).bin_dir == tmp_path / "13" / "bin"
    with pytest.raises(StackError, match=r"made by PostgreSQL 14.*found: 9\.6, 13, 15.*`postgresql-14`"):
        find_binaries("14", root=tmp_path)


def test_missing_binaries_name_the_debian_package(tmp_path: Path) -> None:
    with pytest.raises(StackError) as error:
        find_binaries(root=tmp_path / "nothing")
    assert "Install Debian's `postgresql` package (`apt-get install postgresql`)" in str(error.value)
    assert str(tmp_path / "nothing") in str(error.value)


# --------------------------------------------------------------------------- the server


def _uid_of(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "status").read_text().split("Uid:")[1].split()[1])


# As root the server runs in a user namespace, or as the `postgres` user where user namespaces are forbidden.
ROOT_MODES = [postgres_module.USERNS, postgres_module.SETPRIV] if os.geteuid() == 0 else [postgres_module.CURRENT]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("how", ROOT_MODES)
def test_server_keeps_data_across_restarts_listens_on_loopback_only_and_stops_with_no_process_left(
    tmp_path: Path, servers: list[PostgresServer], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == postgres_module.SETPRIV:  # the fallback, as where the kernel forbids user namespaces
        monkeypatch.setattr(postgres_module, "user_namespaces_work", lambda uid, gid: False)
    elif how == postgres_module.USERNS:
        postgres_uid, postgres_gid = pwd.getpwnam("postgres").pw_uid, pwd.getpwnam("postgres").pw_gid
        if not postgres_module.user_namespaces_work(postgres_uid, postgres_gid):
            pytest.skip("this kernel or container forbids user namespaces (the setpriv case still runs)")
    ancestors = {d: stat.S_IMODE(d.stat().st_mode) for d in [*tmp_path.parents, tmp_path]}
    port = free_port()
    first = PostgresServer(tmp_path / "pg", port, log_dir=tmp_path / "logs")
    servers.append(first)
    first.start()
    assert postgres_module.server_user(first.data_dir).how == how
    pid = first.pid
    assert pid is not None

    assert _listening_addresses(port) == ["127.0.0.1"]
    members = [pid, *server_children(pid)]
    assert len(members) >= 5, members  # the server and its checkpointer, writers, launchers...
    connection = first.connect()
    with connection, connection.cursor() as cursor:
        cursor.execute("SELECT current_user, current_database(), current_setting('listen_addresses')")
        assert cursor.fetchone() == ("dagster", "dagster", "127.0.0.1")
        cursor.execute("CREATE TABLE kept (n integer)")
        cursor.execute("INSERT INTO kept VALUES (1), (2), (3)")
    connection.close()
    if how == postgres_module.USERNS:
        # Inside its namespace the server is `postgres` (uid != 0, so PostgreSQL runs); outside it is root's,
        # the data directory stays root's, and no directory's permissions changed on the way.
        postgres_uid = pwd.getpwnam("postgres").pw_uid
        assert (Path("/proc") / str(pid) / "uid_map").read_text().split() == [str(postgres_uid), "0", "1"]
        assert {_uid_of(p) for p in members} == {0}
        assert first.data_dir.stat().st_uid == 0
        assert {d: stat.S_IMODE(d.stat().st_mode) for d in ancestors} == ancestors
        # What broke the setpriv fallback while a server ran: a directory above made private again (pytest
        # resets /tmp/pytest-of-root to 0700 when a session starts). Root passes it as its owner.
        os.chmod(tmp_path, 0o700)
        connection = first.connect()
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CHECKPOINT")  # writes global/pg_control, whose open failed in that case
        connection.close()
    elif how == postgres_module.SETPRIV:
        postgres_uid = pwd.getpwnam("postgres").pw_uid
        assert {_uid_of(p) for p in members} == {postgres_uid}
        assert first.data_dir.stat().st_uid == postgres_uid
    if os.geteuid() == 0:
        assert first.passfile.stat().st_uid == 0
    assert stat.S_IMODE(first.passfile.stat().st_mode) == 0o600
    password = _password(first.passfile)
    assert len(password) >= 40 and password not in first.log_file.read_text()

    assert first.stop() is False  # stopped by the fast shutdown, not killed
    assert _alive(members) == []
    assert processes_mentioning(str(first.data_dir)) == []
    assert is_port_free(port)
    assert "received fast shutdown request" in first.log_file.read_text()

    again = PostgresServer(tmp_path / "pg", port, log_dir=tmp_path / "logs")
    servers.append(again)
    again.start()
    assert again.pid != pid
    connection = again.connect()
    with connection, connection.cursor() as cursor:
        cursor.execute("SELECT n FROM kept ORDER BY n")
        assert cursor.fetchall() == [(1,), (2,), (3,)]
    connection.close()
    assert first.log_file.read_text().count(" initdb (PostgreSQL ") == 1  # the data directory was made once
    assert _password(again.passfile) == password
    assert again.pid is not None
    members = [again.pid, *server_children(again.pid)]
    assert again.stop() is False
    assert _alive(members) == []
    assert processes_mentioning(str(again.data_dir)) == []


@pytest.mark.integration
@pytest.mark.slow
def test_a_server_that_cannot_start_names_its_log_and_leaves_no_process(
    tmp_path: Path, servers: list[PostgresServer]
) -> None:
    server = PostgresServer(tmp_path / "pg", free_port(), log_dir=tmp_path / "logs")
    servers.append(server)
    server.start()
    server.stop()
    with open(server.data_dir / "postgresql.conf", "a") as conf:  # a setting the server refuses to start with
        conf.write("shared_buffers = 'plenty'\n")

    broken = PostgresServer(tmp_path / "pg", free_port(), log_dir=tmp_path / "logs")
    servers.append(broken)
    with pytest.raises(StackError) as error:
        broken.start(timeout=60)
    message = str(error.value)
    assert message.startswith("PostgreSQL exited with code 1 while starting; log ")
    assert str(broken.log_file) in message and "shared_buffers" in message
    assert processes_mentioning(str(broken.data_dir)) == []


# --------------------------------------------------------------------------- the stack option


@pytest.mark.integration
@pytest.mark.slow
def test_stack_up_with_dagster_postgres_writes_the_storage_and_down_stops_it(
    tmp_path: Path, stacks: list[EmbeddedStack]
) -> None:
    import dagster as dg
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    options: dict[str, Any] = {"prefer_standard_ports": False, "registry_module": FAKE_REGISTRY_MODULE, "spark": False}
    stack = EmbeddedStack(tmp_path / "stack", dagster_postgres=True, **options)
    stacks.append(stack)
    progress: list[str] = []
    info = stack.up(progress=progress.append)
    state = json.loads(stack.state_file.read_text())
    port = state["postgres"]["port"]
    assert state["postgres"]["enabled"] is True and state["postgres"]["pid"] == info.postgres_pid
    assert info.postgres_url == f"postgresql://dagster@127.0.0.1:{port}/dagster"
    assert any(m.startswith("PostgreSQL ready on postgresql://dagster@127.0.0.1:") for m in progress), progress

    config = yaml.safe_load((stack.dagster_home / "dagster.yaml").read_text())
    assert config["storage"] == {
        "postgres": {
            "postgres_db": {
                "username": "dagster",
                "hostname": "127.0.0.1",
                "port": port,
                "db_name": "dagster",
                "params": {"passfile": str(stack.directory / "postgres" / "pgpass")},
                "scheme": "postgresql+psycopg2",
            }
        }
    }
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"  # the rest of dagster.yaml as before
    password = _password(stack.directory / "postgres" / "pgpass")
    shown = "\n".join(stack.env_lines() + progress) + (stack.dagster_home / "dagster.yaml").read_text()
    assert password not in shown and "PGPASS" not in shown

    status = stack.status()
    assert status.running and status.postgres is not None and status.postgres.running
    assert (status.postgres.pid, status.postgres.address) == (info.postgres_pid, info.postgres_url)
    assert status.as_json()["dagster_storage"] == "postgres"
    cli_status = subprocess.run(
        [sys.executable, "-m", "streaming_pipeline.devstack.embedded.stack_cli"]
        + ["stack", "status", "--dir", str(stack.directory)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    row = rf"^postgres\s+running\s+{info.postgres_pid}\s+postgresql://dagster@127\.0\.0\.1:{port}/dagster\s+\S+postgres\.log$"
    assert re.search(row, cli_status, re.MULTILINE), cli_status

    with dg.DagsterInstance.from_config(str(stack.dagster_home)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        assert instance.get_runs() == []

    postgres_pid = info.postgres_pid
    assert postgres_pid is not None
    members = [postgres_pid, *server_children(postgres_pid)]
    assert stack.down() is True
    assert _alive(members) == []
    assert not stack.status().postgres.running  # type: ignore[union-attr]

    # A later `stack up` without the option keeps PostgreSQL (recorded in stack.json), on the same port.
    again = EmbeddedStack(tmp_path / "stack", **options)
    stacks.append(again)
    restarted = again.up()
    assert restarted.postgres_url == info.postgres_url and restarted.postgres_pid != postgres_pid
    assert yaml.safe_load((again.dagster_home / "dagster.yaml").read_text())["storage"] == config["storage"]
    again.down()
    assert processes_mentioning(str(stack.directory / "postgres" / "data")) == []


@pytest.mark.integration
@pytest.mark.slow
def test_stack_up_whose_postgres_cannot_start_stops_the_broker_and_registry_it_started(
    tmp_path: Path, stacks: list[EmbeddedStack], monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = tmp_path / "no-postgresql"
    real_find_binaries = postgres_module.find_binaries
    monkeypatch.setattr(
        postgres_module, "find_binaries", lambda version=None, root=None: real_find_binaries(version, root=nowhere)
    )
    stack = EmbeddedStack(
        tmp_path / "stack", prefer_standard_ports=False, registry_module=FAKE_REGISTRY_MODULE, spark=False,
        dagster_postgres=True,
    )  # fmt: skip
    stacks.append(stack)
    progress: list[str] = []
    with pytest.raises(StackError) as error:
        stack.up(progress=progress.append)
    assert "Install Debian's `postgresql` package (`apt-get install postgresql`)" in str(error.value)
    started = [int(m) for m in re.findall(r"ready on \S+ \(pid (\d+),", "\n".join(progress))]
    assert len(started) == 2, progress  # the broker and the registry had started before PostgreSQL failed
    assert _alive(started) == []
    state = json.loads(stack.state_file.read_text())
    assert [state[name]["pid"] for name in ("kafka", "registry")] == [None, None]
    assert not stack.status().running
