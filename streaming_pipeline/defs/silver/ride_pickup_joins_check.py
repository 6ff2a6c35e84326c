"""The check that each (ride, pickup) pair of the stream-stream join (`ride_pickup_joins/defs.yaml`) is there once."""

import dagster as dg

from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys
from streaming_pipeline.resources import LakehouseResource, SparkResource

RIDE_PICKUP_JOINS = "ride_pickup_joins"


@dg.asset_check(
    asset=RIDE_PICKUP_JOINS,
    description="Each (ride, pickup) pair appears once: no pair is appended twice.",
)
def unique_join_pairs(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    pair = ["ride_kafka_partition", "ride_kafka_offset", "pickup_kafka_partition", "pickup_kafka_offset"]
    duplicates = count_duplicate_keys(spark.get_session(), lakehouse.table_path(RIDE_PICKUP_JOINS), pair)
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_pairs": duplicates})
