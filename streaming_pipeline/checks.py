"""Asset checks: reconciliation with Kafka, uniqueness, consistency between tables, lag."""

import dagster as dg

from streaming_pipeline.bronze_batches import DEAD_LETTER_TABLE
from streaming_pipeline.delta_tables import read_table, table_exists
from streaming_pipeline.errors import StreamingPipelineError
from streaming_pipeline.offsets import consumed_offsets, consumer_lag, table_start_offsets
from streaming_pipeline.resources import KafkaResource, LakehouseResource, SparkResource
from streaming_pipeline.settings import PICKUPS_TOPIC, RIDES_TOPIC

DEFAULT_MAX_LAG = 100_000
KAFKA_KEY = ["kafka_topic", "kafka_partition", "kafka_offset"]


def _count(spark, lakehouse: LakehouseResource, table: str, condition=None) -> int:
    path = lakehouse.table_path(table)
    if not table_exists(path):
        return 0
    frame = read_table(spark, path)
    return (frame.where(condition) if condition is not None else frame).count()


def _duplicates(spark, lakehouse: LakehouseResource, table: str, key: list[str]) -> int:
    from pyspark.sql import functions as F

    path = lakehouse.table_path(table)
    if not table_exists(path):
        return 0
    return read_table(spark, path).groupBy(*key).count().where(F.col("count") > 1).count()


