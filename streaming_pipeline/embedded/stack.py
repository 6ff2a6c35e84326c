"""The embedded stack: a Kafka broker, the schema registry and the Spark Connect server (the warm engine) as
background processes under one directory, plus the Dagster instance directory they go with.

    stack = EmbeddedStack(Path(".stack"))
    info = stack.up()          # starts what is not running; returns the addresses
    stack.status()             # per component: running, pid, address, log file
    stack.env_lines()          # export lines: KAFKA_BOOTSTRAP_SERVERS, SCHEMA_REGISTRY_URL, SPARK_REMOTE, DAGSTER_HOME
    stack.down()               # stops them all, keeps the data

Layout of the directory: ``kafka/`` (broker config and data), ``registry/`` (registry data), ``spark/`` (the
Connect server's scratch space), ``dagster/`` (DAGSTER_HOME with its dagster.yaml), ``logs/`` and
``stack.json`` (pids and ports). Ports recorded in stack.json are reused by the next ``up`` so that clients
configured earlier keep working.

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
from streaming_pipeline.embedded.dagster_home import write_dagster_yaml
from streaming_pipeline.embedded.processes import find_java, pid_matches, stop_pid
from streaming_pipeline.embedded.registry_process import REGISTRY_MODULE, SchemaRegistryProcess
from streaming_pipeline.embedded.spark_connect import STANDARD_PORT as STANDARD_SPARK_CONNECT_PORT
from streaming_pipeline.embedded.spark_connect import SparkConnectServer
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
    spark_remote: str | None = None
    dagster_home: Path | None = None
    kafka_pid: int | None = None
    registry_pid: int | None = None
    spark_pid: int | None = None
    kafka_log_file: Path | None = None
    registry_log_file: Path | None = None
    spark_log_file: Path | None = None
    already_running: bool = False

    def env(self) -> dict[str, str]:
        env = {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers, "SCHEMA_REGISTRY_URL": self.schema_registry_url}
        if self.spark_remote:
            env["SPARK_REMOTE"] = self.spark_remote
        if self.dagster_home:
            env["DAGSTER_HOME"] = str(self.dagster_home)
        return env


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    running: bool
    pid: int | None
    address: str | None
    log_file: Path
    enabled: bool = True


@dataclass(frozen=True)
class StackStatus:
    directory: Path
    kafka: ComponentStatus
    registry: ComponentStatus
    spark: ComponentStatus

    @property
    def components(self) -> tuple[ComponentStatus, ...]:
        return (self.kafka, self.registry, self.spark)

    @property
    def running(self) -> bool:
        """True when every enabled component runs."""
        return all(c.running for c in self.components if c.enabled)

    def as_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "running": self.running,
            "components": {
                c.name: {"running": c.running, "enabled": c.enabled, "pid": c.pid, "address": c.address,
                         "log_file": str(c.log_file)}
                for c in self.components
            },
            "spark_remote": self.spark.address if self.spark.running else None,
            "spark_master_url": None,
            "spark_workers": 0,
        }


def _quiet(_message: str) -> None:
    pass


class EmbeddedStack:
    """Start, inspect and stop the embedded Kafka broker, schema registry and Spark Connect server under
    ``directory``. ``spark=False`` leaves the engine out (tests of Kafka alone)."""

    def __init__(
        self,
        directory: Path,
        *,
        prefer_standard_ports: bool = True,
        host: str = LOOPBACK,
        registry_module: str = REGISTRY_MODULE,
        kafka_heap: str = DEFAULT_HEAP,
        spark: bool = True,
    ) -> None:
        self.directory = Path(directory).expanduser().resolve()
        self.prefer_standard_ports = prefer_standard_ports
        self.host = host
        self.registry_module = registry_module
        self.kafka_heap = kafka_heap
        self.spark = spark

    # ------------------------------------------------------------------ layout

    @property
    def kafka_dir(self) -> Path:
        return self.directory / "kafka"

    @property
    def registry_dir(self) -> Path:
        return self.directory / "registry"

    @property
    def spark_dir(self) -> Path:
        return self.directory / "spark"

    @property
    def dagster_home(self) -> Path:
        return self.directory / "dagster"

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

    @property
    def spark_log_file(self) -> Path:
        return self.logs_dir / "spark-connect.log"

    # Strings that appear in each component's command line (guards against a reused pid).
    def _markers(self) -> dict[str, str]:
        return {
            "kafka": str(self.kafka_dir / "server.properties"),
            "registry": str(self.registry_dir),
            "spark": str(self.spark_dir / "log4j2.properties"),
        }

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
        import fcntl

        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".stack.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _running(self, state: dict[str, Any], name: str) -> bool:
        return pid_matches(state.get(name, {}).get("pid"), self._markers()[name])

    def _spark_enabled(self, state: dict[str, Any]) -> bool:
        return bool(state.get("spark", {}).get("enabled", self.spark))

    def _host(self, state: dict[str, Any]) -> str:
        return str(state.get("host") or self.host)

    def _bootstrap(self, state: dict[str, Any]) -> str | None:
        port = state.get("kafka", {}).get("port")
        return f"{self._host(state)}:{port}" if port else None

    def _registry_url(self, state: dict[str, Any]) -> str | None:
        port = state.get("registry", {}).get("port")
        return f"http://{self._host(state)}:{port}" if port else None

    def _spark_remote(self, state: dict[str, Any]) -> str | None:
        port = state.get("spark", {}).get("port")
        return f"sc://{self._host(state)}:{port}" if port else None

    def _info(self, state: dict[str, Any], *, already_running: bool) -> StackInfo:
        spark_up = self._spark_enabled(state) and self._running(state, "spark")
        return StackInfo(
            directory=self.directory,
            bootstrap_servers=self._bootstrap(state) or "",
            schema_registry_url=self._registry_url(state) or "",
            spark_remote=self._spark_remote(state) if spark_up else None,
            dagster_home=self.dagster_home if (self.dagster_home / "dagster.yaml").is_file() else None,
            kafka_pid=state.get("kafka", {}).get("pid"),
            registry_pid=state.get("registry", {}).get("pid"),
            spark_pid=state.get("spark", {}).get("pid") if spark_up else None,
            kafka_log_file=self.kafka_log_file,
            registry_log_file=self.registry_log_file,
            spark_log_file=self.spark_log_file if spark_up else None,
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

    def up(self, timeout: float = 180.0, progress: Progress | None = None) -> StackInfo:
        """Start whichever component is not running and return the addresses.

        Already running: returns the running info (``already_running=True``) without starting anything.
        Raises JavaNotFoundError, ArtifactResolutionError or StackError (naming the log file) when a
        component cannot start; components this call started are stopped again in that case.
        """
        say = progress or _quiet
        deadline = time.monotonic() + timeout
        with self._locked():
            state = self._load()
            state.setdefault("spark", {})["enabled"] = self.spark or bool(state.get("spark", {}).get("enabled"))
            wanted = ["kafka", "registry"] + (["spark"] if self._spark_enabled(state) else [])
            missing = [name for name in wanted if not self._running(state, name)]
            if not missing:
                return self._info(state, already_running=True)
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            write_dagster_yaml(self.dagster_home)
            taken = [
                port
                for name in wanted
                if name not in missing
                for port in (state[name].get("port"), state[name].get("controller_port"))
                if port
            ]
            starters = {"kafka": self._start_kafka, "registry": self._start_registry, "spark": self._start_spark}
            started: list[EmbeddedKafkaBroker | SchemaRegistryProcess | SparkConnectServer] = []
            try:
                for name in missing:
                    component = starters[name](state, taken, deadline, say)
                    started.append(component)
                    self._save(state)
            except BaseException:
                for component in reversed(started):
                    component.stop(timeout=15)
                for name in missing:
                    state.get(name, {})["pid"] = None
                self._save(state)
                raise
            return self._info(state, already_running=False)

    def _start_kafka(
        self, state: dict[str, Any], taken: list[int], deadline: float, say: Progress
    ) -> EmbeddedKafkaBroker:
        find_java()
        recorded = state.get("kafka", {})
        port = self._client_port(
            "Kafka broker", recorded.get("port"), STANDARD_KAFKA_PORT, taken, self.kafka_log_file, say
        )
        taken.append(port)
        controller_port = self._controller_port(recorded.get("controller_port"), taken)
        taken.append(controller_port)
        broker = EmbeddedKafkaBroker(
            self.kafka_dir, port, controller_port, self.host, log_dir=self.logs_dir, heap=self.kafka_heap, progress=say
        )
        say(f"Starting Kafka {jars.KAFKA_VERSION} broker on {broker.bootstrap_servers} (log: {broker.log_file})")
        started = time.monotonic()
        broker.start(timeout=max(10.0, deadline - time.monotonic()))
        state["kafka"] = {
            "pid": broker.pid,
            "port": broker.port,
            "controller_port": broker.controller_port,
            "kafka_version": jars.KAFKA_VERSION,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        say(f"Kafka broker ready on {broker.bootstrap_servers} (pid {broker.pid}, {time.monotonic() - started:.1f}s)")
        return broker

    def _start_registry(
        self, state: dict[str, Any], taken: list[int], deadline: float, say: Progress
    ) -> SchemaRegistryProcess:
        port = self._client_port(
            "schema registry",
            state.get("registry", {}).get("port"),
            STANDARD_REGISTRY_PORT,
            taken,
            self.registry_log_file,
            say,
        )
        taken.append(port)
        registry = SchemaRegistryProcess(
            self.registry_dir, port, self.host, log_dir=self.logs_dir, module=self.registry_module
        )
        say(f"Starting schema registry on {registry.url} (log: {registry.log_file})")
        started = time.monotonic()
        registry.start(timeout=max(15.0, deadline - time.monotonic()))
        state["registry"] = {
            "pid": registry.pid,
            "port": registry.port,
            "module": registry.module,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        say(f"Schema registry ready on {registry.url} (pid {registry.pid}, {time.monotonic() - started:.1f}s)")
        return registry

    def _start_spark(
        self, state: dict[str, Any], taken: list[int], deadline: float, say: Progress
    ) -> SparkConnectServer:
        port = self._client_port(
            "Spark Connect server",
            state.get("spark", {}).get("port"),
            STANDARD_SPARK_CONNECT_PORT,
            taken,
            self.spark_log_file,
            say,
        )
        taken.append(port)
        jars.spark_jars(progress=say)
        server = SparkConnectServer(self.spark_dir, port, self.host, log_dir=self.logs_dir)
        say(f"Starting the Spark Connect server on {server.remote_url} (log: {server.log_file})")
        started = time.monotonic()
        server.start(timeout=max(30.0, deadline - time.monotonic()))
        state["spark"] = {
            "enabled": True,
            "pid": server.pid,
            "port": server.port,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        say(f"Spark Connect server ready on {server.remote_url} (pid {server.pid}, {time.monotonic() - started:.1f}s)")
        return server

    def status(self) -> StackStatus:
        """Each component: running or not, pid, address, log file (a stale stack.json reads as stopped)."""
        state = self._load()
        addresses = {
            "kafka": self._bootstrap(state),
            "registry": self._registry_url(state),
            "spark": self._spark_remote(state),
        }
        logs = {"kafka": self.kafka_log_file, "registry": self.registry_log_file, "spark": self.spark_log_file}
        components = {}
        for name in ("kafka", "registry", "spark"):
            running = self._running(state, name)
            components[name] = ComponentStatus(
                name=name,
                running=running,
                pid=state.get(name, {}).get("pid") if running else None,
                address=addresses[name],
                log_file=logs[name],
                enabled=name != "spark" or self._spark_enabled(state),
            )
        return StackStatus(directory=self.directory, **components)

    def info(self) -> StackInfo:
        """The addresses of the running stack; StackError when it is not (fully) running."""
        state = self._load()
        if not self.status().running or not state:
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
        """Stop the engine, the registry and the broker (SIGTERM, SIGKILL after ``timeout``); data and ports
        are kept. Returns True when something was running.
        """
        say = progress or _quiet
        with self._locked():
            state = self._load()
            if not state:
                return False
            stopped = False
            markers = self._markers()
            for name, label in (
                ("spark", "Spark Connect server"),
                ("registry", "schema registry"),
                ("kafka", "Kafka broker"),
            ):
                component = state.get(name)
                if not component:
                    continue
                pid = component.get("pid")
                if pid and pid_matches(pid, markers[name]):
                    say(f"Stopping {label} (pid {pid})")
                    if stop_pid(pid, timeout=timeout):
                        say(f"{label} did not stop within {timeout:.0f}s and was killed")
                    stopped = True
                component["pid"] = None
            self._save(state)
            return stopped


@contextlib.contextmanager
def running_stack(directory: Path, *, timeout: float = 180.0, **stack_options: Any) -> Iterator[StackInfo]:
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
