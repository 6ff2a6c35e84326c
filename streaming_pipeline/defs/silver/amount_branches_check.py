"""The check that the amount branches (`high_amount_rides/defs.yaml`, `low_amount_rides/defs.yaml`), two streaming
tables of raw_rides split by total_amount, add up to the rides that have an amount."""

import dagster as dg

from streaming_pipeline.components.asset_metadata import missing_table_result, unpinned_check_result
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows, read_table, table_exists
from streaming_pipeline.lakehouse.engine.row_filters import not_null
from streaming_pipeline.lakehouse.engine.sink_position import SinkPosition, delta_sink_position
from streaming_pipeline.lakehouse.tables import KAFKA_KEY, RAW_RIDES
from streaming_pipeline.resources import LakehouseResource, SparkResource

HIGH_AMOUNT_RIDES, LOW_AMOUNT_RIDES = "high_amount_rides", "low_amount_rides"


@dg.asset_check(
    asset=HIGH_AMOUNT_RIDES,
    additional_deps=[LOW_AMOUNT_RIDES, RAW_RIDES.name],
    description="high_amount_rides + low_amount_rides hold each ride of raw_rides with a total_amount exactly once "
    "(of the older of the raw_rides versions the two branch queries had read when they wrote them).",
)
def branches_add_up_to_rides_with_an_amount(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    session = spark.get_session()
    rides_path, with_amount = lakehouse.table_path(RAW_RIDES.name), not_null("total_amount")
    branches = (HIGH_AMOUNT_RIDES, LOW_AMOUNT_RIDES)
    duplicates = sum(count_duplicate_keys(session, lakehouse.table_path(t), KAFKA_KEY) for t in branches)
    missing = [t for t in branches if not table_exists(lakehouse.table_path(t))]
    if missing:
        rides = count_rows(session, rides_path, with_amount)
        return missing_table_result(
            " and ".join(missing),
            lakehouse.checkpoint_path(missing[0]),
            rides,
            {"high": 0, "low": 0, "raw_rides_with_amount": rides, "duplicated_keys": duplicates},
        )
    positions: dict[str, SinkPosition] = {}
    for table in branches:
        position = delta_sink_position(lakehouse.table_path(table), lakehouse.checkpoint_path(table))
        if position is None:
            return unpinned_check_result(table)
        positions[table] = position
    # Each branch query reads raw_rides at its own pace: compare at the older version either has read.
    rides_version = min(p.source_version for p in positions.values())

    def rows_read_by(table: str) -> int:
        """Rows of the branch (at its pinned version) that come from raw_rides at `rides_version`."""
        path, position = lakehouse.table_path(table), positions[table]
        if position.source_version == rides_version:
            return count_rows(session, path, version=position.table_version)
        rides = read_table(session, rides_path, rides_version).select(*KAFKA_KEY)
        return read_table(session, path, position.table_version).join(rides, KAFKA_KEY, "left_semi").count()

    high, low = rows_read_by(HIGH_AMOUNT_RIDES), rows_read_by(LOW_AMOUNT_RIDES)
    rides = count_rows(session, rides_path, with_amount, version=rides_version)
    return dg.AssetCheckResult(
        passed=high + low == rides and duplicates == 0,
        metadata={
            "high": high,
            "low": low,
            "raw_rides_with_amount": rides,
            "duplicated_keys": duplicates,
            "raw_rides_version": rides_version,
        },
    )
