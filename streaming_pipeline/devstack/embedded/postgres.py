"""A PostgreSQL server for Dagster's storage (runs, event log, schedules), run from the machine's own PostgreSQL
binaries: `streaming-pipeline stack up --dagster-postgres`.

Binaries: Debian's `postgresql` package installs them under ``/usr/lib/postgresql/<major>/bin``. A new data
directory is made with the newest major version found there; an existing one is served by the version that
made it (its ``PG_VERSION``).

Layout under the stack directory: ``postgres/data`` (the data directory, made by initdb once and kept across
restarts), ``postgres/socket`` (the server's unix socket, instead of /var/run/postgresql), ``postgres/pgpass``
(the password file clients use) and ``logs/postgres.log`` (initdb's and the server's output).

Network: the server listens on 127.0.0.1 only (``listen_addresses``), on a free or recorded port, and on
the unix socket in ``postgres/socket`` (left out when that path would exceed the 107 bytes a socket
address holds; clients use TCP).

Authentication: one role, ``dagster`` (the superuser initdb creates, owner of the ``dagster`` database), with
a random password made at initdb, and ``scram-sha-256`` for every connection, TCP and socket alike. Not
``trust``: on a loopback-only server ``trust`` still lets every local account connect as the superuser, which
can run programs as the server's OS user (``COPY ... TO PROGRAM``); a machine shared by several users or
agents should not hand that out. The password is kept only in ``postgres/pgpass`` (libpq's password-file
format, mode 0600, readable by the account that runs the stack), and dagster.yaml names that file through
the libpq connection parameter ``passfile``, so the password is never in dagster.yaml, never in the
environment, never printed by ``stack env`` or ``stack status`` and never on a command line (initdb reads
it from a file that is deleted right after).

Root: PostgreSQL refuses to run as root (CI runs as root). Then initdb and the server run in a user namespace
of their own (``unshare --user --map-user=<postgres uid>``; unshare execs, so the recorded pid is the
server's): inside it their uid is the ``postgres`` system user's, which PostgreSQL accepts, and that uid maps to
root outside. So, as seen from the machine, they are root's processes without any capability: they own root's
files (the data directory stays root's) and pass through root's 0700 directories as their owner, with no
ownership or permission changed anywhere. This gives the server no more than the stack's other processes
(the broker, the Spark Connect server) already have, and only root can read the password file that lets one
log in to it. Where the kernel forbids user namespaces (some containers' seccomp profiles), they run as the
``postgres`` system user instead, through ``setpriv`` (uid and gid set, root's supplementary groups cleared,
exec): the data and socket directories are chowned to it, and every directory above them that it cannot pass
through gets the search bit of the class it falls in (pass through only, no listing; pytest's
``/tmp/pytest-of-root`` and ``mktemp -d`` directories are 0700), written to the log. That fallback breaks if
such a directory is made private again while the server runs: a pytest session starting on the same machine
resets ``/tmp/pytest-of-root`` to 0700, and the server then stops with "could not stat data directory:
Permission denied". A data directory that already belongs to another account is served by that account.

Stop: SIGINT, PostgreSQL's fast shutdown (open transactions roll back, sessions close). SIGTERM is its smart
shutdown, which waits for every client to disconnect, and a running ``dagster dev`` holds connections open
(the event log's LISTEN watcher), so it could wait forever.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from streaming_pipeline.devstack.embedded.ports import LOOPBACK, is_port_free
from streaming_pipeline.devstack.embedded.processes import (
    ManagedProcess,
    log_header,
    output_since_last_start,
    pid_alive,
    stop_pid,
    wait_gone,
)
from streaming_pipeline.devstack.errors import StackError

BINARIES_ROOT = Path("/usr/lib/postgresql")
DEBIAN_PACKAGE = "postgresql"
STANDARD_PORT = 5432
DATABASE = "dagster"
METASTORE_DATABASE = "metastore"  # the engine's catalog, when the stack has PostgreSQL (engine.catalog)
USER = "dagster"
SERVER_USER = "postgres"  # the system user Debian's package creates; used only when running as root
MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


@dataclass(frozen=True)
class PostgresBinaries:
    """One PostgreSQL major version's ``bin`` directory."""

    version: str
    bin_dir: Path

    @property
    def initdb(self) -> Path:
        return self.bin_dir / "initdb"

    @property
    def postgres(self) -> Path:
        return self.bin_dir / "postgres"


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split("."))


