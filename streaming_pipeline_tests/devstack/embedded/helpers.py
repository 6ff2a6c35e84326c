"""Small helpers for the embedded-stack tests: Kafka clients, and the processes left behind."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer

from streaming_pipeline.devstack.embedded.processes import pid_alive, process_command_line

FAKE_REGISTRY_MODULE = "streaming_pipeline_tests.devstack.embedded.fake_registry"


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


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes (other than this one) whose command line contains ``text``: (pid, command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and pid_alive(int(entry.name)):
            command = process_command_line(int(entry.name)) or ""
            if text in command:
                found.append((int(entry.name), command[:200]))
    return found
