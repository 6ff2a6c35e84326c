"""Gold transformations: event-time windows and their late rides.

Pure Spark transformations: DataFrame in, DataFrame out; no session, no I/O. They work the same on static
DataFrames (unit tests) and on streaming DataFrames (the assets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# pyspark is imported in the functions that use it: the asset checks import this module, and the sensors and
# checks load without Spark's client (streaming_pipeline_tests/test_import_weight.py).
if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def ride_window_aggregates(rides: DataFrame, window_duration: str) -> DataFrame:
    """Rides and revenue per vendor in tumbling event-time windows of `window_duration` on pickup time.

    On a stream watermarked on pickup_datetime (the table's declaration), windows are finalized once the watermark
    passes their end and later rides are left out of the aggregate (`window_late_counts` counts them).
    """
    from pyspark.sql import functions as F

    return (
        rides.groupBy(F.window("pickup_datetime", window_duration), F.col("vendor_id"))
        .agg(
            F.count(F.lit(1)).alias("trip_count"),
            # Money in cents: a running sum of doubles drifts (3798.040000000002).
            F.round(F.sum("total_amount"), 2).alias("total_amount_sum"),
            F.max("pickup_datetime").alias("max_pickup_datetime"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "vendor_id",
            "trip_count",
            "total_amount_sum",
            "max_pickup_datetime",
        )
    )


def window_late_counts(all_rides_per_window: DataFrame, aggregates: DataFrame) -> DataFrame:
    """For each window of `all_rides_per_window`, the rides the streaming aggregate left out (arrived after the
    watermark): every ride of the window minus those counted on time, 0 when none.

    `all_rides_per_window`: `ride_window_aggregates(...)` of ingested rides (batch, no watermark), all of them or
    those of some windows. `aggregates`: rows of the `ride_window_aggregates` table (their `trip_count` are the
    on-time rides). Output: window_start, window_end, vendor_id, late_trip_count, and, when `aggregates` has a
    `late_trip_count`, previous_late_trip_count (0 for a window it lacks). A window missing from `aggregates`
    had only late rides.
    """
    from pyspark.sql import functions as F

    everything = all_rides_per_window.select(
        "window_start", "window_end", "vendor_id", F.col("trip_count").alias("all_trip_count")
    )
    previous = "late_trip_count" in aggregates.columns
    on_time = aggregates.select(
        F.col("window_start").alias("a_window_start"),
        F.col("vendor_id").alias("a_vendor_id"),
        F.col("trip_count").alias("on_time_trip_count"),
        *([F.col("late_trip_count").alias("a_late_trip_count")] if previous else []),
    )
    joined = everything.join(
        on_time,
        (F.col("window_start") == F.col("a_window_start")) & F.col("vendor_id").eqNullSafe(F.col("a_vendor_id")),
        "left",
    )
    late = F.greatest(F.col("all_trip_count") - F.coalesce(F.col("on_time_trip_count"), F.lit(0)), F.lit(0))
    before = [F.coalesce(F.col("a_late_trip_count"), F.lit(0)).cast("long").alias("previous_late_trip_count")]
    return joined.select(
        "window_start",
        "window_end",
        "vendor_id",
        late.cast("long").alias("late_trip_count"),
        *(before if previous else []),
    )
