"""Gold asset checks: one row per window, each ride counted once, vendor counts adding up to raw_rides."""

import dagster as dg

from streaming_pipeline.engine.delta_tables import count_duplicate_keys, count_rows, read_table, table_exists
from streaming_pipeline.engine.spark import SparkResource
from streaming_pipeline.resources import LakehouseResource
from streaming_pipeline.tables import RAW_RIDES, RIDE_WINDOW_AGGREGATES, VENDOR_COUNTS


@dg.asset_check(asset=RIDE_WINDOW_AGGREGATES.name, description="One row per (window_start, vendor_id).")
def unique_window_per_vendor(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    duplicates = count_duplicate_keys(
        spark.get_session(), lakehouse.table_path(RIDE_WINDOW_AGGREGATES.name), ["window_start", "vendor_id"]
    )
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_keys": duplicates})


@dg.asset_check(
    asset=RIDE_WINDOW_AGGREGATES.name,
    additional_deps=[RAW_RIDES.name],
    description="Each ride of raw_rides that the window stream has read (the version it consumed) is counted once: "
    "on time in trip_count or late in late_trip_count.",
)
def windows_count_each_ride_once(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    from pyspark.sql import functions as F

    from streaming_pipeline.gold.windows import windows_positions

    session = spark.get_session()
    path = lakehouse.table_path(RIDE_WINDOW_AGGREGATES.name)
    consumed, reconciled = windows_positions(session, lakehouse) if table_exists(path) else (None, None)
    if consumed is None:
        return dg.AssetCheckResult(
            passed=True, metadata={"note": "the window stream has read no version of raw_rides yet"}
        )
    rides = (
        session.read.format("delta").option("versionAsOf", consumed).load(lakehouse.table_path(RAW_RIDES.name)).count()
    )
    counted = int(
        read_table(session, path).agg(F.sum(F.col("trip_count") + F.col("late_trip_count"))).collect()[0][0] or 0
    )
    return dg.AssetCheckResult(
        passed=counted == rides,
        metadata={
            "raw_rides_version": consumed,
            "reconciled_version": str(reconciled),
            "raw_rides_rows": rides,
            "on_time_plus_late": counted,
        },
    )


@dg.asset_check(asset=VENDOR_COUNTS.name, description="The vendors' trip counts add up to the rows of raw_rides.")
def vendor_counts_match_raw_rides(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    from pyspark.sql import functions as F

    session = spark.get_session()
    rides = count_rows(session, lakehouse.table_path(RAW_RIDES.name))
    path = lakehouse.table_path(VENDOR_COUNTS.name)
    counted = 0
    if table_exists(path):
        counted = int(read_table(session, path).agg(F.sum("trip_count")).collect()[0][0] or 0)
    return dg.AssetCheckResult(passed=counted == rides, metadata={"sum_trip_count": counted, "raw_rides_rows": rides})


CHECKS = [unique_window_per_vendor, windows_count_each_ride_once, vendor_counts_match_raw_rides]
