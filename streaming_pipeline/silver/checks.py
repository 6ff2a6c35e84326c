"""Silver asset checks: the branches, the enrichment and the join hold each ride (or pair) exactly once."""

import dagster as dg

from streaming_pipeline.engine.delta_tables import count_duplicate_keys, count_rows
from streaming_pipeline.engine.spark import SparkResource
from streaming_pipeline.resources import LakehouseResource
from streaming_pipeline.tables import (
    HIGH_AMOUNT_RIDES,
    KAFKA_KEY,
    LOW_AMOUNT_RIDES,
    RAW_RIDES,
    RIDE_PICKUP_JOINS,
    RIDES_ENRICHED,
)


@dg.asset_check(
    asset=HIGH_AMOUNT_RIDES.name,
    additional_deps=[LOW_AMOUNT_RIDES.name, RAW_RIDES.name],
    description="high_amount_rides + low_amount_rides hold each ride of raw_rides with a total_amount exactly once.",
)
def branches_add_up_to_rides_with_an_amount(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    from pyspark.sql import functions as F

    session = spark.get_session()
    with_amount = count_rows(session, lakehouse.table_path(RAW_RIDES.name), F.col("total_amount").isNotNull())
    high = count_rows(session, lakehouse.table_path(HIGH_AMOUNT_RIDES.name))
    low = count_rows(session, lakehouse.table_path(LOW_AMOUNT_RIDES.name))
    duplicates = count_duplicate_keys(
        session, lakehouse.table_path(HIGH_AMOUNT_RIDES.name), KAFKA_KEY
    ) + count_duplicate_keys(session, lakehouse.table_path(LOW_AMOUNT_RIDES.name), KAFKA_KEY)
    return dg.AssetCheckResult(
        passed=high + low == with_amount and duplicates == 0,
        metadata={"high": high, "low": low, "raw_rides_with_amount": with_amount, "duplicated_keys": duplicates},
    )


@dg.asset_check(
    asset=RIDES_ENRICHED.name,
    additional_deps=[RAW_RIDES.name],
    description="rides_enriched has one row per ride of raw_rides, no more, no fewer.",
)
def enriched_rows_equal_raw_rows(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    session = spark.get_session()
    rides = count_rows(session, lakehouse.table_path(RAW_RIDES.name))
    enriched = count_rows(session, lakehouse.table_path(RIDES_ENRICHED.name))
    duplicates = count_duplicate_keys(session, lakehouse.table_path(RIDES_ENRICHED.name), KAFKA_KEY)
    return dg.AssetCheckResult(
        passed=enriched == rides and duplicates == 0,
        metadata={"rides_enriched_rows": enriched, "raw_rides_rows": rides, "duplicated_keys": duplicates},
    )


@dg.asset_check(
    asset=RIDE_PICKUP_JOINS.name,
    description="Each (ride, pickup) pair appears once: no pair is appended twice.",
)
def unique_join_pairs(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    pair = ["ride_kafka_partition", "ride_kafka_offset", "pickup_kafka_partition", "pickup_kafka_offset"]
    duplicates = count_duplicate_keys(spark.get_session(), lakehouse.table_path(RIDE_PICKUP_JOINS.name), pair)
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_pairs": duplicates})


CHECKS = [branches_add_up_to_rides_with_an_amount, enriched_rows_equal_raw_rows, unique_join_pairs]
