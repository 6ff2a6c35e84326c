"""The embedded stack: a Kafka broker and the schema registry as background processes under one directory.

    stack = EmbeddedStack(Path(".stack"))
    info = stack.up()          # starts what is not running; returns the addresses
    stack.status()             # per component: running, pid, address, log file
    stack.env_lines()          # ["export KAFKA_BOOTSTRAP_SERVERS=...", "export SCHEMA_REGISTRY_URL=..."]
    stack.down()               # stops both, keeps the data

Layout of the directory: ``kafka/`` (broker config and data), ``registry/``
(registry data), ``logs/`` (``kafka.log``, ``kafka.out``, ``registry.log``) and
``stack.json`` (pids and ports). Ports recorded in stack.json are reused by the
next ``up`` so that clients configured earlier keep working.

Tests use :func:`running_stack`, which starts on free ports and always stops.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streaming_pipeline.embedded import jars
from streaming_pipeline.embedded.kafka_broker import DEFAULT_HEAP, EmbeddedKafkaBroker
from streaming_pipeline.embedded.ports import LOOPBACK, free_port, is_port_free
from streaming_pipeline.embedded.processes import find_java, pid_matches, stop_pid
from streaming_pipeline.embedded.registry_process import REGISTRY_MODULE, SchemaRegistryProcess
from streaming_pipeline.errors import StackError

STACK_DIR_ENV = "STREAMING_PIPELINE_STACK_DIR"
STATE_FILE = "stack.json"
STANDARD_KAFKA_PORT = 9092
STANDARD_CONTROLLER_PORT = 9093
STANDARD_REGISTRY_PORT = 8081

Progress = Callable[[str], None]


def default_stack_dir() -> Path:
    """$STREAMING_PIPELINE_STACK_DIR, else ``.stack/`` in the current working directory."""
    override = os.environ.get(STACK_DIR_ENV)
    return Path(override).expanduser() if override else Path.cwd() / ".stack"


@dataclass(frozen=True)
class StackInfo:
    """Where a running stack answers."""

    directory: Path
    bootstrap_servers: str
    schema_registry_url: str
    kafka_pid: int | None = None
    registry_pid: int | None = None
    kafka_log_file: Path | None = None
    registry_log_file: Path | None = None
    already_running: bool = False

    def env(self) -> dict[str, str]:
        return {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers, "SCHEMA_REGISTRY_URL": self.schema_registry_url}


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    running: bool
    pid: int | None
    address: str | None
    log_file: Path


@dataclass(frozen=True)
class StackStatus:
    directory: Path
    kafka: ComponentStatus
    registry: ComponentStatus

    @property
    def components(self) -> tuple[ComponentStatus, ComponentStatus]:
        return (self.kafka, self.registry)

    @property
    def running(self) -> bool:
        """True when every component runs."""
        return all(c.running for c in self.components)


def _quiet(_message: str) -> None:
    pass


class EmbeddedStack:
    """Start, inspect and stop the embedded Kafka broker + schema registry kept under ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        prefer_standard_ports: bool = True,
        host: str = LOOPBACK,
        registry_module: str = REGISTRY_MODULE,
        kafka_heap: str = DEFAULT_HEAP,
    ) -> None:
        self.directory = Path(directory).expanduser().resolve()
        self.prefer_standard_ports = prefer_standard_ports
        self.host = host
        self.registry_module = registry_module
        self.kafka_heap = kafka_heap

    # ------------------------------------------------------------------ layout

    @property
    def kafka_dir(self) -> Path:
        return self.directory / "kafka"

    @property
    def registry_dir(self) -> Path:
        return self.directory / "registry"

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def state_file(self) -> Path:
        return self.directory / STATE_FILE

    @property
    def kafka_log_file(self) -> Path:
        return self.logs_dir / "kafka.log"

    @property
    def registry_log_file(self) -> Path:
        return self.logs_dir / "registry.log"

    # Strings that appear in each component's command line (guards against a reused pid).
    def _kafka_marker(self) -> str:
        return str(self.kafka_dir / "server.properties")

    def _registry_marker(self) -> str:
        return str(self.registry_dir)

    # ------------------------------------------------------------------ state

    def _load(self) -> dict[str, Any]:
        try:
            state = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # unreadable: treated as a stack that never ran
        return state if isinstance(state, dict) else {}

    def _save(self, state: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        state["version"] = 1
        state["directory"] = str(self.directory)
        state["host"] = self.host
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.state_file)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".stack.lock", "w") as handle:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - Windows
                yield
                return
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _kafka_running(self, state: dict[str, Any]) -> bool:
        return pid_matches(state.get("kafka", {}).get("pid"), self._kafka_marker())

    def _registry_running(self, state: dict[str, Any]) -> bool:
        return pid_matches(state.get("registry", {}).get("pid"), self._registry_marker())

    def _host(self, state: dict[str, Any]) -> str:
        return str(state.get("host") or self.host)

    def _bootstrap(self, state: dict[str, Any]) -> str | None:
        port = state.get("kafka", {}).get("port")
        return f"{self._host(state)}:{port}" if port else None

    def _registry_url(self, state: dict[str, Any]) -> str | None:
        port = state.get("registry", {}).get("port")
        return f"http://{self._host(state)}:{port}" if port else None

    def _info(self, state: dict[str, Any], *, already_running: bool) -> StackInfo:
        return StackInfo(
            directory=self.directory,
            bootstrap_servers=self._bootstrap(state) or "",
            schema_registry_url=self._registry_url(state) or "",
            kafka_pid=state.get("kafka", {}).get("pid"),
            registry_pid=state.get("registry", {}).get("pid"),
            kafka_log_file=self.kafka_log_file,
            registry_log_file=self.registry_log_file,
            already_running=already_running,
        )

    # ------------------------------------------------------------------ ports

    def _client_port(
        self,
        component: str,
        recorded: int | None,
        standard: int,
        taken: list[int],
        log_file: Path,
        say: Progress,
    ) -> int:
        if recorded:
            if is_port_free(recorded, self.host) and recorded not in taken:
                return int(recorded)
            raise StackError(
                f"cannot start the {component}: port {recorded} on {self.host} is in use by another process. "
                f"The port is recorded in {self.state_file} so that clients configured earlier keep working. "
                f"Stop whatever holds port {recorded}, or delete {self.state_file} to let `stack up` pick "
                f"new ports (data is kept). Log of the {component}: {log_file}"
            )
        if self.prefer_standard_ports:
            if standard not in taken and is_port_free(standard, self.host):
                return standard
            port = free_port(self.host, exclude=taken + [standard])
            say(f"Port {standard} (standard for the {component}) is in use; using port {port} instead")
            return port
        return free_port(self.host, exclude=taken)

    def _controller_port(self, recorded: int | None, taken: list[int]) -> int:
        # Internal only (no client uses it): take another one silently when the recorded one is busy.
        if recorded and recorded not in taken and is_port_free(recorded, self.host):
            return int(recorded)
        if self.prefer_standard_ports and STANDARD_CONTROLLER_PORT not in taken:
            if is_port_free(STANDARD_CONTROLLER_PORT, self.host):
                return STANDARD_CONTROLLER_PORT
        return free_port(self.host, exclude=taken + [STANDARD_CONTROLLER_PORT])

    # ------------------------------------------------------------------ commands

    def up(self, timeout: float = 120.0, progress: Progress | None = None) -> StackInfo:
        """Start the broker and the registry (whichever is not running) and return their addresses.

        Already running: returns the running info (``already_running=True``) without
        starting anything. Raises JavaNotFoundError, ArtifactResolutionError or
        StackError (naming the log file) when a component cannot start; components
        this call started are stopped again in that case.
        """
        say = progress or _quiet
        deadline = time.monotonic() + timeout
        with self._locked():
            state = self._load()
            kafka_up = self._kafka_running(state)
            registry_up = self._registry_running(state)
            if kafka_up and registry_up:
                return self._info(state, already_running=True)
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            started: list[tuple[str, EmbeddedKafkaBroker | SchemaRegistryProcess]] = []
            try:
                taken: list[int] = []
                if kafka_up:
                    taken += [state["kafka"].get("port") or 0, state["kafka"].get("controller_port") or 0]
                if registry_up:
                    taken.append(state["registry"].get("port") or 0)
                if not kafka_up:
                    find_java()
                    recorded = state.get("kafka", {})
                    kafka_port = self._client_port(
                        "Kafka broker", recorded.get("port"), STANDARD_KAFKA_PORT, taken, self.kafka_log_file, say
                    )
                    taken.append(kafka_port)
                    controller_port = self._controller_port(recorded.get("controller_port"), taken)
                    taken.append(controller_port)
                registry_port = None
                if not registry_up:
                    registry_port = self._client_port(
                        "schema registry",
                        state.get("registry", {}).get("port"),
                        STANDARD_REGISTRY_PORT,
                        taken,
                        self.registry_log_file,
                        say,
                    )
                    taken.append(registry_port)

                if not kafka_up:
                    broker = EmbeddedKafkaBroker(
                        self.kafka_dir,
                        kafka_port,
                        controller_port,
                        self.host,
                        log_dir=self.logs_dir,
                        heap=self.kafka_heap,
                        progress=say,
                    )
                    say(
                        f"Starting Kafka {jars.KAFKA_VERSION} broker on {broker.bootstrap_servers} "
                        f"(log: {broker.log_file})"
                    )
                    t0 = time.monotonic()
                    broker.start(timeout=max(10.0, deadline - time.monotonic()))
                    started.append(("kafka", broker))
                    state["kafka"] = {
                        "pid": broker.pid,
                        "port": broker.port,
                        "controller_port": broker.controller_port,
                        "log_file": str(broker.log_file),
                        "output_file": str(broker.output_file),
                        "kafka_version": jars.KAFKA_VERSION,
                        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    }
                    self._save(state)
                    elapsed = time.monotonic() - t0
                    say(f"Kafka broker ready on {broker.bootstrap_servers} (pid {broker.pid}, {elapsed:.1f}s)")
                if not registry_up:
                    registry = SchemaRegistryProcess(
                        self.registry_dir, registry_port, self.host, log_dir=self.logs_dir, module=self.registry_module
                    )
                    say(f"Starting schema registry on {registry.url} (log: {registry.log_file})")
                    t0 = time.monotonic()
                    registry.start(timeout=max(15.0, deadline - time.monotonic()))
                    started.append(("registry", registry))
                    state["registry"] = {
                        "pid": registry.pid,
                        "port": registry.port,
                        "log_file": str(registry.log_file),
                        "module": registry.module,
                        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    }
                    self._save(state)
                    say(f"Schema registry ready on {registry.url} (pid {registry.pid}, {time.monotonic() - t0:.1f}s)")
            except BaseException:
                for name, component in reversed(started):
                    component.stop(timeout=15)
                    state.get(name, {})["pid"] = None
                if started:
                    self._save(state)
                raise
            return self._info(state, already_running=False)

    def status(self) -> StackStatus:
        """Each component: running or not, pid, address, log file (a stale stack.json reads as stopped)."""
        state = self._load()
        kafka_up = self._kafka_running(state)
        registry_up = self._registry_running(state)
        return StackStatus(
            directory=self.directory,
            kafka=ComponentStatus(
                name="kafka",
                running=kafka_up,
                pid=state.get("kafka", {}).get("pid") if kafka_up else None,
                address=self._bootstrap(state),
                log_file=self.kafka_log_file,
            ),
            registry=ComponentStatus(
                name="registry",
                running=registry_up,
                pid=state.get("registry", {}).get("pid") if registry_up else None,
                address=self._registry_url(state),
                log_file=self.registry_log_file,
            ),
        )

    def info(self) -> StackInfo:
        """The addresses of the running stack; StackError when it is not (fully) running."""
        state = self._load()
        if not (self._kafka_running(state) and self._registry_running(state)):
            dir_arg = "" if self.directory == default_stack_dir().resolve() else f" --dir {self.directory}"
            raise StackError(
                f"the embedded stack in {self.directory} is not running; "
                f"start it with `streaming-pipeline stack up{dir_arg}`"
            )
        return self._info(state, already_running=True)

    def env_lines(self) -> list[str]:
        """``export`` lines for the running stack's addresses (StackError when it is not running)."""
        info = self.info()
        return [f"export {key}={value}" for key, value in info.env().items()]

    def down(self, timeout: float = 30.0, progress: Progress | None = None) -> bool:
        """Stop the registry and the broker (SIGTERM, SIGKILL after ``timeout``); data and ports are kept.

        Returns True when something was running.
        """
        say = progress or _quiet
        with self._locked():
            state = self._load()
            if not state:
                return False
            stopped = False
            for name, label, marker in (
                ("registry", "schema registry", self._registry_marker()),
                ("kafka", "Kafka broker", self._kafka_marker()),
            ):
                component = state.get(name)
                if not component:
                    continue
                pid = component.get("pid")
                if pid and pid_matches(pid, marker):
                    say(f"Stopping {label} (pid {pid})")
                    if stop_pid(pid, timeout=timeout):
                        say(f"{label} did not stop within {timeout:.0f}s and was killed")
                    stopped = True
                component["pid"] = None
            self._save(state)
            return stopped


@contextlib.contextmanager
def running_stack(directory: Path, *, timeout: float = 120.0, **stack_options: Any) -> Iterator[StackInfo]:
    """Start an embedded stack under ``directory`` on free ports; always stop it afterwards."""
    stack_options.setdefault("prefer_standard_ports", False)
    stack = EmbeddedStack(directory, **stack_options)
    atexit.register(stack.down)
    try:
        yield stack.up(timeout=timeout)
    finally:
        try:
            stack.down()
        finally:
            atexit.unregister(stack.down)
