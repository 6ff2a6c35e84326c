"""Kafka resource: producer, consumer and admin clients from one set of connection settings."""

from __future__ import annotations

import logging
import time
from typing import Any

import dagster as dg
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pydantic import Field

from streaming_pipeline.errors import BrokerUnavailableError, ConfigurationError

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
        return options

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

    def admin(self) -> AdminClient:
        # confluent-kafka's stubs type config values as str | int | float, but "logger" takes a logging.Logger
        return AdminClient({**self.client_config(), "logger": _LIBRDKAFKA_LOG})  # type: ignore[dict-item]

    def topic_partitions(self, topic: str) -> list[int]:
        """Partition ids of `topic`; empty when the topic does not exist. Bounded by timeout_seconds.

        Asks for the metadata of all topics: a request naming one topic makes a broker with
        `auto.create.topics.enable` create it, with the broker's default partitions, so a sensor polling a topic
        nobody produced to yet would create it (and could see its leader not elected yet).
        """
        admin = self.admin()
        try:
            metadata = admin.list_topics(timeout=self.timeout_seconds)
        except KafkaException as exc:
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
        replication_factor: int = 1,
        retention_ms: int | None = None,
        cleanup_policy: str | None = None,
    ) -> bool:
        """Create `topic` when absent; return True when it was created."""
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