def find_binaries(version: str | None = None, root: Path = BINARIES_ROOT) -> PostgresBinaries:
    """The newest ``<root>/<major>/bin`` with both ``initdb`` and ``postgres`` (or exactly ``version``).

    Raises StackError naming the Debian package when there is none.
    """
    found: dict[str, PostgresBinaries] = {}
    if root.is_dir():
        for child in root.iterdir():
            if not re.fullmatch(r"\d+(\.\d+)?", child.name):
                continue
            binaries = PostgresBinaries(child.name, child / "bin")
            if all(os.access(p, os.X_OK) for p in (binaries.initdb, binaries.postgres)):
                found[child.name] = binaries
    if version is not None:
        if version in found:
            return found[version]
        raise StackError(
            f"the PostgreSQL data directory was made by PostgreSQL {version}, but {root}/{version}/bin has no "
            f"initdb and postgres (found: {', '.join(sorted(found, key=_version_key)) or 'none'}). Install "
            f"Debian's `postgresql-{version}` package, or delete the data directory to start afresh (the "
            "Dagster run history in it is lost)."
        )
    if not found:
        raise StackError(
            f"PostgreSQL for Dagster's storage needs the PostgreSQL server binaries, but {root}/*/bin has no "
            f"initdb and postgres. Install Debian's `{DEBIAN_PACKAGE}` package (`apt-get install {DEBIAN_PACKAGE}`), "
            "or start the stack without --dagster-postgres (Dagster then keeps its storage in SQLite)."
        )
    return found[max(found, key=_version_key)]


USERNS = "userns"  # root: a user namespace, in which the server's uid is not 0 but maps to root outside
SETPRIV = "setpriv"  # root, no user namespaces: the `postgres` system user
CURRENT = "current"  # not root: the current account


@dataclass(frozen=True)
class ServerUser:
    """The OS identity initdb and the server run with, and how (see the module docstring, "Root")."""

    name: str  # the account name the server sees (getpwuid of its uid)
    uid: int  # its uid: on disk for SETPRIV and CURRENT; inside the namespace for USERNS (root on disk)
    gid: int
    how: str  # USERNS, SETPRIV or CURRENT

    @property
    def file_owner(self) -> tuple[int, int] | None:
        """Who must own the data and socket directories on disk when that is not the caller."""
        return (self.uid, self.gid) if self.how == SETPRIV else None

    @property
    def groups(self) -> set[int]:
        if self.how == SETPRIV:
            return set(os.getgrouplist(self.name, self.gid))
        return set(os.getgroups()) | {os.getegid()}

    def command(self, command: list[str]) -> list[str]:
        if self.how == USERNS:
            unshare = _tool("unshare")
            return [unshare, "--user", f"--map-user={self.uid}", f"--map-group={self.gid}", "--", *command]
        if self.how == SETPRIV:
            setpriv = _tool("setpriv")
            return [setpriv, f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *command]
        return command


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise StackError(
            f"PostgreSQL refuses to run as root, and `{name}` (Debian's util-linux package), which starts it as "
            "another user, is not on PATH"
        )
    return path


