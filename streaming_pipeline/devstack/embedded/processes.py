"""Process helpers: start a detached background process, check and stop it by pid; and
:class:`ManagedProcess`, what every server of the embedded stack shares (start, wait until ready, stop)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from streaming_pipeline.devstack.embedded.ports import is_port_free
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline.lakehouse.process_state import process_alive

# Processes this Python process started, so that stopping one also reaps it (no zombie).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}

START_MARKER = "=== "


# --------------------------------------------------------------------------- processes


def start_background(
    command: Sequence[str],
    output_file: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    label: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` detached (own session), stdout+stderr appended to ``output_file``.

    A header line ``=== <time> starting <label>`` is written first, so that
    :func:`output_since_last_start` can show what the latest run printed.
    """
    output_file.parent.mkdir(parents=True, exist_ok=True)
    with open(output_file, "ab") as out:
        out.write(log_header(f"starting {label or ' '.join(command)}").encode())
        out.flush()
        try:
            proc = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise StackError(f"could not run {command[0]}: {exc}") from exc
    _CHILDREN[proc.pid] = proc
    return proc


def pid_alive(pid: int | None) -> bool:
    """True when ``pid`` is a live (not zombie) process."""
    if not pid or pid <= 0:
        return False
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        _CHILDREN.pop(pid, None)
        return False
    return process_alive(pid)


def process_command_line(pid: int) -> str | None:
    """The command line of ``pid`` (arguments joined by spaces), None if it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return raw.replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        pass
    try:
        done = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return done.stdout.strip() or None


def pid_matches(pid: int | None, marker: str) -> bool:
    """True when ``pid`` is alive and its command line contains ``marker`` (guards against pid reuse)."""
    if not pid_alive(pid):
        return False
    assert pid is not None
    cmdline = process_command_line(pid)
    return cmdline is None or marker in cmdline


def _signal(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:  # started with start_new_session: signal the whole group
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` s for ``pid`` to exit (reaped when this process started it); False if it did not."""
    child = _CHILDREN.get(pid)
    if child is not None:
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        _CHILDREN.pop(pid, None)
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) pids of process group ``pgid``, from /proc; [] where there is no /proc."""
    members = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid and pid_alive(int(entry.name)):
                members.append(int(entry.name))
        except (ProcessLookupError, PermissionError):
            continue
    return members


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except (ProcessLookupError, PermissionError):
        return False


def _wait_group_gone(pgid: int, timeout: float) -> None:
    """Wait until no process of group ``pgid`` is left (a launcher still exiting, executors); SIGKILL stragglers."""
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while group_members(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            return
        time.sleep(0.1)


def stop_pid(pid: int | None, timeout: float = 30.0) -> bool:
    """SIGTERM ``pid`` (its process group if it leads one), SIGKILL after ``timeout`` s. For a group, also waits
    until every process of the group is gone, not only its leader.

    Returns True when it had to be killed.
    """
    if not pid or not pid_alive(pid):
        if pid:
            _reap(pid)
        return False
    leads_group = _leads_group(pid)
    _signal(pid, signal.SIGTERM)
    killed = not wait_gone(pid, timeout)
    if killed:
        _signal(pid, signal.SIGKILL)
        wait_gone(pid, 10.0)
    if leads_group:
        _wait_group_gone(pid, 10.0)
    return killed


def stop_announced(
    pid: int, label: str, timeout: float, say: Callable[[str], None], stop: Callable[[int, float], bool] = stop_pid
) -> None:
    """``stop(pid, timeout)`` (default :func:`stop_pid`), telling ``say`` what it does and when it had to kill."""
    say(f"Stopping {label} (pid {pid})")
    if stop(pid, timeout):
        say(f"{label} did not stop within {timeout:.0f}s and was killed")


def _reap(pid: int) -> None:
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        child.poll()


def log_header(text: str) -> str:
    """``=== <time> <text>``: the line written to a log before each start (see :func:`output_since_last_start`)."""
    return f"{START_MARKER}{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n"


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def output_since_last_start(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines a background process wrote to ``path`` since its latest start header."""
    text = tail(path, 400)
    kept = text.splitlines()
    for index in range(len(kept) - 1, -1, -1):
        if kept[index].startswith(START_MARKER):
            kept = kept[index + 1 :]
            break
    return "\n".join(kept[-lines:])


