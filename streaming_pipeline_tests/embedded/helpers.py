"""Small Kafka client helpers for the embedded-stack tests."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer

FAKE_REGISTRY_MODULE = "streaming_pipeline_tests.embedded.fake_registry"


def produce(bootstrap_servers: str, topic: str, messages: list[tuple[str, str]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all"})
    errors: list[str] = []

    def on_delivery(err, _msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))

    for key, value in messages:
        producer.produce(topic, key=key.encode(), value=value.encode(), on_delivery=on_delivery)
    assert producer.flush(30) == 0, "messages still unsent after 30 s"
    assert not errors, errors


def consume(bootstrap_servers: str, topic: str, count: int, timeout: float = 30.0) -> list[tuple[str, str]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.key().decode(), msg.value().decode()))
    finally:
        consumer.close()
    return got