@functools.lru_cache(maxsize=4)
def user_namespaces_work(uid: int, gid: int) -> bool:
    """True when this process may start a program in a new user namespace as ``uid``:``gid`` mapped to itself
    (a container's seccomp profile or a sysctl can forbid it)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        done = subprocess.run(
            [unshare, "--user", f"--map-user={uid}", f"--map-group={gid}", "--", "id", "-u"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip() == str(uid)


def server_user(data_dir: Path) -> ServerUser:
    """How to run initdb and the server for ``data_dir``: as the current account when it is not root; as root,
    in a user namespace when the kernel allows it, else as the ``postgres`` system user. A data directory that
    already belongs to another account (made by that fallback) is served by that account."""
    if os.geteuid() != 0:
        return ServerUser(pwd.getpwuid(os.geteuid()).pw_name, os.geteuid(), os.getegid(), CURRENT)
    owner = data_dir.stat().st_uid if data_dir.is_dir() else 0
    if owner != 0:
        try:
            entry = pwd.getpwuid(owner)
        except KeyError:
            raise StackError(
                f"the PostgreSQL data directory {data_dir} belongs to uid {owner}, which has no account here; "
                f"give it back to root (`chown -R root: {data_dir}`) or delete it to start afresh"
            ) from None
        return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid, SETPRIV)
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise StackError(
            f"PostgreSQL refuses to run as root, and there is no `{SERVER_USER}` system user to run it as. "
            f"Debian's `{DEBIAN_PACKAGE}` package creates it (`apt-get install {DEBIAN_PACKAGE}`); or run the stack "
            "as an ordinary user."
        ) from None
    how = USERNS if user_namespaces_work(entry.pw_uid, entry.pw_gid) else SETPRIV
    return ServerUser(SERVER_USER, entry.pw_uid, entry.pw_gid, how)


def grant_traverse(path: Path, user: ServerUser) -> list[Path]:
    """Make every directory from / down to ``path`` passable (search bit) for ``user``; returns those changed.

    The bit added is the one the kernel checks for that user: owner's, group's or others'.
    """
    changed: list[Path] = []
    groups = user.groups
    for directory in [*reversed(path.parents), path]:
        info = directory.stat()
        if info.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            os.chmod(directory, stat.S_IMODE(info.st_mode) | bit)
            changed.append(directory)
    return changed


def _child_env() -> dict[str, str]:
    # PG* variables of the caller's shell (PGDATA, PGPORT, PGPASSWORD...) must not reach initdb or the server.
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def server_children(pid: int) -> list[int]:
    """The processes the server (postmaster) ``pid`` forked: backends, checkpointer, writers... Each runs in
    a process group of its own (PostgreSQL calls setsid in every child), so signalling the server's group does
    not reach them."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[1]) == pid:
                children.append(int(entry.name))
    return children


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def stop_postgres(pid: int | None, timeout: float = 30.0) -> bool:
    """Fast shutdown: SIGINT to the server. When it has not exited within ``timeout`` s: SIGQUIT (immediate
    shutdown: the server stops its children itself), then, 5 s later, SIGKILL to it and its children.
    Returns True when the fast shutdown did not finish in time."""
    if not pid or not pid_alive(pid):
        return False
    _signal(pid, signal.SIGINT)
    if wait_gone(pid, timeout):
        return False
    _signal(pid, signal.SIGQUIT)
    if not wait_gone(pid, 5.0):
        children = server_children(pid)
        stop_pid(pid, timeout=0.0)  # SIGTERM then SIGKILL to the server's group
        for child in children:
            _signal(child, signal.SIGKILL)
    return True