def _bronze_checks(asset_name: str, topic: str) -> list[dg.AssetChecksDefinition]:
    @dg.asset_check(
        asset=asset_name,
        name="reconciles_with_kafka_offsets",
        description=f"Rows of {asset_name} plus its dead letters equal the {topic} offsets its commits have consumed.",
    )
    def reconciles(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        from pyspark.sql import functions as F

        session = spark.get_session()
        consumed = consumed_offsets(lakehouse.table_path(asset_name), asset_name, topic)
        start = table_start_offsets(lakehouse.table_path(asset_name), asset_name, topic)
        expected = sum(consumed.values()) - sum(start.values())
        rows = _count(session, lakehouse, asset_name)
        dead = _count(session, lakehouse, DEAD_LETTER_TABLE, F.col("kafka_topic") == topic)
        return dg.AssetCheckResult(
            passed=rows + dead == expected,
            metadata={"rows": rows, "dead_letters": dead, "consumed_records": expected},
        )

    @dg.asset_check(
        asset=asset_name,
        name="unique_kafka_coordinates",
        description="No (kafka_topic, kafka_partition, kafka_offset) appears twice: exactly once.",
    )
    def unique(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        duplicates = _duplicates(spark.get_session(), lakehouse, asset_name, KAFKA_KEY)
        return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_keys": duplicates})

    @dg.asset_check(
        asset=asset_name,
        name="consumer_lag_below_bound",
        description=f"Records of {topic} not yet in {asset_name} stay below {DEFAULT_MAX_LAG} (warning).",
    )
    def lag(kafka: KafkaResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        try:
            end_offsets = kafka.end_offsets(topic)
        except StreamingPipelineError as exc:
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata={"error": str(exc)})
        consumed = consumed_offsets(lakehouse.table_path(asset_name), asset_name, topic)
        by_partition = consumer_lag(end_offsets, consumed)
        total = sum(by_partition.values())
        return dg.AssetCheckResult(
            passed=total <= DEFAULT_MAX_LAG,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "lag": total,
                "lag_by_partition": {str(p): n for p, n in by_partition.items()},
                "bound": DEFAULT_MAX_LAG,
            },
        )

    return [reconciles, unique, lag]


@dg.asset_check(asset="ride_window_aggregates", description="One row per (window_start, vendor_id).")
def unique_window_per_vendor(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    duplicates = _duplicates(spark.get_session(), lakehouse, "ride_window_aggregates", ["window_start", "vendor_id"])
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_keys": duplicates})


@dg.asset_check(
    asset="ride_window_aggregates",
    additional_deps=["raw_rides"],
    description="Each ride of raw_rides that the window stream has read (the version it consumed) is counted once: "
    "on time in trip_count or late in late_trip_count.",
)
def windows_count_each_ride_once(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    from pyspark.sql import functions as F

    from streaming_pipeline.delta_streams import windows_positions

    session = spark.get_session()
    path = lakehouse.table_path("ride_window_aggregates")
    consumed, reconciled = windows_positions(session, lakehouse) if table_exists(path) else (None, None)
    if consumed is None:
        return dg.AssetCheckResult(
            passed=True, metadata={"note": "the window stream has read no version of raw_rides yet"}
        )
    rides = session.read.format("delta").option("versionAsOf", consumed).load(lakehouse.table_path("raw_rides")).count()
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


@dg.asset_check(asset="vendor_counts", description="The vendors' trip counts add up to the rows of raw_rides.")
def vendor_counts_match_raw_rides(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    from pyspark.sql import functions as F

    session = spark.get_session()
    rides = _count(session, lakehouse, "raw_rides")
    path = lakehouse.table_path("vendor_counts")
    counted = 0
    if table_exists(path):
        counted = int(read_table(session, path).agg(F.sum("trip_count")).collect()[0][0] or 0)
    return dg.AssetCheckResult(passed=counted == rides, metadata={"sum_trip_count": counted, "raw_rides_rows": rides})


@dg.asset_check(
    asset="high_amount_rides",
    additional_deps=["low_amount_rides", "raw_rides"],
    description="high_amount_rides + low_amount_rides hold each ride of raw_rides with a total_amount exactly once.",
)
def branches_add_up_to_rides_with_an_amount(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    from pyspark.sql import functions as F

    session = spark.get_session()
    with_amount = _count(session, lakehouse, "raw_rides", F.col("total_amount").isNotNull())
    high = _count(session, lakehouse, "high_amount_rides")
    low = _count(session, lakehouse, "low_amount_rides")
    duplicates = _duplicates(session, lakehouse, "high_amount_rides", KAFKA_KEY) + _duplicates(
        session, lakehouse, "low_amount_rides", KAFKA_KEY
    )
    return dg.AssetCheckResult(
        passed=high + low == with_amount and duplicates == 0,
        metadata={"high": high, "low": low, "raw_rides_with_amount": with_amount, "duplicated_keys": duplicates},
    )


@dg.asset_check(
    asset="rides_enriched",
    additional_deps=["raw_rides"],
    description="rides_enriched has one row per ride of raw_rides, no more, no fewer.",
)
def enriched_rows_equal_raw_rows(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    session = spark.get_session()
    rides = _count(session, lakehouse, "raw_rides")
    enriched = _count(session, lakehouse, "rides_enriched")
    duplicates = _duplicates(session, lakehouse, "rides_enriched", KAFKA_KEY)
    return dg.AssetCheckResult(
        passed=enriched == rides and duplicates == 0,
        metadata={"rides_enriched_rows": enriched, "raw_rides_rows": rides, "duplicated_keys": duplicates},
    )


@dg.asset_check(
    asset="ride_pickup_joins",
    description="Each (ride, pickup) pair appears once: no pair is appended twice.",
)
def unique_join_pairs(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    pair = ["ride_kafka_partition", "ride_kafka_offset", "pickup_kafka_partition", "pickup_kafka_offset"]
    duplicates = _duplicates(spark.get_session(), lakehouse, "ride_pickup_joins", pair)
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_pairs": duplicates})


ALL_CHECKS = [
    *_bronze_checks("raw_rides", RIDES_TOPIC),
    *_bronze_checks("raw_pickup_locations", PICKUPS_TOPIC),
    unique_window_per_vendor,
    windows_count_each_ride_once,
    vendor_counts_match_raw_rides,
    branches_add_up_to_rides_with_an_amount,
    enriched_rows_equal_raw_rows,
    unique_join_pairs,
]
