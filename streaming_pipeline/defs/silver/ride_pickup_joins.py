"""The stream-stream join of rides and pickups, the count of rows its watermark dropped, and the check that each
pair is there once."""

import dagster as dg
from pydantic import Field

from streaming_pipeline.components.asset_metadata import (
    IntervalsConfig,
    delta_table_metadata,
    missing_sources,
    stream_metadata,
)
from streaming_pipeline.components.streamed_table import StreamedTable, WrittenTable
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, read_table, table_exists
from streaming_pipeline.lakehouse.settings import DEFAULT_JOIN_MAX_GAP, DEFAULT_RIDE_WATERMARK_DELAY
from streaming_pipeline.lakehouse.silver.joins import ride_pickup_joins_query, update_ride_pickup_joins
from streaming_pipeline.lakehouse.tables import JOIN_LATE_ROWS, RAW_PICKUP_LOCATIONS, RAW_RIDES, RIDE_PICKUP_JOINS
from streaming_pipeline.resources import LakehouseResource, SparkResource


class RidePickupJoinsConfig(IntervalsConfig):
    ASSET = RIDE_PICKUP_JOINS.name
    INTERVALS = ("join_max_gap", "watermark_delay")

    join_max_gap: str = Field(
        default=DEFAULT_JOIN_MAX_GAP,
        description="A pickup joins a ride within this interval after its dropoff, inclusive (default: JOIN_MAX_GAP).",
    )
    watermark_delay: str = Field(
        default=DEFAULT_RIDE_WATERMARK_DELAY,
        description="How far behind the latest event time either side may arrive (default: RIDE_WATERMARK_DELAY).",
    )


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step=RIDE_PICKUP_JOINS.name,
        writes=[
            WrittenTable(
                RIDE_PICKUP_JOINS,
                deps=[RAW_RIDES.name, RAW_PICKUP_LOCATIONS.name],
                description="Rides joined with pickups at their dropoff zone within join_max_gap (inclusive) of the "
                "dropoff, one row per matching pair (stream-stream join, watermarked on both sides).",
            ),
            WrittenTable(
                JOIN_LATE_ROWS,
                deps=[RAW_RIDES.name, RAW_PICKUP_LOCATIONS.name],
                description="Per micro-batch of the ride_pickup_joins query that dropped rows: how many rides and "
                "pickups arrived behind its watermark and were dropped (never joined), so that they are counted, "
                "not lost silently. The first run of the join creates it (empty until the watermark drops a row).",
            ),
        ],
        compute=ride_pickup_joins,
        config=RidePickupJoinsConfig,
        config_defaults=lambda settings: {
            "join_max_gap": settings.join_max_gap,
            "watermark_delay": settings.ride_watermark_delay,
        },
        live_query=lambda inputs, config: ride_pickup_joins_query(
            inputs.spark,
            inputs.lakehouse,
            join_max_gap=config.interval("join_max_gap"),
            watermark_delay=config.interval("watermark_delay"),
            run_id=inputs.run_id,
            log=inputs.log,
        ),
        priority=20,
    )


def ride_pickup_joins(
    context: dg.AssetExecutionContext, config: RidePickupJoinsConfig, spark: SparkResource, lakehouse: LakehouseResource
):
    """The stream-stream join, and the count of rows its watermark dropped."""
    session = spark.get_session()
    if missing_sources(context, lakehouse, RAW_RIDES.name, RAW_PICKUP_LOCATIONS.name):
        for name in (RIDE_PICKUP_JOINS.name, JOIN_LATE_ROWS.name):
            yield dg.MaterializeResult(
                asset_key=name, metadata={"skipped": "raw_rides or raw_pickup_locations does not exist yet"}
            )
        return
    result = update_ride_pickup_joins(
        session,
        lakehouse,
        join_max_gap=config.interval("join_max_gap"),
        watermark_delay=config.interval("watermark_delay"),
        log=context.log,
        run_id=context.run_id,
    )
    late: dict[str, dg.MetadataValue] = {
        "rows_dropped_by_watermark": dg.MetadataValue.int(result.rows_dropped_by_watermark)
    }
    if result.watermark is not None:
        late["join_watermark"] = dg.MetadataValue.text(str(result.watermark))
    late_path = lakehouse.table_path(JOIN_LATE_ROWS.name)
    if table_exists(late_path):
        from pyspark.sql import functions as F

        total = read_table(session, late_path).agg(F.sum("rows_dropped_by_watermark")).collect()[0][0]
        late["rows_dropped_by_watermark_total"] = dg.MetadataValue.int(int(total or 0))
    yield dg.MaterializeResult(
        asset_key=RIDE_PICKUP_JOINS.name,
        metadata={
            **stream_metadata(result.report),
            **late,
            **delta_table_metadata(session, lakehouse, RIDE_PICKUP_JOINS),
        },
    )
    yield dg.MaterializeResult(
        asset_key=JOIN_LATE_ROWS.name,
        metadata={
            **late,
            "micro_batches_recorded": dg.MetadataValue.int(result.batches_recorded),
            **delta_table_metadata(session, lakehouse, JOIN_LATE_ROWS, preview_order=["query_id", "batch_id"]),
        },
    )


@dg.asset_check(
    asset=RIDE_PICKUP_JOINS.name,
    description="Each (ride, pickup) pair appears once: no pair is appended twice.",
)
def unique_join_pairs(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    pair = ["ride_kafka_partition", "ride_kafka_offset", "pickup_kafka_partition", "pickup_kafka_offset"]
    duplicates = count_duplicate_keys(spark.get_session(), lakehouse.table_path(RIDE_PICKUP_JOINS.name), pair)
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_pairs": duplicates})