class PostgresServer(ManagedProcess):
    """A PostgreSQL server with its data under ``directory``, listening on ``host:port`` (loopback)."""

    title = "PostgreSQL"
    exited_during_start = "exited with code {code} while starting"

    def __init__(
        self,
        directory: Path,
        port: int,
        host: str = LOOPBACK,
        *,
        log_dir: Path,
        binaries_root: Path = BINARIES_ROOT,
    ) -> None:
        super().__init__()
        self.directory = Path(directory).resolve()
        self.port = int(port)
        self.host = host
        self.log_dir = Path(log_dir).resolve()
        self.binaries_root = binaries_root
        self.version: str | None = None

    # ------------------------------------------------------------------ layout

    @property
    def log_file(self) -> Path:
        """initdb's and the server's output."""
        return self.log_dir / "postgres.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def socket_dir(self) -> Path:
        return self.directory / "socket"

    @property
    def passfile(self) -> Path:
        return self.directory / "pgpass"

    @property
    def marker(self) -> str:
        """A string in the server's command line (the data directory), to recognize its pid."""
        return str(self.data_dir)

    @property
    def url(self) -> str:
        """Where it answers, without a password: postgresql://dagster@127.0.0.1:PORT/dagster."""
        return server_url(self.host, self.port)

    def storage_config(self) -> dict[str, Any]:
        """dagster.yaml's ``storage: postgres: postgres_db:`` for this server (the password comes from the file)."""
        return storage_config(self.host, self.port, self.passfile)

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 60.0) -> Self:
        """initdb when the data directory is new, start the server, wait until it accepts connections and create
        the ``dagster`` database when missing. Raises StackError naming the log file."""
        user = server_user(self.data_dir)
        binaries = self._binaries()
        self.version = binaries.version
        self._prepare(user)
        if not (self.data_dir / "PG_VERSION").is_file():
            self._initdb(binaries, user)
        self._check_startable()
        self._start_process(
            user.command(self._command(binaries)),
            env=_child_env(),
            cwd=self.directory,
            label=f"PostgreSQL {binaries.version} on {self.host}:{self.port} (data {self.data_dir})",
            timeout=timeout,
        )
        return self

    def _check_startable(self) -> None:
        if not self.passfile.is_file():
            raise StackError(
                f"the PostgreSQL data directory {self.data_dir} exists but its password file {self.passfile} is "
                f"missing, so no client can log in. Delete {self.data_dir} to start afresh (the Dagster run "
                "history in it is lost)."
            )
        if not is_port_free(self.port, self.host):
            raise StackError(f"cannot start PostgreSQL: port {self.port} on {self.host} is in use; log {self.log_file}")

    def _command(self, binaries: PostgresBinaries) -> list[str]:
        socket_dirs = str(self.socket_dir)
        if len(f"{socket_dirs}/.s.PGSQL.{self.port}") > MAX_SOCKET_PATH:
            socket_dirs = ""  # too long for a unix socket address: TCP only
        return [
            str(binaries.postgres),
            "-D", str(self.data_dir),
            "-p", str(self.port),
            "-c", f"listen_addresses={self.host}",
            "-c", f"unix_socket_directories={socket_dirs}",
            "-c", "logging_collector=off",
        ]  # fmt: skip

    def _terminate(self, pid: int, timeout: float) -> bool:
        """Fast shutdown (SIGINT); killed after ``timeout`` s (see :func:`stop_postgres`)."""
        return stop_postgres(pid, timeout=timeout)

    def connect(self, dbname: str = DATABASE, **options: Any) -> Any:
        """A psycopg2 connection as ``dagster`` (password from the password file)."""
        return connect(self.host, self.port, self.passfile, dbname=dbname, **options)

    # ------------------------------------------------------------------ steps

    def _binaries(self) -> PostgresBinaries:
        version_file = self.data_dir / "PG_VERSION"
        if version_file.is_file():
            return find_binaries(version_file.read_text().strip(), root=self.binaries_root)
        return find_binaries(root=self.binaries_root)

    def _prepare(self, user: ServerUser) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        for directory in (self.data_dir, self.socket_dir):
            directory.mkdir(mode=0o700, exist_ok=True)
            if user.file_owner is not None:
                info = directory.stat()
                if (info.st_uid, info.st_gid) != user.file_owner:
                    os.chown(directory, *user.file_owner)
            os.chmod(directory, 0o700)
        if user.how == SETPRIV:
            for changed in grant_traverse(self.directory, user):
                _note(self.log_file, f"made {changed} passable (search bit) for the `{user.name}` user")

    def _initdb(self, binaries: PostgresBinaries, user: ServerUser) -> None:
        if any(self.data_dir.iterdir()):
            raise StackError(
                f"{self.data_dir} is not empty but has no PG_VERSION: it is not a PostgreSQL data directory. "
                "Move it away and run `stack up` again."
            )
        password = secrets.token_urlsafe(32)
        _write_private(self.passfile, f"{self.host}:*:*:{USER}:{password}\n")
        pwfile = self.directory / ".initdb-pwfile"
        try:
            _write_private(pwfile, password + "\n")
            if user.file_owner is not None:
                os.chown(pwfile, *user.file_owner)
            command = [
                str(binaries.initdb),
                "-D", str(self.data_dir),
                "-U", USER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
            ]  # fmt: skip
            if _version_key(binaries.version)[0] >= 14:
                command.append("--no-instructions")  # its advice (pg_ctl ... start) is not how this server starts
            with open(self.log_file, "ab") as log:
                log.write(log_header(f"initdb (PostgreSQL {binaries.version})").encode())
                log.flush()
                done = subprocess.run(
                    user.command(command),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=_child_env(),
                    cwd=self.directory,
                    timeout=300,
                    check=False,
                )
        finally:
            pwfile.unlink(missing_ok=True)
        if done.returncode != 0:
            self.passfile.unlink(missing_ok=True)
            raise StackError(
                f"initdb of the PostgreSQL data directory {self.data_dir} failed (exit code {done.returncode}); "
                f"log {self.log_file}:\n{output_since_last_start(self.log_file)}"
            )

    def _readiness_probe(self) -> Callable[[], bool]:
        return self._accepts_connections

    def _accepts_connections(self) -> bool:
        """True once a client logs in with the password file; StackError when the server refuses that password."""
        import psycopg2

        try:
            self.connect(dbname="postgres", connect_timeout=2).close()
            return True
        except psycopg2.OperationalError as exc:
            if "authentication failed" in str(exc):
                raise StackError(
                    f"PostgreSQL on {self.host}:{self.port} refused the password in {self.passfile}: "
                    f"{str(exc).strip()}; log {self.log_file}"
                ) from exc
            return False

    def _not_ready_in_time(self, timeout: float) -> str:
        return f"did not accept connections on {self.host}:{self.port} within {timeout:.0f} s"

    def failure(self, what: str) -> StackError:
        return StackError(f"PostgreSQL {what}; log {self.log_file}:\n{output_since_last_start(self.log_file)}")

    def _after_ready(self) -> None:
        self._create_database()

    def _described(self) -> tuple[object, ...]:
        return (self.url, self.directory)

    def _create_database(self) -> None:
        connection = self.connect(dbname="postgres")
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{DATABASE}" OWNER "{USER}"')
        finally:
            connection.close()


