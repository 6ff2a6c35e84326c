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

``dagster_postgres=True`` (``stack up --dagster-postgres``) adds a PostgreSQL server (``postgres/``, see
`embedded.postgres`) holding Dagster's run, event-log and schedule storage, and dagster.yaml points at it. The
choice is recorded in stack.json: later ``up``, ``status`` and ``down`` keep it; ``down`` stops PostgreSQL last.

``object_store=True`` (``stack up --object-store``) adds an S3-compatible object store (``object-store/``, see
`embedded.object_store`) with a bucket for the lakehouse: ``stack env`` then exports LAKEHOUSE_DIR=s3a://lakehouse
and the variables every S3 client reads (AWS_ENDPOINT_URL, the store's own keys, AWS_REGION), and the engine starts
with Hadoop's S3A connector and the matching settings (its keys in its environment only). Recorded in stack.json;
``down`` stops it after the engine and keeps its data.

``spark_workers=N`` (``stack up --spark-workers N``) adds a Spark standalone master and N workers
(``spark-cluster/``, see `embedded.spark_cluster`), each with its share of the cores and memory, and the Spark
Connect server becomes the driver of that cluster (the ``cluster`` profile): executors run in JVMs of their own.
The count is recorded in stack.json, so later ``up``, ``status`` and ``down`` keep it (``--spark-workers 0``
goes back to a local driver). ``down`` stops the Connect server first, then the workers, then the master.

``secure=True`` (``stack up --secure``) secures Kafka and the registry (``secure/``, see `embedded.secure`): the
broker's listener is SASL_SSL (SCRAM-SHA-512 users, client certificates required) and the registry answers HTTPS
with basic auth and client certificates; ``stack env`` exports the protocol, mechanism, users, passwords and files.
``kafka_brokers=N`` (``stack up --kafka-brokers N``) runs Kafka as N nodes (``kafka/``, ``kafka-2/``, ...), topics
replicated to all of them with two in sync. Both are recorded in stack.json, and fixed once Kafka's storage exists.

Tests use :func:`running_stack`, which starts on free ports and always stops.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dataclasses
import json
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from streaming_pipeline.devstack.embedded.dagster_home import create_pool_limits, write_dagster_yaml
from streaming_pipeline.devstack.embedded.kafka_broker import DEFAULT_HEAP, EmbeddedKafkaBroker, stored_cluster_id
from streaming_pipeline.devstack.embedded.object_store import (
    DEFAULT_BUCKET,
    REGION,
    EmbeddedObjectStore,
    client_env,
    read_or_make_credentials,
)
from streaming_pipeline.devstack.embedded.ports import LOOPBACK, free_port, is_port_free
from streaming_pipeline.devstack.embedded.postgres import STANDARD_PORT as STANDARD_POSTGRES_PORT
from streaming_pipeline.devstack.embedded.postgres import PostgresServer, server_url, stop_postgres, storage_config
from streaming_pipeline.devstack.embedded.processes import (
    ManagedProcess,
    pid_matches,
    stop_announced,
    stop_pid,
)
from streaming_pipeline.devstack.embedded.registry_process import REGISTRY_MODULE, SchemaRegistryProcess
from streaming_pipeline.devstack.embedded.secure import SecureMaterial
from streaming_pipeline.devstack.embedded.spark_cluster import STANDARD_MASTER_PORT as STANDARD_SPARK_MASTER_PORT
from streaming_pipeline.devstack.embedded.spark_cluster import SparkClusterStatus, SparkStandaloneCluster
from streaming_pipeline.devstack.embedded.spark_connect import STANDARD_PORT as STANDARD_SPARK_CONNECT_PORT
from streaming_pipeline.devstack.embedded.spark_connect import SparkConnectServer, driver_memory_for
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline.lakehouse import settings
from streaming_pipeline.lakehouse.engine import jars
from streaming_pipeline.lakehouse.engine.java import exclusive_lock, find_java

STACK_DIR_ENV = settings.STACK_DIR
STATE_FILE = "stack.json"
STANDARD_KAFKA_PORT = 9092
STANDARD_CONTROLLER_PORT = 9093
STANDARD_REGISTRY_PORT = 8081
STANDARD_OBJECT_STORE_PORT = 9000  # MinIO's and most S3-compatible stores' default

Progress = Callable[[str], None]
State = dict[str, Any]  # what stack.json holds


class Component(Protocol):
    """What a start returns, to stop it again when a later one fails (a server, the Spark cluster, Kafka's nodes)."""

    def stop(self, timeout: float = ...) -> bool: ...


def default_stack_dir() -> Path:
    """$STREAMING_PIPELINE_STACK_DIR, else ``.stack/`` in the current working directory."""
    return settings.stack_dir_override() or Path.cwd() / ".stack"


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
    postgres_url: str | None = None  # Dagster's storage (stack up --dagster-postgres); no password in it
    postgres_pid: int | None = None
    postgres_log_file: Path | None = None
    spark_master_url: str | None = None  # spark://host:port when the Connect server drives a standalone cluster
    spark_workers: int = 0  # workers of that cluster (0: a local driver)
    live_mode: str = "triggered"  # LIVE_MODE of the code location (stack up --live-mode)
    object_store_url: str | None = None  # the S3 endpoint (stack up --object-store)
    object_store_pid: int | None = None
    object_store_log_file: Path | None = None
    lakehouse_dir: str | None = None  # s3a://<bucket> on the object store
    # AWS_ENDPOINT_URL, the store's keys, AWS_REGION: what `stack env` exports, never shown otherwise.
    object_store_env: dict[str, str] = field(default_factory=dict, repr=False)
    # A secured stack's client settings (KAFKA_SECURITY_PROTOCOL, ..., the passwords): exported, never shown.
    secure_env: dict[str, str] = field(default_factory=dict, repr=False)
    kafka_node_pids: dict[int, int | None] = field(default_factory=dict)  # node id: pid, each Kafka node

    def env(self) -> dict[str, str]:
        env = {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers, "SCHEMA_REGISTRY_URL": self.schema_registry_url}
        if self.spark_remote:
            env["SPARK_REMOTE"] = self.spark_remote
        if self.dagster_home:
            env["DAGSTER_HOME"] = str(self.dagster_home)
        if self.lakehouse_dir:
            env["LAKEHOUSE_DIR"] = self.lakehouse_dir
            env.update(self.object_store_env)
        env.update(self.secure_env)
        env["LIVE_MODE"] = self.live_mode
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
    postgres: ComponentStatus | None = None  # present when the stack keeps Dagster's storage in PostgreSQL
    spark_cluster: SparkClusterStatus | None = None  # present when the Connect server drives a standalone cluster
    object_store: ComponentStatus | None = None  # present when the lakehouse is on the stack's object store
    lakehouse_dir: str | None = None  # s3a://<bucket> then
    kafka_nodes: tuple[ComponentStatus, ...] = ()  # Kafka's nodes after the first (stack up --kafka-brokers N)

    @property
    def components(self) -> tuple[ComponentStatus, ...]:
        return (
            (self.kafka, *self.kafka_nodes, self.registry, self.spark)
            + ((self.object_store,) if self.object_store else ())
            + ((self.postgres,) if self.postgres else ())
            + (self._spark_cluster_components())
        )

    def _spark_cluster_components(self) -> tuple[ComponentStatus, ...]:
        """The master and the workers as components (a worker's address is its RPC endpoint, once it runs)."""
        cluster = self.spark_cluster
        if cluster is None:
            return ()
        return tuple(
            ComponentStatus(name=p.name, running=p.running, pid=p.pid, address=p.address, log_file=p.log_file)
            for p in cluster.processes
        )

    @property
    def running(self) -> bool:
        """True when every enabled component runs."""
        return all(c.running for c in self.components if c.enabled)

    def as_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "running": self.running,
            "components": {
                c.name: {
                    "running": c.running,
                    "enabled": c.enabled,
                    "pid": c.pid,
                    "address": c.address,
                    "log_file": str(c.log_file),
                }
                for c in self.components
            },
            "spark_remote": self.spark.address if self.spark.running else None,
            # The master's URL while it runs, and how many workers it lists as ALIVE (0 without a cluster).
            "spark_master_url": self.spark_cluster.master_url if self.spark_cluster else None,
            "spark_workers": self.spark_cluster.alive_workers if self.spark_cluster else 0,
            "spark_cluster": self.spark_cluster.as_json() if self.spark_cluster else None,
            "dagster_storage": "postgres" if self.postgres else "sqlite",
            "lakehouse_dir": self.lakehouse_dir,
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
        dagster_postgres: bool = False,
        object_store: bool = False,
        spark_workers: int | None = None,
        spark_worker_cores: int | None = None,
        spark_worker_memory: str | None = None,
        live_mode: str | None = None,
        engine_conf: dict[str, str] | None = None,
        secure: bool = False,
        kafka_brokers: int | None = None,
    ) -> None:
        self.directory = Path(directory).expanduser().resolve()
        self.prefer_standard_ports = prefer_standard_ports
        self.host = host
        self.registry_module = registry_module
        self.kafka_heap = kafka_heap
        self.spark = spark
        self.dagster_postgres = dagster_postgres
        self.object_store = object_store
        # None: as recorded in stack.json (0, a local driver, for a new stack); N > 0: a standalone cluster.
        self.spark_workers = spark_workers
        self.spark_worker_cores = spark_worker_cores
        self.spark_worker_memory = spark_worker_memory
        # None: as recorded in stack.json (triggered for a new stack).
        self.live_mode = live_mode
        # Spark settings of this start of the engine on top of its profile's (the benches' event log), not recorded.
        self.engine_conf = dict(engine_conf or {})
        self.secure = secure
        # None: as recorded in stack.json (1 for a new stack).
        self.kafka_brokers = kafka_brokers

    # ------------------------------------------------------------------ layout

    @property
    def kafka_dir(self) -> Path:
        return self.directory / "kafka"

    def kafka_node_dir(self, node_id: int) -> Path:
        """Node 1 keeps the single broker's directory, so a stack grown from one node keeps its layout."""
        return self.kafka_dir if node_id == 1 else self.directory / f"kafka-{node_id}"

    def kafka_node_logs(self, node_id: int) -> Path:
        return self.logs_dir if node_id == 1 else self.logs_dir / f"kafka-{node_id}"

    @property
    def secure_dir(self) -> Path:
        return self.directory / "secure"

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

    @property
    def postgres_dir(self) -> Path:
        return self.directory / "postgres"

    @property
    def postgres_log_file(self) -> Path:
        return self.logs_dir / "postgres.log"

    @property
    def spark_cluster_dir(self) -> Path:
        return self.directory / "spark-cluster"

    @property
    def object_store_dir(self) -> Path:
        return self.directory / "object-store"

    @property
    def object_store_log_file(self) -> Path:
        return self.logs_dir / "object-store.log"

    def _log_files(self) -> dict[str, Path]:
        return {
            "kafka": self.kafka_log_file,
            "registry": self.registry_log_file,
            "spark": self.spark_log_file,
            "postgres": self.postgres_log_file,
            "object_store": self.object_store_log_file,
        }

    # Strings that appear in each component's command line (guards against a reused pid).
    def _markers(self) -> dict[str, str]:
        return {
            "kafka": str(self.kafka_dir / "server.properties"),
            "registry": str(self.registry_dir),
            "spark": str(self.spark_dir / "log4j2.properties"),
            "postgres": str(self.postgres_dir / "data"),
            "object_store": str(self.object_store_dir / "s3proxy.properties"),
        }

    # ------------------------------------------------------------------ state

    def _load(self) -> State:
        try:
            state = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # unreadable: treated as a stack that never ran
        return state if isinstance(state, dict) else {}

    def _save(self, state: State) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        state["version"] = 1
        state["directory"] = str(self.directory)
        state["host"] = self.host
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.state_file)

    @property
    def _lock_file(self) -> Path:
        """Held while ``up`` or ``down`` runs: one of them at a time per stack directory."""
        return self.directory / ".stack.lock"

    def _running(self, state: State, name: str) -> bool:
        if name == "spark_cluster":
            cluster = self._spark_cluster(state)
            return cluster is not None and cluster.running
        if name == "kafka":
            return all(self._kafka_node_running(node) for node in self._kafka_nodes(state))
        return pid_matches(state.get(name, {}).get("pid"), self._markers()[name])

    # ------------------------------------------------------------------ Kafka's nodes, security

    def _kafka_brokers(self, state: State) -> int:
        return int(state.get("kafka", {}).get("brokers") or 1)

    def _kafka_nodes(self, state: State) -> list[dict[str, Any]]:
        """Each node's record ({node_id, pid, port, controller_port}): node 1 is stack.json's `kafka` itself."""
        record = state.get("kafka", {})
        others = {int(node["node_id"]): node for node in record.get("nodes", [])}
        return [{**record, "node_id": 1}] + [
            others.get(node_id, {"node_id": node_id}) for node_id in range(2, self._kafka_brokers(state) + 1)
        ]

    def _kafka_node_running(self, node: dict[str, Any]) -> bool:
        marker = str(self.kafka_node_dir(int(node["node_id"])) / "server.properties")
        return pid_matches(node.get("pid"), marker)

    def _secure_enabled(self, state: State) -> bool:
        return bool(state.get("secure", self.secure))

    def _secure_material(self, state: State) -> SecureMaterial | None:
        return SecureMaterial.read_or_make(self.secure_dir) if self._secure_enabled(state) else None

    def _record_kafka_choices(self, state: State) -> None:
        """Record --secure and --kafka-brokers; refuse to change either once Kafka's storage exists (its users are
        made, and its controller quorum fixed, when it is first formatted)."""
        formatted = (self.kafka_dir / "data" / "meta.properties").is_file()
        dir_arg = "" if self.directory == default_stack_dir().resolve() else f" --dir {self.directory}"
        fresh = f"use another --dir, or `stack down{dir_arg}` and delete {self.directory} (its data goes with it)"
        if self.secure and not state.get("secure"):
            if formatted:
                raise StackError(f"the Kafka of the stack in {self.directory} was made without --secure: {fresh}")
            state["secure"] = True
        if self.kafka_brokers is not None and self.kafka_brokers != self._kafka_brokers(state):
            if self.kafka_brokers < 1:
                raise StackError(f"--kafka-brokers must be 1 or more, not {self.kafka_brokers}")
            if formatted:
                raise StackError(
                    f"the Kafka of the stack in {self.directory} has {self._kafka_brokers(state)} node(s); for "
                    f"{self.kafka_brokers}, {fresh}"
                )
            state.setdefault("kafka", {})["brokers"] = self.kafka_brokers

    def _spark_enabled(self, state: State) -> bool:
        return bool(state.get("spark", {}).get("enabled", self.spark))

    def _spark_workers(self, state: State) -> int:
        """Workers of the standalone cluster the engine drives, as recorded (0: a local driver)."""
        if not self._spark_enabled(state):
            return 0
        return int(state.get("spark_cluster", {}).get("workers") or 0)

    def _spark_cluster(self, state: State) -> SparkStandaloneCluster | None:
        """The recorded cluster (to inspect or stop it), None when the stack never started one."""
        record = state.get("spark_cluster") or {}
        if not record.get("workers") or not record.get("port") or not record.get("webui_port"):
            return None
        return SparkStandaloneCluster.from_record(
            self.spark_cluster_dir, record, self._host(state), log_dir=self.logs_dir
        )

    def _record_spark_workers(self, state: State, say: Progress) -> None:
        """Record the worker count asked for; refuse to change it under a running engine."""
        if self.spark_workers is None:
            return
        if self.spark_workers < 0:
            raise StackError(f"--spark-workers must be 0 or more, not {self.spark_workers}")
        recorded = int(state.get("spark_cluster", {}).get("workers") or 0)
        if self.spark_workers != recorded and self._spark_enabled(state) and self._running(state, "spark"):
            dir_arg = "" if self.directory == default_stack_dir().resolve() else f" --dir {self.directory}"
            running = f"drives a standalone cluster of {recorded} worker(s)" if recorded else "runs in local mode"
            raise StackError(
                f"the Spark Connect server in {self.directory} {running}; to start it with "
                f"{self.spark_workers} worker(s), stop the stack first: `streaming-pipeline stack down{dir_arg}`"
            )
        leftover = self._spark_cluster(state)
        if leftover is not None and self.spark_workers != recorded:  # what is left of the old size goes first
            leftover.stop(timeout=15, progress=say)
        state.setdefault("spark_cluster", {})["workers"] = self.spark_workers

    def _postgres_enabled(self, state: State) -> bool:
        return bool(state.get("postgres", {}).get("enabled", self.dagster_postgres))

    def _postgres_url(self, state: State) -> str | None:
        port = state.get("postgres", {}).get("port")
        return server_url(self._host(state), port) if port else None

    def _object_store_enabled(self, state: State) -> bool:
        return bool(state.get("object_store", {}).get("enabled", self.object_store))

    def _object_store_url(self, state: State) -> str | None:
        port = state.get("object_store", {}).get("port")
        return f"http://{self._host(state)}:{port}" if port else None

    def _object_store_env(self, state: State) -> dict[str, str]:
        """What an S3 client needs to reach the stack's store: its endpoint, keys and region."""
        url = self._object_store_url(state)
        if url is None:
            return {}
        return client_env(url, *read_or_make_credentials(self.object_store_dir / "credentials"))

    def _lakehouse_dir(self, state: State) -> str:
        return f"s3a://{state.get('object_store', {}).get('bucket') or DEFAULT_BUCKET}"

    def _write_dagster_yaml(self, state: State) -> None:
        port = state.get("postgres", {}).get("port")
        postgres_db = None
        if self._postgres_enabled(state) and port:
            postgres_db = storage_config(self._host(state), port, self.postgres_dir / "pgpass")
        write_dagster_yaml(self.dagster_home, postgres_db)

    def _host(self, state: State) -> str:
        return str(state.get("host") or self.host)

    def _bootstrap(self, state: State) -> str | None:
        ports = [node.get("port") for node in self._kafka_nodes(state)]
        return ",".join(f"{self._host(state)}:{port}" for port in ports if port) if ports[0] else None

    def _registry_url(self, state: State) -> str | None:
        port = state.get("registry", {}).get("port")
        scheme = "https" if self._secure_enabled(state) else "http"
        return f"{scheme}://{self._host(state)}:{port}" if port else None

    def _spark_remote(self, state: State) -> str | None:
        port = state.get("spark", {}).get("port")
        return f"sc://{self._host(state)}:{port}" if port else None

    def _info(self, state: State, *, already_running: bool) -> StackInfo:
        spark_up = self._spark_enabled(state) and self._running(state, "spark")
        postgres_up = self._postgres_enabled(state) and self._running(state, "postgres")
        store_up = self._object_store_enabled(state) and self._running(state, "object_store")
        material = self._secure_material(state)
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
            live_mode=str(state.get("live_mode") or "triggered"),
            postgres_url=self._postgres_url(state) if postgres_up else None,
            postgres_pid=state.get("postgres", {}).get("pid") if postgres_up else None,
            postgres_log_file=self.postgres_log_file if postgres_up else None,
            object_store_url=self._object_store_url(state) if store_up else None,
            object_store_pid=state.get("object_store", {}).get("pid") if store_up else None,
            object_store_log_file=self.object_store_log_file if store_up else None,
            lakehouse_dir=self._lakehouse_dir(state) if store_up else None,
            object_store_env=self._object_store_env(state) if store_up else {},
            secure_env=material.client_env() if material else {},
            kafka_node_pids={int(node["node_id"]): node.get("pid") for node in self._kafka_nodes(state)},
            **self._spark_cluster_info(state, spark_up),
        )

    def _spark_cluster_info(self, state: State, spark_up: bool) -> dict[str, Any]:
        cluster = self._spark_cluster(state) if spark_up and self._spark_workers(state) else None
        if cluster is None or not cluster.master_running():
            return {}
        return {"spark_master_url": cluster.master_url, "spark_workers": cluster.status().alive_workers}

    # ------------------------------------------------------------------ ports

    def _take_client_port(
        self, state: State, name: str, component: str, standard: int, taken: list[int], say: Progress
    ) -> int:
        """The port of ``name`` (see :meth:`_client_port`), added to ``taken``."""
        log_file = self._log_files()[name]
        port = self._client_port(component, state.get(name, {}).get("port"), standard, taken, log_file, say)
        taken.append(port)
        return port

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
        with exclusive_lock(self._lock_file):
            state = self._load()
            if self.live_mode is not None and state.get("live_mode") != self.live_mode:
                state["live_mode"] = self.live_mode  # recorded even when everything runs already
                self._save(state)
            wanted = self._wanted(state, say)
            missing = self._missing(state, wanted, say)
            self._say_when_the_heap_differs(state, wanted, missing, say)
            if not missing:
                return self._info(state, already_running=True)
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            self._write_dagster_yaml(state)
            self._start_all(state, missing, self._ports_in_use(state, wanted, missing), deadline, say)
            return self._info(state, already_running=False)

    def _wanted(self, state: State, say: Progress) -> list[str]:
        """The components this stack runs, in start order; the choices made now are recorded in ``state``."""
        state.setdefault("spark", {})["enabled"] = self.spark or bool(state.get("spark", {}).get("enabled"))
        self._record_kafka_choices(state)
        if self.object_store:  # recorded only when asked for, as PostgreSQL is
            state.setdefault("object_store", {})["enabled"] = True
        wanted = ["kafka", "registry"] + (["object_store"] if self._object_store_enabled(state) else [])
        wanted += ["spark"] if self._spark_enabled(state) else []
        if self.dagster_postgres:  # recorded only when asked for: without it stack.json stays as it was
            state.setdefault("postgres", {})["enabled"] = True
        if self._postgres_enabled(state):  # before the engine, whose catalog is in it
            wanted.insert(wanted.index("spark") if "spark" in wanted else len(wanted), "postgres")
        self._record_spark_workers(state, say)
        if "spark" in wanted and self._spark_workers(state):
            wanted.insert(wanted.index("spark"), "spark_cluster")
        return wanted

    @staticmethod
    def _say_when_the_heap_differs(state: State, wanted: list[str], missing: list[str], say: Progress) -> None:
        """A running engine keeps the heap it started with; say so when the stack's mode wants another one."""
        heap, mode = state.get("spark", {}).get("driver_memory"), state.get("live_mode")
        wanted_heap = driver_memory_for(mode)
        if "spark" in wanted and "spark" not in missing and heap and heap != wanted_heap:
            say(
                f"The Spark Connect server keeps its {heap} heap until it restarts; the {mode} mode's is "
                f"{wanted_heap} (`stack down`, then `stack up`)"
            )

    def _missing(self, state: State, wanted: list[str], say: Progress) -> list[str]:
        """Those of ``wanted`` that do not run, in start order."""
        missing = [name for name in wanted if not self._running(state, name)]
        if self._secure_enabled(state) and "registry" not in missing and not state["registry"].get("secure"):
            say("The schema registry starts again, over HTTPS with basic auth")
            self._stop_recorded("registry", "schema registry", state, 15.0, say)
            missing = [name for name in wanted if name == "registry" or name in missing]
        if "object_store" in wanted and "spark_cluster" in wanted and "spark_cluster" not in missing:
            if not state["spark_cluster"].get("object_store"):  # workers started before the store lack its keys
                say("The Spark cluster starts again, its workers with the object store's keys")
                missing = [name for name in wanted if name == "spark_cluster" or name in missing]
        if "spark_cluster" in missing and "spark" not in missing:
            # A driver cannot move to a new master: the engine starts again with the cluster.
            self._stop_recorded("spark", "Spark Connect server", state, 15.0, say)
            missing.append("spark")
        if "object_store" in wanted and "spark" in wanted and "spark" not in missing:
            if not state["spark"].get("object_store"):  # an engine started before the store has no S3A settings
                say("The Spark Connect server starts again, with the object store's S3A settings")
                self._stop_recorded("spark", "Spark Connect server", state, 15.0, say)
                missing.append("spark")
        if "postgres" in wanted and "spark" in wanted and "spark" not in missing:
            if state["spark"].get("catalog") != "postgres":  # started before PostgreSQL: its catalog is Derby's
                say("The Spark Connect server starts again, with its catalog in PostgreSQL")
                self._stop_recorded("spark", "Spark Connect server", state, 15.0, say)
                missing.append("spark")
        return missing

    @staticmethod
    def _ports_in_use(state: State, wanted: list[str], missing: list[str]) -> list[int]:
        """The recorded ports of the components that run (the ones to start must not take them)."""
        records = [
            node for name in wanted if name not in missing for node in [state[name], *state[name].get("nodes", [])]
        ]
        return [port for record in records for port in (record.get("port"), record.get("controller_port")) if port]

    def _start_all(self, state: State, missing: list[str], taken: list[int], deadline: float, say: Progress) -> None:
        """Start ``missing`` in order, saving stack.json after each; when one fails, stop those started."""
        starters: dict[str, Callable[[State, list[int], float, Progress], Component]] = {
            "kafka": self._start_kafka,
            "registry": self._start_registry,
            "spark": self._start_spark,
            "postgres": self._start_postgres,
            "spark_cluster": self._start_spark_cluster,
            "object_store": self._start_object_store,
        }
        started: list[Component] = []
        try:
            for name in missing:
                started.append(starters[name](state, taken, deadline, say))
                self._save(state)
        except BaseException:
            for component in reversed(started):
                component.stop(timeout=15)
            for name in missing:
                state.get(name, {})["pid"] = None
            self._save(state)
            raise

    @staticmethod
    def _start_server(
        server: ManagedProcess, label: str, address: str, minimum: float, deadline: float, say: Progress
    ) -> None:
        """``server.start`` with what is left until ``deadline`` (at least ``minimum`` s), then say it is ready."""
        started = time.monotonic()
        server.start(timeout=max(minimum, deadline - time.monotonic()))
        say(f"{label} ready on {address} (pid {server.pid}, {time.monotonic() - started:.1f}s)")

    def _start_kafka(self, state: State, taken: list[int], deadline: float, say: Progress) -> Component:
        """Start every Kafka node that is not running: all are launched before any is waited for, since a node
        of a cluster answers only once a majority of the controller quorum runs."""
        find_java()
        material = self._secure_material(state)
        nodes = self._kafka_nodes(state)
        running = [node for node in nodes if self._kafka_node_running(node)]
        taken += [port for node in running for port in (node.get("port"), node.get("controller_port")) if port]
        for node in nodes:
            if node in running:
                continue
            if node["node_id"] == 1:
                node["port"] = self._take_client_port(state, "kafka", "Kafka broker", STANDARD_KAFKA_PORT, taken, say)
                node["controller_port"] = self._controller_port(node.get("controller_port"), taken)
            else:
                node["port"] = self._internal_port(node.get("port"), None, taken)
                taken.append(node["port"])
                node["controller_port"] = self._internal_port(node.get("controller_port"), None, taken)
            taken.append(node["controller_port"])
        voters = ",".join(f"{node['node_id']}@{self.host}:{node['controller_port']}" for node in nodes)
        brokers = {
            node["node_id"]: EmbeddedKafkaBroker(
                self.kafka_node_dir(node["node_id"]),
                node["port"],
                node["controller_port"],
                self.host,
                log_dir=self.kafka_node_logs(node["node_id"]),
                heap=self.kafka_heap,
                progress=say,
                secure=material,
                node_id=node["node_id"],
                quorum_voters=voters,
                cluster_id=stored_cluster_id(self.kafka_dir),
                replicas=len(nodes),
            )
            for node in nodes
            if node not in running
        }
        started = _KafkaNodes(list(brokers.values()))
        try:
            for node_id, broker in brokers.items():
                what = "broker" if len(nodes) == 1 else f"node {node_id} of {len(nodes)}"
                say(
                    f"Starting Kafka {jars.KAFKA_VERSION} {what}, {broker.listener} on {broker.bootstrap_servers} "
                    f"(log: {broker.log_file})"
                )
                broker.launch()
            began = time.monotonic()
            for node_id, broker in brokers.items():
                broker.wait_ready(max(10.0, deadline - time.monotonic()))
                seconds = time.monotonic() - began
                what = "broker" if len(nodes) == 1 else f"node {node_id}"
                say(f"Kafka {what} ready on {broker.bootstrap_servers} (pid {broker.pid}, {seconds:.1f}s)")
        except BaseException:
            started.stop(timeout=15)
            raise
        pids = {node_id: broker.pid for node_id, broker in brokers.items()}
        records = [
            {
                "node_id": node["node_id"],
                "pid": pids.get(node["node_id"], node.get("pid")),
                "port": node["port"],
                "controller_port": node["controller_port"],
            }
            for node in nodes
        ]
        first = records[0]
        state["kafka"] = _started(
            first["pid"],
            first["port"],
            controller_port=first["controller_port"],
            kafka_version=jars.KAFKA_VERSION,
            secure=material is not None,
            brokers=len(nodes),
            nodes=records[1:],
        )
        return started

    def _start_registry(self, state: State, taken: list[int], deadline: float, say: Progress) -> SchemaRegistryProcess:
        port = self._take_client_port(state, "registry", "schema registry", STANDARD_REGISTRY_PORT, taken, say)
        material = self._secure_material(state)
        registry = SchemaRegistryProcess(
            self.registry_dir, port, self.host, log_dir=self.logs_dir, module=self.registry_module, secure=material
        )
        say(f"Starting schema registry on {registry.url} (log: {registry.log_file})")
        self._start_server(registry, "Schema registry", registry.url, 15.0, deadline, say)
        state["registry"] = _started(registry.pid, registry.port, module=registry.module, secure=material is not None)
        return registry

    def _start_spark(self, state: State, taken: list[int], deadline: float, say: Progress) -> SparkConnectServer:
        port = self._take_client_port(state, "spark", "Spark Connect server", STANDARD_SPARK_CONNECT_PORT, taken, say)
        jars.spark_jars(progress=say)
        cluster = self._spark_cluster(state) if self._spark_workers(state) else None
        driver: dict[str, Any] = {"driver_memory": driver_memory_for(state.get("live_mode")), "conf": self.engine_conf}
        if cluster is not None:  # the driver of the standalone cluster, with the `cluster` profile
            driver.update(
                profile="cluster", master=cluster.master_url, conf={**cluster.driver_conf(), **self.engine_conf}
            )
            say(f"The Spark Connect server drives the standalone cluster {cluster.master_url}")
        store_env = self._object_store_env(state) if self._object_store_enabled(state) else {}
        if store_env:  # the lakehouse on the stack's object store: S3A's settings; its keys in the environment only
            from streaming_pipeline.lakehouse.engine.spark import s3a_conf

            driver["conf"] = {**s3a_conf(store_env["AWS_ENDPOINT_URL"], REGION), **driver["conf"]}
            # S3A reads the keys from there, and the handlers' Python workers (which read checkpoints and logs with
            # pyarrow and delta-rs) the whole of it.
            driver["env"] = store_env
        catalog = "derby"
        if self._postgres_enabled(state):  # the catalog where other engines can share it
            driver["metastore_conf"] = self._shared_metastore_conf(state, say)
            catalog = "postgres"
        server = SparkConnectServer(self.spark_dir, port, self.host, log_dir=self.logs_dir, **driver)
        say(f"Starting the Spark Connect server on {server.remote_url} (log: {server.log_file})")
        self._start_server(server, "Spark Connect server", server.remote_url, 30.0, deadline, say)
        state["spark"] = _started(
            server.pid,
            server.port,
            enabled=True,
            driver_memory=server.driver_memory,
            object_store=bool(store_env),
            catalog=catalog,
        )
        return server

    @property
    def catalog_dir(self) -> Path:
        """The shared metastore's hive-site.xml (mode 0600), for the engine's and your own sessions' classpath."""
        return self.spark_dir / "catalog"

    def _shared_metastore_conf(self, state: State, say: Progress) -> dict[str, str]:
        """The engine's catalog in the stack's PostgreSQL (database `metastore`, made when missing)."""
        from streaming_pipeline.devstack.embedded.postgres import METASTORE_DATABASE, USER, connect, password
        from streaming_pipeline.lakehouse.engine.catalog import shared_metastore_conf, write_shared_metastore_site

        port = int(state["postgres"]["port"])
        passfile = self.postgres_dir / "pgpass"
        with contextlib.closing(connect(self.host, port, passfile)) as connection:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (METASTORE_DATABASE,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{METASTORE_DATABASE}"')
        url = f"jdbc:postgresql://{self.host}:{port}/{METASTORE_DATABASE}"
        site = write_shared_metastore_site(self.catalog_dir, url, USER, password(passfile))
        say(f"The engine's catalog is in PostgreSQL ({url}; settings in {site / 'hive-site.xml'})")
        return shared_metastore_conf(site, jars.metastore_jdbc_jars(progress=say))

    def _start_object_store(
        self, state: State, taken: list[int], deadline: float, say: Progress
    ) -> EmbeddedObjectStore:
        port = self._take_client_port(state, "object_store", "object store", STANDARD_OBJECT_STORE_PORT, taken, say)
        bucket = state.get("object_store", {}).get("bucket") or DEFAULT_BUCKET
        store = EmbeddedObjectStore(self.object_store_dir, port, self.host, bucket=bucket, log_dir=self.logs_dir)
        version = jars.S3PROXY_VERSION
        say(f"Starting the object store (s3proxy {version}) on {store.endpoint_url} (log: {store.log_file})")
        self._start_server(store, "Object store", store.endpoint_url, 20.0, deadline, say)
        state["object_store"] = _started(store.pid, store.port, enabled=True, bucket=bucket)
        return store

    def _start_postgres(self, state: State, taken: list[int], deadline: float, say: Progress) -> PostgresServer:
        port = self._take_client_port(state, "postgres", "PostgreSQL server", STANDARD_POSTGRES_PORT, taken, say)
        server = PostgresServer(self.postgres_dir, port, self.host, log_dir=self.logs_dir)
        say(f"Starting PostgreSQL (Dagster's storage) on {server.url} (log: {server.log_file})")
        self._start_server(server, "PostgreSQL", server.url, 30.0, deadline, say)
        state["postgres"] = _started(server.pid, server.port, enabled=True, postgres_version=server.version)
        # dagster.yaml names the port, which is known only now on a first start.
        self._write_dagster_yaml(state)
        from streaming_pipeline.devstack.project import project_pools

        create_pool_limits(self.dagster_home, project_pools())
        return server

    def _start_spark_cluster(
        self, state: State, taken: list[int], deadline: float, say: Progress
    ) -> SparkStandaloneCluster:
        leftover = self._spark_cluster(state)
        if leftover is not None:  # part of an earlier cluster still runs: start it whole again
            leftover.stop(timeout=15, progress=say)
        cluster = self._new_spark_cluster(state, taken)
        started = time.monotonic()
        cluster.start(timeout=max(30.0, deadline - time.monotonic()), progress=say)
        state["spark_cluster"] = {**cluster.record(), "started_at": _now()}
        say(
            f"Spark standalone cluster ready on {cluster.master_url} (web UI {cluster.webui_url}): {cluster.workers} "
            f"worker(s), {cluster.worker_cores} core(s) and {cluster.worker_memory_mb} MiB each "
            f"({time.monotonic() - started:.1f}s)"
        )
        return cluster

    def _new_spark_cluster(self, state: State, taken: list[int]) -> SparkStandaloneCluster:
        """The cluster to start: the recorded ports when free, the sizes given now or recorded for this many."""
        record = state.get("spark_cluster", {})
        workers = self._spark_workers(state)
        same_size = len(record.get("worker_pids") or []) == workers  # the recorded sizes were for this many
        master_port = self._internal_port(record.get("port"), STANDARD_SPARK_MASTER_PORT, taken)
        taken.append(master_port)
        webui_port = self._internal_port(record.get("webui_port"), None, taken)
        taken.append(webui_port)
        return SparkStandaloneCluster(
            self.spark_cluster_dir,
            workers,
            self.host,
            log_dir=self.logs_dir,
            master_port=master_port,
            webui_port=webui_port,
            # Given now, else as recorded for this many workers, else each worker's share of the machine.
            worker_cores=self.spark_worker_cores or (record.get("worker_cores") if same_size else None),
            worker_memory=self.spark_worker_memory or (record.get("worker_memory_mb") if same_size else None),
            # The lakehouse on the stack's object store: the executors write its files, with the store's keys.
            worker_env=self._object_store_env(state) if self._object_store_enabled(state) else None,
        )

    def _internal_port(self, recorded: int | None, standard: int | None, taken: list[int]) -> int:
        """A port no client is configured with: the recorded one, else the standard one, else any free one."""
        if recorded and recorded not in taken and is_port_free(recorded, self.host):
            return int(recorded)
        if standard and self.prefer_standard_ports and standard not in taken and is_port_free(standard, self.host):
            return standard
        return free_port(self.host, exclude=taken + ([standard] if standard else []))

    def _stop_recorded(
        self,
        name: str,
        label: str,
        state: State,
        timeout: float,
        say: Progress,
        stop: Callable[[int, float], bool] = stop_pid,
    ) -> bool:
        """Stop one recorded component with ``stop`` when its pid is still ours; True when it ran."""
        component = state.get(name) or {}
        pid = component.get("pid")
        running = bool(pid and pid_matches(pid, self._markers()[name]))
        if running:
            assert pid is not None
            stop_announced(pid, label, timeout, say, stop)
        if component:
            component["pid"] = None
        return running

    def _stop_kafka(self, state: State, timeout: float, say: Progress) -> bool:
        """Stop every Kafka node at once: a node stopped after the others would wait for a controller quorum
        that is gone."""
        nodes = [node for node in self._kafka_nodes(state) if node.get("port")]
        running = [node for node in nodes if self._kafka_node_running(node)]
        labels = {1: "Kafka broker"} if len(nodes) == 1 else {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(len(running), 1)) as pool:
            for future in [
                pool.submit(
                    stop_announced,
                    node["pid"],
                    labels.get(node["node_id"], f"Kafka node {node['node_id']}"),
                    timeout,
                    say,
                )
                for node in running
            ]:
                future.result()
        if state.get("kafka"):
            state["kafka"]["pid"] = None
            for node in state["kafka"].get("nodes", []):
                node["pid"] = None
        return bool(running)

    def status(self) -> StackStatus:
        """Each component: running or not, pid, address, log file (a stale stack.json reads as stopped)."""
        state = self._load()
        addresses = {
            "kafka": self._bootstrap(state),
            "registry": self._registry_url(state),
            "spark": self._spark_remote(state),
        }
        logs = self._log_files()
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
        object_store = self._optional_status(state, "object_store", self._object_store_url(state))
        postgres = self._optional_status(state, "postgres", self._postgres_url(state))
        cluster = self._spark_cluster(state) if self._spark_workers(state) else None
        first = self._kafka_nodes(state)[0]  # the `kafka` row is node 1's, its address the whole cluster's
        components["kafka"] = dataclasses.replace(
            components["kafka"],
            running=self._kafka_node_running(first),
            pid=first.get("pid") if self._kafka_node_running(first) else None,
        )
        kafka_nodes = tuple(
            ComponentStatus(
                name=f"kafka-{node['node_id']}",
                running=self._kafka_node_running(node),
                pid=node.get("pid") if self._kafka_node_running(node) else None,
                address=f"{self._host(state)}:{node['port']}" if node.get("port") else None,
                log_file=self.kafka_node_logs(node["node_id"]) / "kafka.log",
            )
            for node in self._kafka_nodes(state)[1:]
        )
        return StackStatus(
            directory=self.directory,
            kafka_nodes=kafka_nodes,
            **components,
            postgres=postgres,
            spark_cluster=cluster.status() if cluster else None,
            object_store=object_store,
            lakehouse_dir=self._lakehouse_dir(state) if object_store else None,
        )

    def _optional_status(self, state: State, name: str, address: str | None) -> ComponentStatus | None:
        """The status of a component the stack runs only when asked to (PostgreSQL, the object store); None when
        it does not have it."""
        enabled = {"postgres": self._postgres_enabled, "object_store": self._object_store_enabled}[name](state)
        if not enabled:
            return None
        running = self._running(state, name)
        return ComponentStatus(
            name=name,
            running=running,
            pid=state.get(name, {}).get("pid") if running else None,
            address=address,
            log_file=self._log_files()[name],
        )

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
        return [f"export {key}={shlex.quote(value)}" for key, value in info.env().items()]

    def down(self, timeout: float = 30.0, progress: Progress | None = None) -> bool:
        """Stop the engine, the registry and the broker (SIGTERM, SIGKILL after ``timeout``), then the object store
        and PostgreSQL when the stack has them (PostgreSQL with SIGINT); data and ports are kept. Returns True when
        something was running.
        """
        say = progress or _quiet
        with exclusive_lock(self._lock_file):
            state = self._load()
            if not state:
                return False
            stopped = False
            for name, label in (("spark", "Spark Connect server"), ("registry", "schema registry")):
                stopped = self._stop_recorded(name, label, state, timeout, say) or stopped
            stopped = self._stop_kafka(state, timeout, say) or stopped
            # The standalone cluster after its driver (the Connect server, stopped above): workers, then master.
            cluster = self._spark_cluster(state)
            if cluster is not None:
                stopped = cluster.stop(timeout=timeout, progress=say) or stopped
                state["spark_cluster"].update(pid=None, worker_pids=[None] * cluster.workers)
            # The object store after the engine, which writes the lakehouse to it.
            stopped = self._stop_recorded("object_store", "object store", state, timeout, say) or stopped
            # Last: PostgreSQL, after whatever may still write to it. SIGINT (fast shutdown), see embedded.postgres.
            stopped = self._stop_recorded("postgres", "PostgreSQL", state, timeout, say, stop_postgres) or stopped
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


@dataclass
class _KafkaNodes:
    """The Kafka nodes one `up` started, stopped together when a later component fails to start."""

    brokers: list[EmbeddedKafkaBroker]

    def stop(self, timeout: float = 30.0) -> bool:
        return any([broker.stop(timeout=timeout) for broker in self.brokers])


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _started(pid: int | None, port: int, **fields: Any) -> dict[str, Any]:
    """What stack.json records of a server just started: its pid and port, when, and ``fields``."""
    return {**fields, "pid": pid, "port": port, "started_at": _now()}
