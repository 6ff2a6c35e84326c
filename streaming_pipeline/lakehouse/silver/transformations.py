"""Silver transformations: the ride-pickup join.

Pure Spark transformations: DataFrame in, DataFrame out; no session, no I/O. They work the same on static
DataFrames (unit tests) and on streaming DataFrames (the assets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# pyspark is imported in the functions that use it: the asset checks import this module, and the sensors and
# checks load without Spark's client (streaming_pipeline_tests/test_import_weight.py).
if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def ride_pickup_joins(
    rides: DataFrame, pickups: DataFrame, max_gap: str, watermark_delay: str | None = None
) -> DataFrame:
    """Pair a ride that dropped off at zone L at time d with each pickup at L at time p, |p - d| <= max_gap.

    The bound is inclusive. With `watermark_delay` (streaming) both sides carry an event-time
    watermark, so Spark can drop join state that no future event can match.
    """
    from pyspark.sql import functions as F

    ride_side = rides.select(
        F.col("vendor_id"),
        F.col("do_location_id").alias("ride_location_id"),
        F.col("dropoff_datetime"),
        *[F.col(c).alias(f"ride_{c}") for c in ("kafka_partition", "kafka_offset") if c in rides.columns],
    )
    pickup_side = pickups.select(
        F.col("pu_location_id").alias("location_id"),
        F.col("pickup_datetime"),
        *[F.col(c).alias(f"pickup_{c}") for c in ("kafka_partition", "kafka_offset") if c in pickups.columns],
    )
    if watermark_delay is not None:
        ride_side = ride_side.withWatermark("dropoff_datetime", watermark_delay)
        pickup_side = pickup_side.withWatermark("pickup_datetime", watermark_delay)
    gap = F.expr(f"INTERVAL {max_gap}")
    condition = (
        (F.col("ride_location_id") == F.col("location_id"))
        & (F.col("pickup_datetime") >= F.col("dropoff_datetime") - gap)
        & (F.col("pickup_datetime") <= F.col("dropoff_datetime") + gap)
    )
    joined = ride_side.join(pickup_side, condition, "inner")
    extra = [c for c in joined.columns if c.startswith(("ride_kafka", "pickup_kafka"))]
    return joined.select("vendor_id", "location_id", "pickup_datetime", "dropoff_datetime", *extra)
