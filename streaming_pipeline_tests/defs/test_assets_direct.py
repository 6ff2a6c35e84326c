"""Assets invoked directly as functions, with `dg.build_asset_context` and their resources as arguments, the way
Dagster documents unit-testing an asset: no job, no run storage, no Kafka. The expected rows come from the CSV
files read with the `csv` module, independently of the pipeline's own readers and transformations.
"""

from __future__ import annotations

import csv
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from streaming_pipeline.definitions import build_definitions
from streaming_pipeline.lakehouse.tables import RAW_RIDES
from streaming_pipeline.resources import LakehouseResource, SparkResource
from streaming_pipeline_tests.conftest import SPARK_TEST_CONF, TLC_RIDE_COLUMNS
from streaming_pipeline_tests.project_tables import default_config

pytestmark = pytest.mark.integration


@pytest.fixture()
def resources(tmp_path: Path, spark: Any) -> dict[str, Any]:
    return {
        "spark": SparkResource(stop_on_teardown=False, conf=SPARK_TEST_CONF),
        "lakehouse": LakehouseResource(root=str(tmp_path / "lakehouse")),
    }


def _step_results(table: str, *args: Any, **resources: Any) -> list[dg.MaterializeResult]:
    """The materializations of the step writing `table`, its asset invoked as the definitions build it."""
    results = build_definitions().resolve_assets_def(table)(dg.build_asset_context(), *args, **resources)
    return list(results)


def vendor_counts(**resources: Any) -> dg.MaterializeResult:
    (result,) = _step_results("vendor_counts", **resources)
    return result


def _metadata_value(result: dg.MaterializeResult, key: str) -> Any:
    assert result.metadata is not None
    value = result.metadata[key]
    return value.value if isinstance(value, dg.MetadataValue) else value


def _write_raw_rides(spark: Any, rides_csv: Path, path: str) -> list[dict[str, str]]:
    """raw_rides as bronze would have written it: every ride of the sample with made-up Kafka coordinates."""
    with rides_csv.open(newline="") as handle:
        rides = list(csv.DictReader(handle))
    types = {column.name: column.type for column in RAW_RIDES.columns}

    def value(column: str, cell: str) -> Any:
        kind = types[column]
        if cell == "":
            return None
        if kind == "int":
            return int(float(cell))
        if kind == "double":
            return float(cell)
        if kind == "timestamp":
            return datetime.strptime(cell, "%Y-%m-%d %H:%M:%S")
        return cell

    rows = [
        {
            **{raw: value(raw, ride[name]) for name, raw in TLC_RIDE_COLUMNS.items()},
            "kafka_topic": "rides",
            "kafka_partition": 0,
            "kafka_offset": offset,
            "kafka_timestamp": datetime(2026, 1, 1),
            "schema_id": 1,
        }
        for offset, ride in enumerate(rides)
    ]
    spark.createDataFrame(rows, RAW_RIDES.ddl).write.format("delta").save(path)
    return rides


def test_vendor_counts_skips_while_raw_rides_is_missing_then_counts_every_ride_once(
    resources, spark, rides_csv: Path
) -> None:
    lakehouse: LakehouseResource = resources["lakehouse"]
    skipped = vendor_counts(**resources)
    assert _metadata_value(skipped, "skipped") == "raw_rides does not exist yet"

    rides = _write_raw_rides(spark, rides_csv, lakehouse.table_path("raw_rides"))
    expected = dict(Counter(int(ride["VendorID"]) for ride in rides))

    counted = vendor_counts(**resources)
    assert _metadata_value(counted, "rows_read") == len(rides) == 266
    assert _metadata_value(counted, "dagster/row_count") == len(expected)
    table = spark.read.format("delta").load(lakehouse.table_path("vendor_counts")).collect()
    assert {r.vendor_id: r.trip_count for r in table} == expected

    # Nothing new in raw_rides: the stream reads nothing and the counts stay.
    again = vendor_counts(**resources)
    assert _metadata_value(again, "rows_read") == 0
    table = spark.read.format("delta").load(lakehouse.table_path("vendor_counts")).collect()
    assert {r.vendor_id: r.trip_count for r in table} == expected


def test_amount_branches_split_every_ride_once_by_the_threshold(resources, spark, rides_csv: Path) -> None:
    lakehouse: LakehouseResource = resources["lakehouse"]
    rides = _write_raw_rides(spark, rides_csv, lakehouse.table_path("raw_rides"))
    threshold = 40.0
    amounts = [float(ride["total_amount"]) for ride in rides]
    expected = {
        "high_amount_rides": [offset for offset, amount in enumerate(amounts) if amount >= threshold],
        "low_amount_rides": [offset for offset, amount in enumerate(amounts) if amount < threshold],
    }
    assert 0 < len(expected["high_amount_rides"]) < len(rides)

    for table, offsets in expected.items():
        config_class = type(default_config(table))
        (result,) = _step_results(table, config_class(high_amount_threshold=threshold), **resources)
        # Each branch reads every ride of raw_rides once, and holds those on its side of the threshold.
        assert _metadata_value(result, "rows_read") == len(rides) == 266
        assert _metadata_value(result, "dagster/row_count") == len(offsets)
        written = spark.read.format("delta").load(lakehouse.table_path(table))
        assert sorted(r.kafka_offset for r in written.collect()) == offsets
