"""`bronze.ingestion.bronze_query` without an engine: building the query asks nothing of Kafka; each start of it
creates the topic and checks table, checkpoint and topic, so a broker that is away fails the start (which the
continuous mode retries with back-off), never the building of a continuous run's queries."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_pipeline.lakehouse.bronze.ingestion import bronze_query
from streaming_pipeline.lakehouse.errors import BrokerUnavailableError
from streaming_pipeline.lakehouse.tables import RIDES
from streaming_pipeline.resources import LakehouseResource


class BrokerAway:
    """A Kafka connection whose broker does not answer; it counts what was asked of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def ensure_topic(self, topic: str, *, cleanup_policy: str | None = None) -> bool:
        self.calls.append(f"ensure_topic {topic}")
        raise BrokerUnavailableError(f"Kafka at 127.0.0.1:1 did not answer within 10 s (creating {topic})")

    def spark_options(self) -> dict[str, str]:
        self.calls.append("spark_options")
        return {"kafka.bootstrap.servers": "127.0.0.1:1"}

    def watermark_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        self.calls.append(f"watermark_offsets {topic}")
        raise BrokerUnavailableError("Kafka at 127.0.0.1:1 did not answer within 10 s")


class Registry:
    url = "http://127.0.0.1:1"
    basic_auth_user_info = None
    ssl_ca_location = None
    ssl_keystore_location = None


def test_building_a_bronze_query_asks_nothing_of_kafka_and_each_start_checks_the_topic(tmp_path: Path) -> None:
    kafka = BrokerAway()
    query = bronze_query(
        None,  # type: ignore[arg-type]  # the session is used by start_writer only, which fails before it
        kafka,
        Registry(),
        LakehouseResource(root=str(tmp_path)),
        source=RIDES,
    )
    assert (query.name, kafka.calls) == ("raw_rides", [])

    for attempt in (1, 2):
        with pytest.raises(BrokerUnavailableError, match="did not answer"):
            query.start_writer()
        assert kafka.calls == ["ensure_topic rides"] * attempt
