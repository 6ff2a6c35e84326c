"""Kafka resource: producer, consumer and admin clients from one set of connection settings."""

from __future__ import annotations

import logging
import time
from typing import Any

import dagster as dg
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pydantic import Field

from streaming_pipeline.lakehouse.errors import BrokerUnavailableError, ConfigurationError, CredentialsError

_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# The admin and consumer clients' own log lines. They only ask (metadata, offsets), and every failure reaches the
# caller as a KafkaException, which the methods below turn into BrokerUnavailableError; on stderr, librdkafka
# would add a line for every try to reach a broker that is away, every 50 to 100 ms: 400 lines in a 20 s outage
# for the two reports of a continuous run, in its compute log and in `dagster dev`'s output.
_LIBRDKAFKA_LOG = logging.getLogger("streaming_pipeline.resources.kafka.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_LIBRDKAFKA_LOG.propagate = False

# What a partition answers for the moment its leader is being elected (a topic just created, a broker restarted).
_LEADER_ELECTION = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})


# What librdkafka reports, through its error callback only, when the cluster refuses this client: asking again
# cannot help, so these fail at once instead of when the timeout runs out.
_SASL_REFUSED = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
# A broker that closes the connection at the client's first request, again and again, is one whose listener wants
# TLS or SASL of a client that speaks plain Kafka: librdkafka says so only in its log.
_CLOSED_AT_FIRST_REQUEST = "in state APIVERSION_QUERY"
_CLOSED_TIMES = 3


class _Refusals(logging.Handler):
    """A client's error callback and log handler: keeps the first sign that the cluster refused this client, as
    (what was refused: 'sasl', 'tls' or 'protocol', librdkafka's words); librdkafka goes on trying, and its
    exceptions say only that nothing answered."""

    def __init__(self) -> None:
        super().__init__()
        self.first: tuple[str, str] | None = None
        self._closed = 0

    def __call__(self, error: KafkaError) -> None:
        if self.first is None and error.code() in _SASL_REFUSED:
            self.first = ("sasl", error.str())
        elif self.first is None and error.code() == KafkaError._SSL:
            self.first = ("tls", error.str())
        elif self.first is None and error.code() == KafkaError._TRANSPORT and "SSL routines" in error.str():
            self.first = ("tls", error.str())  # the broker's TLS alert: e.g. no client certificate, mutual TLS

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Disconnected" in message and _CLOSED_AT_FIRST_REQUEST in message:
            self._closed += 1
            if self.first is None and self._closed >= _CLOSED_TIMES:
                self.first = ("protocol", message.split(": ", 1)[-1])

    def logger(self) -> logging.Logger:
        """A logger of this client alone, whose records reach this handler only."""
        logger = logging.Logger("streaming_pipeline.resources.kafka.librdkafka")
        logger.addHandler(self)
        return logger


