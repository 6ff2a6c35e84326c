"""Shared fixtures: the Spark session, the sample data, and (for integration tests) the embedded stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# The TLC CSV header of rides.csv -> the raw_rides column it becomes (DESIGN section 4), written out here so
# that tests compute their expectations independently of the package's own CSV reader.
TLC_RIDE_COLUMNS = {
    "VendorID": "vendor_id",
    "tpep_pickup_datetime": "pickup_datetime",
    "tpep_dropoff_datetime": "dropoff_datetime",
    "passenger_count": "passenger_count",
    "trip_distance": "trip_distance",
    "RatecodeID": "rate_code_id",
    "store_and_fwd_flag": "store_and_fwd_flag",
    "PULocationID": "pu_location_id",
    "DOLocationID": "do_location_id",
    "payment_type": "payment_type",
    "fare_amount": "fare_amount",
    "extra": "extra",
    "mta_tax": "mta_tax",
    "tip_amount": "tip_amount",
    "tolls_amount": "tolls_amount",
    "improvement_surcharge": "improvement_surcharge",
    "total_amount": "total_amount",
    "congestion_surcharge": "congestion_surcharge",
}


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
    from streaming_pipeline.engine.spark import SparkResource

    resource = SparkResource(
        stop_on_teardown=False,
        conf={"spark.master": "local[2]", "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"},
    )
    session = resource.get_session()
    yield session
    session.stop()


SPARK_TEST_CONF = {"spark.master": "local[2]", "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"}


@pytest.fixture()
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A fresh embedded Kafka broker + schema registry on free ports, stopped after the test."""
    from streaming_pipeline.embedded.stack import running_stack

    with running_stack(tmp_path_factory.mktemp("stack"), spark=False) as info:
        yield info


@pytest.fixture()
def lakehouse_dir(tmp_path: Path) -> Path:
    return tmp_path / "lakehouse"


@pytest.fixture()
def pipeline_resources(stack, lakehouse_dir: Path, spark) -> dict[str, object]:
    """The resources `definitions.py` builds, pointed at the test's stack and lakehouse, sharing the
    session-wide SparkSession."""
    from streaming_pipeline.definitions import build_resources
    from streaming_pipeline.engine.spark import SparkResource
    from streaming_pipeline.settings import PipelineSettings

    settings = PipelineSettings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
            "SCHEMA_REGISTRY_URL": stack.schema_registry_url,
            "LAKEHOUSE_DIR": str(lakehouse_dir),
        }
    )
    resources = build_resources(settings)
    resources["spark"] = SparkResource(stop_on_teardown=False, conf=SPARK_TEST_CONF)
    return resources


# The order in which the two xdist workers take whole modules (`--no-loadscope-reorder` in pyproject.toml keeps
# it; by default xdist starts the modules with the most tests first). Seconds measured on 2 cores, 2026-11-23.
# The cluster test goes first, and beside it the modules whose Spark runs in pytest's own process, about as
# long together as it is; then the other whole-pipeline modules (Spark Connect engines, `dagster dev`). So the
# heaviest module never shares the 2 cores with another engine, and no long module is left alone at the end.
# Modules not named here follow, in collection order.
MODULE_ORDER = (
    "test_cluster_vs_local.py",  # 551: a 2-worker cluster and two Connect engines
    "test_exactly_once_bronze.py",  # 225
    "test_exactly_once_windows.py",  # 139
    "test_faults.py",  # 84
    "test_pipeline_integration.py",  # 70
    "test_course_features.py",  # 42
    "test_course_transformations.py",  # 23
    "test_assets_direct.py",
    "test_transformations.py",  # 15
    "test_table_snapshot.py",
    "test_bench.py",  # 357
    "test_live.py",  # 278
    "test_postgres.py",  # 197
    "test_kill_fuzz.py",  # 149
    "test_spark_cluster.py",  # 107
    "test_stack.py",  # 77
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return MODULE_ORDER.index(name) if name in MODULE_ORDER else len(MODULE_ORDER)

    items.sort(key=rank)  # stable: the order within a module, and of the other modules, stays as collected
