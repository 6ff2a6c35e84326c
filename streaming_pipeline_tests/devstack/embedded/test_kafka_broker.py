"""A real Kafka broker (KRaft) on free ports under tmp_path."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming_pipeline.devstack.embedded.kafka_broker import EmbeddedKafkaBroker
from streaming_pipeline.devstack.embedded.processes import pid_alive
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline.lakehouse.errors import JavaNotFoundError
from streaming_pipeline_tests.devstack.embedded.helpers import consume, produce


@pytest.fixture
def brokers() -> Iterator[list[EmbeddedKafkaBroker]]:
    """Brokers a test appends here are always stopped."""
    started: list[EmbeddedKafkaBroker] = []
    yield started
    for broker in started:
        broker.stop(timeout=10)


@pytest.fixture
def bound_socket() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock
    sock.close()


@pytest.mark.integration
@pytest.mark.slow
def test_data_survives_restart(tmp_path: Path, brokers: list[EmbeddedKafkaBroker]) -> None:
    data_dir = tmp_path / "kafka"
    broker = EmbeddedKafkaBroker(data_dir)
    brokers.append(broker)
    broker.start()
    assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
    assert broker.pid and pid_alive(broker.pid)
    props = broker.properties_file.read_text()
    assert f"listeners=PLAINTEXT://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{broker.controller_port}" in props
    assert "process.roles=broker,controller" in props
    cluster_id = (data_dir / "cluster.id").read_text().strip()

    messages = [(f"k{i}", f"value-{i}") for i in range(5)]
    produce(broker.bootstrap_servers, "orders", messages)
    pid = broker.pid
    broker.stop()
    assert not pid_alive(pid)
    # the log4j2 backend works: the broker wrote its log
    assert "Kafka Server started" in broker.log_file.read_text()

    again = EmbeddedKafkaBroker(data_dir, port=broker.port)
    brokers.append(again)
    again.start()
    assert again.pid != pid
    got = consume(again.bootstrap_servers, "orders", len(messages))
    assert sorted(got) == sorted(messages)
    # formatted once: same cluster id, one format in the process output
    assert (data_dir / "cluster.id").read_text().strip() == cluster_id
    assert f"cluster.id={cluster_id}" in (data_dir / "data" / "meta.properties").read_text()
    assert again.output_file.read_text().count("kafka storage format") == 1
    again.stop()
    assert not again.running


def test_missing_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    broker = EmbeddedKafkaBroker(tmp_path / "kafka")
    with pytest.raises(JavaNotFoundError) as caught:
        broker.start()
    message = str(caught.value)
    assert "Java 17+" in message
    assert "JAVA_HOME" in message and "PATH" in message
    assert broker.pid is None


def test_port_in_use(tmp_path: Path, bound_socket: socket.socket) -> None:
    port = bound_socket.getsockname()[1]
    broker = EmbeddedKafkaBroker(tmp_path / "kafka", port=port)
    with pytest.raises(StackError, match=rf"port {port}\b"):
        broker.start()
    assert broker.pid is None


def test_controller_port_in_use(tmp_path: Path, bound_socket: socket.socket) -> None:
    port = bound_socket.getsockname()[1]
    broker = EmbeddedKafkaBroker(tmp_path / "kafka", controller_port=port)
    with pytest.raises(StackError, match=rf"port {port}\b.*controller"):
        broker.start()


@pytest.mark.integration
def test_start_failure_points_at_log(tmp_path: Path, brokers: list[EmbeddedKafkaBroker]) -> None:
    broker = EmbeddedKafkaBroker(tmp_path / "kafka", extra_properties={"num.io.threads": "not-a-number"})
    brokers.append(broker)
    with pytest.raises(StackError) as caught:
        broker.start(timeout=60)
    message = str(caught.value)
    assert str(tmp_path / "kafka") in message  # names the log / output file
    assert "not-a-number" in message  # and shows the cause from its last lines
    assert broker.pid is None or not pid_alive(broker.pid)
