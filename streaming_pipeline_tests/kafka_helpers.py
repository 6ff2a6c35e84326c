"""Helpers for the fault-injection tests: raw Kafka I/O, offsets, Delta log inspection, CSV writing.

Each Kafka helper takes the cluster as its bootstrap servers (a plain one) or as a KafkaResource (any, a secured
one too: `clients_of(stack)`)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.serialization import MessageField, SerializationContext

from streaming_pipeline.devstack.embedded.stack import StackInfo
from streaming_pipeline.lakehouse.registry_client import RegistryClient
from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline.resources import KafkaResource
from streaming_pipeline.resources.from_settings import build_resources, resolved

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO_ROOT / "schemas"


Cluster = str | KafkaResource  # bootstrap servers, or the resource with the whole connection


@contextlib.contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """`values` in os.environ while the block runs (a secured stack's settings and secrets), as before after it."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def clients_of(stack: StackInfo) -> tuple[KafkaResource, RegistryClient]:
    """The stack's Kafka and registry as the code location's settings make them (a secured stack's passwords
    read from its `stack env`), for a test to talk to them directly."""
    resources = build_resources(PipelineSettings.from_env(stack.env()))
    with environ(stack.secure_env):
        return resolved(resources["kafka"]), resolved(resources["schema_registry"]).get_client()


def clear_registry(registry: RegistryClient) -> None:
    """Delete every subject of the registry for good (a soft delete first, as the registry API requires), so that
    their versions start from 1 again; schema ids go on counting."""
    client = registry.client()
    for subject in client.get_subjects(deleted=True):
        client.delete_subject(subject)
        client.delete_subject(subject, permanent=True)


def _config(cluster: Cluster) -> dict[str, Any]:
    return {"bootstrap.servers": cluster} if isinstance(cluster, str) else cluster.client_config()


def end_offsets(cluster: Cluster, topic: str, timeout: float = 15.0) -> dict[int, int]:
    """High watermark of every partition of `topic`, read with a plain confluent-kafka consumer."""
    consumer = Consumer({**_config(cluster), "group.id": "faults-offset-probe"})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(metadata.topics[topic].partitions)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def all_coordinates(topic: str, offsets: Mapping[int, int]) -> set[tuple[str, int, int]]:
    """Every (topic, partition, offset) below the end offsets (offsets start at 0: nothing was deleted)."""
    return {(topic, p, o) for p, end in offsets.items() for o in range(end)}


def produce_raw(
    cluster: Cluster,
    topic: str,
    messages: Sequence[tuple[bytes | None, bytes | None]],
    partition: int | None = None,
) -> list[tuple[int, int]]:
    """Send raw key/value bytes; return the (partition, offset) each one was written to, in order."""
    producer = Producer({**_config(cluster), "acks": "all", "enable.idempotence": True})
    delivered: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(index: int):
        def callback(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                delivered[index] = (msg.partition(), msg.offset())

        return callback

    for index, (key, value) in enumerate(messages):
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery(index)}
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
    assert producer.flush(30) == 0, "records still undelivered after 30 s"
    assert not errors, errors
    return [delivered[i] for i in range(len(messages))]


def avro_frame(
    registry_resource: Any, schema_str: str, datum: Any, topic: str, field: MessageField = MessageField.VALUE
) -> bytes:
    """Confluent wire-format bytes of `datum` (a record or, for keys, a plain value); the schema must be registered."""
    return registry_resource.serializer(schema_str)(datum, SerializationContext(topic, field))


def delta_log_versions(table_path: str | Path) -> list[int]:
    """Versions with a commit file in the table's _delta_log (empty when the table does not exist)."""
    log_dir = Path(str(table_path).removeprefix("file:")) / "_delta_log"
    if not log_dir.is_dir():
        return []
    return sorted(int(p.name.split(".")[0]) for p in log_dir.glob("*.json") if p.name.split(".")[0].isdigit())


def delete_topics(cluster: Cluster, topics: Sequence[str], timeout: float = 30.0) -> None:
    """Delete `topics` and wait until the broker lists none of them, so that topics of the same names can be
    created again (AssertionError when one is still listed after `timeout` s)."""
    if not topics:
        return
    admin = AdminClient(_config(cluster))
    for future in admin.delete_topics(list(topics), operation_timeout=timeout).values():
        future.result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while set(topics) & set(admin.list_topics(timeout=timeout).topics):
        if time.monotonic() > deadline:
            raise AssertionError(f"topics {sorted(topics)} still listed {timeout:.0f}s after they were deleted")
        time.sleep(0.1)


def delete_every_topic(cluster: Cluster, timeout: float = 30.0) -> None:
    """Delete every topic but Kafka's own (`__consumer_offsets`): what a test on the session's broker leaves."""
    admin = AdminClient(_config(cluster))
    listed = admin.list_topics(timeout=timeout).topics
    delete_topics(cluster, [name for name in listed if not name.startswith("__")], timeout)