def _jaas_quoted(value: str) -> str:
    """`value` as a quoted string of a JAAS line: Kafka's parser (java.io.StreamTokenizer) reads a backslash as an
    escape there, so a backslash or a double quote in a secret is escaped, not the end of it."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class KafkaResource(dg.ConfigurableResource):
    """Connection to a Kafka cluster (embedded broker, compose, or Confluent Cloud via SASL_SSL).

    Secrets (the SASL password) are meant to come from `dg.EnvVar` and are never logged.
    """

    bootstrap_servers: str = Field(description="Comma-separated host:port list.")
    security_protocol: str = Field(default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.")
    sasl_mechanism: str | None = Field(default=None, description="e.g. PLAIN (Confluent Cloud), SCRAM-SHA-512.")
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_ca_location: str | None = Field(
        default=None,
        description="KAFKA_SSL_CA_LOCATION: the CA file (PEM) that signed the brokers' certificates; the system's CAs "
        "when unset.",
    )
    ssl_keystore_location: str | None = Field(
        default=None,
        description="KAFKA_SSL_KEYSTORE_LOCATION: for mutual TLS, one PEM file with the client's private key "
        "(unencrypted) and its certificate chain.",
    )
    timeout_seconds: float = Field(default=10.0, description="Bound on metadata and offset requests.")

    def _check(self) -> None:
        if self.security_protocol.upper() not in _SECURITY_PROTOCOLS:
            raise ConfigurationError(
                f"Kafka security_protocol={self.security_protocol!r} is not one of {', '.join(_SECURITY_PROTOCOLS)}"
            )

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings shared by every client."""
        self._check()
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol.upper(),
        }
        if self.sasl_mechanism:
            config["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            config["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            config["sasl.password"] = self.sasl_password
        if self.ssl_ca_location:
            config["ssl.ca.location"] = self.ssl_ca_location
        if self.ssl_keystore_location:  # one file: librdkafka reads the certificates and the key from it
            config["ssl.certificate.location"] = config["ssl.key.location"] = self.ssl_keystore_location
        return config

    def spark_options(self) -> dict[str, str]:
        """The same connection as options of Spark's Kafka source (`kafka.`-prefixed Java client settings)."""
        self._check()
        options = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "kafka.security.protocol": self.security_protocol.upper(),
        }
        if self.sasl_mechanism:
            options["kafka.sasl.mechanism"] = self.sasl_mechanism
            if self.sasl_username is not None and self.sasl_password is not None:
                login_module = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule"
                    if self.sasl_mechanism.upper().startswith("SCRAM")
                    else "org.apache.kafka.common.security.plain.PlainLoginModule"
                )
                username, password = _jaas_quoted(self.sasl_username), _jaas_quoted(self.sasl_password)
                options["kafka.sasl.jaas.config"] = f"{login_module} required username={username} password={password};"
        if self.ssl_ca_location:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = self.ssl_ca_location
        if self.ssl_keystore_location:
            options["kafka.ssl.keystore.type"] = "PEM"
            options["kafka.ssl.keystore.location"] = self.ssl_keystore_location
        return options

    def refused(self, what: str, reason: str) -> CredentialsError:
        """What to tell when the cluster refused this client (`what`: 'sasl', 'tls' or 'protocol'; `reason`:
        librdkafka's words): the settings to fix, never a secret."""
        where = f"Kafka at {self.bootstrap_servers}"
        if what == "tls":
            return CredentialsError(
                f"the TLS handshake with {where} failed: check KAFKA_SSL_CA_LOCATION (the CA that signed the brokers' "
                f"certificates), KAFKA_SSL_KEYSTORE_LOCATION for mutual TLS, and "
                f"KAFKA_SECURITY_PROTOCOL={self.security_protocol} ({reason})"
            )
        if what == "protocol":
            return CredentialsError(
                f"{where} closes the connection at the first request: does its listener want TLS or SASL? Check "
                f"KAFKA_SECURITY_PROTOCOL={self.security_protocol}, and for mutual TLS KAFKA_SSL_KEYSTORE_LOCATION "
                f"({reason})"
            )
        return CredentialsError(
            f"{where} refused the SASL credentials: check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD and "
            f"KAFKA_SASL_MECHANISM={self.sasl_mechanism} ({reason})"
        )

    def producer(self, **overrides: Any) -> Producer:
        return Producer({**self.client_config(), **overrides})

    def consumer(self, group_id: str, **overrides: Any) -> Consumer:
        config = {
            **self.client_config(),
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "logger": _LIBRDKAFKA_LOG,
            **overrides,
        }
        return Consumer(config)

    def admin(self, refusals: _Refusals | None = None) -> AdminClient:
        config: dict[str, Any] = {**self.client_config(), "logger": _LIBRDKAFKA_LOG}
        if refusals is not None:
            config.update(error_cb=refusals, logger=refusals.logger())
        return AdminClient(config)

    def topic_partitions(self, topic: str) -> list[int]:
        """Partition ids of `topic`; empty when the topic does not exist. Bounded by timeout_seconds.

        Asks for the metadata of all topics: a request naming one topic makes a broker with
        `auto.create.topics.enable` create it, with the broker's default partitions, so a sensor polling a topic
        nobody produced to yet would create it (and could see its leader not elected yet).
        """
        refusals = _Refusals()
        admin = self.admin(refusals)
        deadline = time.monotonic() + self.timeout_seconds
        while True:
            try:
                metadata = admin.list_topics(timeout=min(1.0, max(deadline - time.monotonic(), 0.1)))
                break
            except KafkaException as exc:
                admin.poll(0)  # serves the error callback and the log
                if refusals.first is not None:
                    raise self.refused(*refusals.first) from None
                if time.monotonic() >= deadline:
                    raise BrokerUnavailableError(
                        f"Kafka at {self.bootstrap_servers} did not answer within {self.timeout_seconds:g} s: {exc}"
                    ) from exc
        topic_metadata = metadata.topics.get(topic)
        if topic_metadata is None:
            return []
        if topic_metadata.error is not None:
            if topic_metadata.error.code() not in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
            ):
                raise BrokerUnavailableError(f"Kafka metadata for topic {topic!r}: {topic_metadata.error}")
            return []
        return sorted(topic_metadata.partitions)

    def ensure_topic(
        self,
        topic: str,
        *,
        partitions: int = 2,
        replication_factor: int = -1,
        retention_ms: int | None = None,
        cleanup_policy: str | None = None,
    ) -> bool:
        """Create `topic` when absent; return True when it was created. Its replication factor is the cluster's
        (`default.replication.factor`) unless given."""
        if self.topic_partitions(topic):
            return False
        topic_config: dict[str, str] = {}
        if retention_ms is not None:
            topic_config["retention.ms"] = str(retention_ms)
        if cleanup_policy is not None:
            topic_config["cleanup.policy"] = cleanup_policy
        admin = self.admin()  # keep a reference: the futures die with the client
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=topic_config)],
            operation_timeout=self.timeout_seconds,
            request_timeout=self.timeout_seconds,
        )
        try:
            futures[topic].result(timeout=self.timeout_seconds)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise BrokerUnavailableError(
                f"could not create topic {topic!r} on {self.bootstrap_servers}: {exc}"
            ) from exc
        return True

    def record_timestamps(self, topic: str, offsets: dict[int, int]) -> dict[int, float]:
        """Kafka timestamp (epoch seconds) of the record at `offsets[partition]`, for each partition
        where that record can be read within timeout_seconds."""
        if not offsets:
            return {}
        consumer = self.consumer(group_id="streaming-pipeline-offset-probe", **{"enable.partition.eof": False})
        try:
            consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
            found: dict[int, float] = {}
            deadline = time.monotonic() + self.timeout_seconds
            while len(found) < len(offsets) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None or message.error() is not None:
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None  # set on every record without error
                if partition not in found and offset >= offsets[partition]:
                    found[partition] = message.timestamp()[1] / 1000
                    consumer.pause([TopicPartition(topic, partition)])
            return found
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"could not read {topic} at {offsets} from {self.bootstrap_servers}: {exc}"
            ) from exc
        finally:
            consumer.close()

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Next offset to be written (high watermark) per partition of `topic`; {} when it does not exist."""
        return {partition: high for partition, (_, high) in self.watermark_offsets(topic).items()}

    def watermark_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """(earliest offset still kept, next offset to be written) per partition; {} when the topic does not exist."""
        partitions = self.topic_partitions(topic)
        if not partitions:
            return {}
        consumer = self.consumer(group_id="streaming-pipeline-offset-probe")
        try:
            offsets: dict[int, tuple[int, int]] = {}
            deadline = time.monotonic() + self.timeout_seconds
            for partition in partitions:
                while True:
                    try:
                        low, high = consumer.get_watermark_offsets(
                            TopicPartition(topic, partition), timeout=self.timeout_seconds, cached=False
                        )
                        break
                    except KafkaException as exc:
                        # While its leader is being elected, within the timeout: ask again.
                        if exc.args and exc.args[0].code() in _LEADER_ELECTION and time.monotonic() < deadline:
                            time.sleep(0.2)
                            continue
                        raise BrokerUnavailableError(
                            f"could not read the offsets of {topic}[{partition}] from {self.bootstrap_servers}: {exc}"
                        ) from exc
                offsets[partition] = (low, high)
            return offsets
        finally:
            consumer.close()

    def offsets_for_time(self, topic: str, epoch_ms: int) -> dict[int, int]:
        """Per partition, the first offset whose record timestamp is at or after `epoch_ms` (the end offset when
        there is none)."""
        watermarks = self.watermark_offsets(topic)
        consumer = self.consumer(group_id="streaming-pipeline-offset-probe")
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, epoch_ms) for p in watermarks], timeout=self.timeout_seconds
            )
        except KafkaException as exc:
            raise BrokerUnavailableError(f"could not look up {topic} offsets at {epoch_ms} ms: {exc}") from exc
        finally:
            consumer.close()
        return {tp.partition: (tp.offset if tp.offset >= 0 else watermarks[tp.partition][1]) for tp in found}
