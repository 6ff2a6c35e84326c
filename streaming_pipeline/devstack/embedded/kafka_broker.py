"""A real single-node Apache Kafka broker (KRaft, combined broker+controller) run from its Maven jars.

    broker = EmbeddedKafkaBroker(tmp_path / "kafka")   # free ports on 127.0.0.1
    broker.start()                                     # blocks until it answers
    ... Producer({"bootstrap.servers": broker.bootstrap_servers}) ...
    broker.stop()

Layout of ``data_dir``: ``server.properties``, ``log4j2.xml``, ``cluster.id`` and
``data/`` (the Kafka log dir, formatted once and kept across restarts). The
broker log (``kafka.log``, log4j2) and the process output (``kafka.out``:
JVM messages and broker errors) go to ``log_dir`` (default: ``data_dir``).
"""

from __future__ import annotations

import base64
import logging
import subprocess
import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Self

from streaming_pipeline.devstack.embedded.ports import LOOPBACK, free_ports, port_accepts
from streaming_pipeline.devstack.embedded.processes import ManagedProcess, log_header, output_since_last_start, tail
from streaming_pipeline.devstack.embedded.secure import (
    KAFKA_BROKER_USER,
    KAFKA_CLIENT_USER,
    SCRAM_MECHANISM,
    SecureMaterial,
    write_private,
)
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline.lakehouse.engine import jars
from streaming_pipeline.lakehouse.engine.java import find_java

DEFAULT_HEAP = "512m"
NODE_ID = 1

_probe_logger = logging.getLogger("streaming_pipeline.devstack.embedded.kafka_probe")
_probe_logger.addHandler(logging.NullHandler())
_probe_logger.propagate = False


def new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID, base64url without padding (22 chars), not starting with '-'."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def stored_cluster_id(data_dir: Path) -> str:
    """The cluster id kept in ``data_dir/cluster.id``: made there the first time (every node of a cluster is
    formatted with the first node's)."""
    meta = _read_properties(data_dir / "data" / "meta.properties")
    if meta.get("cluster.id"):
        return meta["cluster.id"]
    id_file = data_dir / "cluster.id"
    try:
        existing = id_file.read_text().strip()
    except OSError:
        existing = ""
    if existing:
        return existing
    cluster_id = new_cluster_id()
    data_dir.mkdir(parents=True, exist_ok=True)
    id_file.write_text(cluster_id + "\n")
    return cluster_id


def _read_properties(path: Path) -> dict[str, str]:
    result: dict[str, str] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return result
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, value = line.split("=", 1)
        result[key.strip()] = value.strip()
    return result