def python_env_with_project() -> dict[str, str]:
    """os.environ with this package's parent folder first on PYTHONPATH (works without an install)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])  # the folder holding streaming_pipeline/
    current = env.get("PYTHONPATH")
    env["PYTHONPATH"] = root + (os.pathsep + current if current else "")
    return env


# --------------------------------------------------------------------------- a server in the background


class ManagedProcess:
    """One server process of the embedded stack (the Kafka broker, the schema registry, the Spark Connect server,
    a Spark master or worker, PostgreSQL), started in the background by this object.

    A subclass gives its ``title`` (how errors name it), ``log_file`` (and ``output_file`` when the process
    output goes elsewhere), a ``start()`` that prepares what the server needs and then calls
    :meth:`_start_process` with its command line, a readiness probe and the timeout message. The base starts the
    process with its output in ``output_file``, waits until the probe says it answers while checking that it has
    not exited, stops it again when that fails (or is interrupted) and raises a StackError naming the log and
    showing its last lines. :meth:`stop` and the context manager work on the process this object started only.
    """

    title: str = "the process"
    host: str
    poll_seconds: float = 0.2  # between two readiness probes
    cleanup_seconds: float = 10.0  # how long the stop after a failed start waits before killing
    exited_during_start: str = "exited during start-up with code {code}"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ what a subclass gives

    @property
    def log_file(self) -> Path:
        raise NotImplementedError

    @property
    def output_file(self) -> Path:
        """Where the process's stdout and stderr go: its log file unless the subclass says otherwise."""
        return self.log_file

    def start(self, timeout: float = 60.0) -> Self:
        """Start the server and wait until it answers (StackError naming the log when it does not)."""
        raise NotImplementedError

    def _readiness_probe(self) -> Callable[[], bool]:
        """A check that is True once the server answers (called every ``poll_seconds`` until then)."""
        raise NotImplementedError

    def _not_ready_in_time(self, timeout: float) -> str:
        """What the error says when the server has not answered ``timeout`` s after it started."""
        raise NotImplementedError

    def _after_ready(self) -> None:
        """A last start-up step once the server answers (a failure there stops it too)."""

    # ------------------------------------------------------------------ state

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and pid_alive(self._proc.pid)

    @property
    def exited(self) -> bool:
        """True when the process this object started has exited (read from the process, not from its pid)."""
        return self.returncode is not None

    @property
    def returncode(self) -> int | None:
        """The exit code of the process this object started (negative: the signal that ended it); None while it
        runs or before it started."""
        return self._proc.poll() if self._proc is not None else None

    # ------------------------------------------------------------------ start

    def _check_port_free(self, port: int, listener: str = "") -> None:
        if not is_port_free(port, self.host):
            raise StackError(
                f"cannot start {self.title}: port {port} on {self.host}{listener} is already in use by another "
                "process; stop that process or choose another port"
            )

    def _start_process(
        self, command: Sequence[str], *, cwd: Path, label: str, timeout: float, env: Mapping[str, str] | None = None
    ) -> None:
        """Start ``command`` and wait up to ``timeout`` s until it answers; stop it again when it does not."""
        self._launch(command, cwd=cwd, label=label, env=env)
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        """Wait up to ``timeout`` s until the launched process answers (StackError naming its log when it does not);
        stop it again then."""
        try:
            self._wait_ready(time.monotonic() + timeout, timeout)
            self._after_ready()
        except BaseException:
            self.stop(timeout=self.cleanup_seconds)
            raise

    def _launch(self, command: Sequence[str], *, cwd: Path, label: str, env: Mapping[str, str] | None = None) -> None:
        self._proc = start_background(command, self.output_file, env=env, cwd=cwd, label=label)

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        """Probe until the server answers; StackError when the process exits first or ``deadline`` passes."""
        assert self._proc is not None
        ready = self._readiness_probe()
        while True:
            code = self._proc.poll()
            if code is not None:
                raise self.failure(self.exited_during_start.format(code=code))
            if ready():
                return
            if time.monotonic() > deadline:
                raise self.failure(self._not_ready_in_time(timeout))
            time.sleep(self.poll_seconds)

    def failure(self, what: str) -> StackError:
        """The error saying the server ``what`` (e.g. "exited during start-up with code 1"): names its log and
        shows the last lines the process wrote."""
        output = self._last_lines()
        return StackError(
            f"{self.title} {what}. See its log {self._logs()}." + (f"\nLast lines:\n{output}" if output.strip() else "")
        )

    def _logs(self) -> str:
        """The log file(s) an error names."""
        return str(self.log_file)

    def _last_lines(self) -> str:
        return output_since_last_start(self.output_file, 15)

    # ------------------------------------------------------------------ stop

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the process this object started (see :meth:`_terminate`); its data is kept. True when it had to
        be killed."""
        if self._proc is None:
            return False
        killed = self._terminate(self._proc.pid, timeout)
        self._proc.poll()
        return killed

    def _terminate(self, pid: int, timeout: float) -> bool:
        """SIGTERM to the process's group (it leads one), SIGKILL after ``timeout`` s; True when killed."""
        return stop_pid(pid, timeout=timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _described(self) -> tuple[object, ...]:
        """What repr() shows before the state (where the server answers, its folder)."""
        return (self.title,)

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"{type(self).__name__}({', '.join(str(part) for part in self._described())}, {state})"
