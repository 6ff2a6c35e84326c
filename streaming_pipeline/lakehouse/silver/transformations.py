"""Silver transformations: the amount branches, the zone lookup and the enrichment with it, the ride-pickup join.

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


def high_amount_rides(rides: DataFrame, threshold: float) -> DataFrame:
    """Rides with total_amount >= threshold; a null amount is neither high nor low."""
    from pyspark.sql import functions as F

    return rides.where(F.col("total_amount") >= F.lit(threshold))


def low_amount_rides(rides: DataFrame, threshold: float) -> DataFrame:
    """Rides with total_amount < threshold; a null amount is neither high nor low."""
    from pyspark.sql import functions as F

    return rides.where(F.col("total_amount") < F.lit(threshold))


def enrich_rides_with_zones(rides: DataFrame, zones: DataFrame) -> DataFrame:
    """Every ride once, plus pu_borough, pu_zone, do_borough and do_zone.

    Left joins, so a ride whose location id is unknown keeps its row, with nulls. The zone table is small and
    static: broadcasting it avoids shuffling the rides, and with it on the right of a left join this is a
    supported stream-static join when `rides` is streaming. One zone per id, so a duplicated id in a custom
    lookup cannot duplicate rides.
    """
    from pyspark.sql import functions as F

    unique_zones = zones.dropDuplicates(["location_id"])

    def side(prefix: str) -> DataFrame:
        return F.broadcast(
            unique_zones.select(
                F.col("location_id").alias(f"_{prefix}_zone_id"),
                F.col("borough").alias(f"{prefix}_borough"),
                F.col("zone").alias(f"{prefix}_zone"),
            )
        )

    return (
        rides.join(side("pu"), F.col("pu_location_id") == F.col("_pu_zone_id"), "left")
        .join(side("do"), F.col("do_location_id") == F.col("_do_zone_id"), "left")
        .drop("_pu_zone_id", "_do_zone_id")
    )