class EmbeddedKafkaBroker(ManagedProcess):
    """One Kafka broker process (KRaft combined mode: broker and controller) listening on ``host`` only.

    ``secure``: its client listener is SASL_SSL (SCRAM-SHA-512 users made when its storage is formatted, TLS with
    the stack's certificates, client certificates required) instead of PLAINTEXT. ``node_id``, ``quorum_voters``,
    ``cluster_id`` and ``replicas`` make it one node of a cluster of ``replicas`` nodes: topics are then replicated
    to all of them, and a write needs two in sync."""

    title = "the Kafka broker"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        controller_port: int | None = None,
        host: str = LOOPBACK,
        *,
        log_dir: Path | None = None,
        heap: str = DEFAULT_HEAP,
        extra_properties: Mapping[str, str] | None = None,
        jvm_options: Sequence[str] = (),
        progress: Callable[[str], None] | None = None,
        secure: SecureMaterial | None = None,
        node_id: int = NODE_ID,
        quorum_voters: str | None = None,
        cluster_id: str | None = None,
        replicas: int = 1,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        taken = [p for p in (port, controller_port) if p]
        needed = [p is None for p in (port, controller_port)].count(True)
        fresh = iter(free_ports(needed, host, exclude=taken)) if needed else iter(())
        self.port: int = port if port is not None else next(fresh)
        self.controller_port: int = controller_port if controller_port is not None else next(fresh)
        if self.port == self.controller_port:
            raise StackError(f"the Kafka broker and controller ports must differ (both are {self.port})")
        self.log_dir = Path(log_dir).resolve() if log_dir else self.data_dir
        self.heap = heap
        self.extra_properties = dict(extra_properties or {})
        self.jvm_options = list(jvm_options)
        self._progress = progress
        self.secure = secure
        self.node_id = node_id
        self.quorum_voters = quorum_voters or f"{node_id}@{self.host}:{self.controller_port}"
        self.given_cluster_id = cluster_id
        self.replicas = replicas

    # ------------------------------------------------------------------ properties

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        """The broker's log4j2 log."""
        return self.log_dir / "kafka.log"

    @property
    def output_file(self) -> Path:
        """The process's stdout/stderr: JVM messages and broker errors."""
        return self.log_dir / "kafka.out"

    @property
    def properties_file(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def kafka_log_dir(self) -> Path:
        """Where Kafka keeps topic data and the KRaft metadata log (``log.dirs``)."""
        return self.data_dir / "data"

    # ------------------------------------------------------------------ config

    @property
    def listener(self) -> str:
        """The client listener's name and security protocol."""
        return "SASL_SSL" if self.secure else "PLAINTEXT"

    def server_properties(self) -> dict[str, str]:
        replicas, in_sync = str(self.replicas), str(min(2, self.replicas))
        listener = self.listener
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.quorum_voters,
            "listeners": f"{listener}://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"{listener}://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": listener,
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{listener}:{listener}",
            "log.dirs": str(self.kafka_log_dir),
            "num.partitions": "2",
            "default.replication.factor": replicas,
            "min.insync.replicas": in_sync,
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": in_sync,
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": in_sync,
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "log.retention.hours": "168",
        }
        if self.secure is not None:
            props.update(self._secure_properties(self.secure))
        props.update(self.extra_properties)
        return props

    @staticmethod
    def _secure_properties(secure: SecureMaterial) -> dict[str, str]:
        password = secure.passwords().kafka_broker
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{KAFKA_BROKER_USER}" password="{password}";'
        )
        return {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": jaas,
            # PEM files, no store passwords: the key is unencrypted PKCS#8 in a file only its owner reads.
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(secure.server_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(secure.ca_file),
            # For a SASL_SSL listener only its own setting asks clients for a certificate (mutual TLS).
            "listener.name.sasl_ssl.ssl.client.auth": "required",
        }

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        lines = ["# Written by streaming_pipeline.devstack.embedded.kafka_broker at each start; edits are overwritten."]
        lines += [f"{key}={value}" for key, value in self.server_properties().items()]
        write_private(self.properties_file, "\n".join(lines) + "\n")  # a secured broker's password is in it
        config = resources.files("streaming_pipeline.devstack.embedded").joinpath("kafka-log4j2.xml").read_text()
        (self.data_dir / "log4j2.xml").write_text(config)

    def cluster_id(self) -> str:
        """The cluster id its storage is (or will be) formatted with: the given one, else its own (``cluster.id``)."""
        meta = _read_properties(self.kafka_log_dir / "meta.properties")
        return meta.get("cluster.id") or self.given_cluster_id or stored_cluster_id(self.data_dir)

    def _java_command(self, java: Path, classpath: list[Path], main_class: str, *args: str) -> list[str]:
        return [
            str(java),
            "-Xms64m",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            # C1 only: ~40% faster start-up; a local development broker needs no peak JIT throughput.
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            *self.jvm_options,
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.xml'}",
            f"-Dstreaming_pipeline.kafka.log.file={self.log_file}",
            f"-Dkafka.logs.dir={self.log_dir}",
            "-cp",
            ":".join(str(jar) for jar in classpath),
            main_class,
            *args,
        ]

    def _format_storage(self, java: Path, classpath: list[Path]) -> None:
        """Format the log dir once (KRaft needs it); an already formatted dir is left alone."""
        if (self.kafka_log_dir / "meta.properties").is_file():
            return
        cluster_id = self.cluster_id()
        self._say(f"Formatting Kafka storage in {self.kafka_log_dir} (cluster id {cluster_id})")
        arguments = ["format", "--cluster-id", cluster_id, "--config", str(self.properties_file), "--ignore-formatted"]
        if self.secure is not None:  # the SCRAM users, from a file only its owner reads: no password in `ps`
            passwords = self.secure.passwords()
            for user, password in (
                (KAFKA_CLIENT_USER, passwords.kafka_client),
                (KAFKA_BROKER_USER, passwords.kafka_broker),
            ):
                arguments += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        arguments_file = self.data_dir / "format-arguments"
        write_private(arguments_file, "\n".join(arguments) + "\n")
        command = self._java_command(java, classpath, jars.STORAGE_TOOL_CLASS, f"@{arguments_file}")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise StackError(f"could not format the Kafka storage in {self.kafka_log_dir}: {exc}") from exc
        finally:
            arguments_file.unlink(missing_ok=True)
        output = (done.stdout or "") + (done.stderr or "")
        with open(self.output_file, "a") as out:
            out.write(log_header("kafka storage format") + output)
        if done.returncode != 0:
            last = "\n".join(output.strip().splitlines()[-15:])
            raise StackError(
                f"formatting the Kafka storage in {self.kafka_log_dir} failed (exit code {done.returncode}); "
                f"output in {self.output_file}.\nLast lines:\n{last}"
            )

    # ------------------------------------------------------------------ lifecycle

    def _say(self, message: str) -> None:
        if self._progress is not None:
            self._progress(message)

    def _check_ports(self) -> None:
        for role, port in (("client (PLAINTEXT)", self.port), ("controller", self.controller_port)):
            self._check_port_free(port, f" (its {role} listener)")

    def start(self, timeout: float = 90.0) -> Self:
        """Start the broker (formatting its storage the first time) and wait until it answers.

        Raises JavaNotFoundError, ArtifactResolutionError, or StackError naming the
        log file when the process exits or is not ready within ``timeout`` seconds.
        """
        if self.running:
            return self
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the process without waiting: the nodes of a cluster answer only once a majority of them runs."""
        java = find_java()
        self._check_ports()
        classpath = jars.broker_classpath(progress=self._progress or jars._stderr_progress)
        self._write_config()
        self._format_storage(java, classpath)
        command = self._java_command(java, classpath, jars.BROKER_MAIN_CLASS, str(self.properties_file))
        label = f"kafka.Kafka {self.properties_file} (Kafka {jars.KAFKA_VERSION})"
        self._launch(command, cwd=self.data_dir, label=label)

    def client_config(self) -> dict[str, str]:
        """librdkafka's settings for a client of this broker (a secured one's user, password and files)."""
        config = {"bootstrap.servers": self.bootstrap_servers}
        if self.secure is not None:
            config.update(self.secure.librdkafka_config())
        return config

    def _readiness_probe(self) -> Callable[[], bool]:
        """True once the broker lists itself in the cluster metadata (asked once its port accepts connections)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin: AdminClient | None = None

        def ready() -> bool:
            nonlocal admin
            if not port_accepts(self.port, self.host):
                return False
            if admin is None:
                admin = AdminClient(
                    {
                        **self.client_config(),
                        "socket.connection.setup.timeout.ms": 2000,
                        # confluent-kafka's stubs type config values as str | int | float, but "logger"
                        # takes a logging.Logger (documented in its configuration)
                        "logger": _probe_logger,  # type: ignore[dict-item]
                    }
                )
            try:
                return self.node_id in admin.list_topics(timeout=2).brokers
            except KafkaException:
                return False

        return ready

    def _not_ready_in_time(self, timeout: float) -> str:
        return f"did not answer on {self.bootstrap_servers} in time"

    def _logs(self) -> str:
        return f"{self.log_file} (process output: {self.output_file})"

    def _last_lines(self) -> str:
        """The process output since its start (JVM messages, broker errors), else the end of the broker log."""
        output = output_since_last_start(self.output_file, 15)
        return output if output.strip() else tail(self.log_file, 15)

    def _described(self) -> tuple[object, ...]:
        return (self.bootstrap_servers, self.data_dir)
