"""Shared fixtures: the Spark session, the sample data, and (for integration tests) the embedded stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def rides_csv() -> Path:
    """The real NYC TLC sample (266 rides), read in place; tests using it skip cleanly when absent."""
    path = SHARED_DATA / "rides.csv"
    if not path.is_file():
        pytest.skip(f"sample data not found at {path}")
    return path


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local SparkSession for the whole test session: Delta, Kafka and Avro jars, UTC, UI off."""
    from streaming_pipeline.resources.spark import SparkResource

    resource = SparkResource(
        stop_on_teardown=False,
        conf={"spark.master": "local[2]", "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"},
    )
    session = resource.get_session()
    yield session
    session.stop()