def server_url(host: str, port: int) -> str:
    return f"postgresql://{USER}@{host}:{port}/{DATABASE}"


def storage_config(host: str, port: int, passfile: Path) -> dict[str, Any]:
    """``postgres_db`` settings of dagster-postgres: no password, libpq reads it from ``passfile``. The scheme
    names the driver: SQLAlchemy 2.1 reads a bare ``postgresql://`` as psycopg 3, and dagster-postgres brings
    psycopg2."""
    return {
        "username": USER,
        "hostname": host,
        "port": int(port),
        "db_name": DATABASE,
        "params": {"passfile": str(passfile)},
        "scheme": "postgresql+psycopg2",
    }


def connect(host: str, port: int, passfile: Path, dbname: str = DATABASE, **options: Any) -> Any:
    """A psycopg2 connection to the embedded server as ``dagster``."""
    import psycopg2

    return psycopg2.connect(host=host, port=port, user=USER, dbname=dbname, passfile=str(passfile), **options)


def password(passfile: Path) -> str:
    """The ``dagster`` user's password, from the password file the server was made with (for a client that cannot
    read a libpq password file: the JDBC driver of the engine's metastore)."""
    return passfile.read_text().strip().split(":", 4)[4]


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (created 0600, never wider at any moment)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def _note(log_file: Path, message: str) -> None:
    with open(log_file, "a") as log:
        log.write(log_header(message))
