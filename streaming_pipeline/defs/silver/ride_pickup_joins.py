"""The stream-stream join of rides and pickups, the count of rows its watermark dropped, and the check that each
pair is there once."""

import dagster as dg

from streaming_pipeline.components.asset_metadata import IntervalsConfig, delta_table_metadata, stream_metadata
from streaming_pipeline.components.parameters import parameter
from streaming_pipeline.components.streamed_table import QueryInputs, StepRun, StreamedTable, WrittenTable
from streaming_pipeline.defs.event_time import watermark_delay_parameter
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, read_table, table_exists
from streaming_pipeline.lakehouse.engine.streams import StreamQuery
from streaming_pipeline.lakehouse.silver.joins import join_run_result, ride_pickup_joins_query
from streaming_pipeline.lakehouse.tables import JOIN_LATE_ROWS, RAW_PICKUP_LOCATIONS, RAW_RIDES, RIDE_PICKUP_JOINS
from streaming_pipeline.resources import LakehouseResource, SparkResource


class RidePickupJoinsConfig(IntervalsConfig):
    ASSET = RIDE_PICKUP_JOINS.name
    INTERVALS = ("join_max_gap", "watermark_delay")

    join_max_gap: str = parameter(
        env="JOIN_MAX_GAP",
        default="10 minutes",
        kind="interval",
        description="A pickup joins a ride when its time is within this interval of the dropoff, before or after, "
        "inclusive",
    )
    watermark_delay: str = watermark_delay_parameter(
        "How far behind the latest event time either side may arrive and still be joined"
    )


def joins_query(inputs: QueryInputs, config: RidePickupJoinsConfig) -> StreamQuery:
    return ride_pickup_joins_query(
        inputs.spark,
        inputs.lakehouse,
        join_max_gap=config.interval("join_max_gap"),
        watermark_delay=config.interval("watermark_delay"),
        run_id=inputs.run_id,
        log=inputs.log,
    )


def joined_rides(step: StepRun):
    """The stream-stream join, and the count of rows its watermark dropped."""
    result = join_run_result(step.run())
    late: dict[str, dg.MetadataValue] = {
        "rows_dropped_by_watermark": dg.MetadataValue.int(result.rows_dropped_by_watermark)
    }
    if result.watermark is not None:
        late["join_watermark"] = dg.MetadataValue.text(str(result.watermark))
    late_path = step.lakehouse.table_path(JOIN_LATE_ROWS.name)
    if table_exists(late_path):
        from pyspark.sql import functions as F

        total = read_table(step.spark, late_path).agg(F.sum("rows_dropped_by_watermark")).collect()[0][0]
        late["rows_dropped_by_watermark_total"] = dg.MetadataValue.int(int(total or 0))
    yield dg.MaterializeResult(
        asset_key=RIDE_PICKUP_JOINS.name,
        metadata={
            **stream_metadata(result.report),
            **late,
            **delta_table_metadata(step.spark, step.lakehouse, RIDE_PICKUP_JOINS),
        },
    )
    yield dg.MaterializeResult(
        asset_key=JOIN_LATE_ROWS.name,
        metadata={
            **late,
            "micro_batches_recorded": dg.MetadataValue.int(result.batches_recorded),
            **delta_table_metadata(step.spark, step.lakehouse, JOIN_LATE_ROWS, preview_order=["query_id", "batch_id"]),
        },
    )


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step=RIDE_PICKUP_JOINS.name,
        writes=[
            WrittenTable(
                RIDE_PICKUP_JOINS,
                "Rides joined with pickups at their dropoff zone within join_max_gap (inclusive) of the dropoff, one "
                "row per matching pair (stream-stream join, watermarked on both sides).",
            ),
            WrittenTable(
                JOIN_LATE_ROWS,
                "Per micro-batch of the ride_pickup_joins query that dropped rows: how many rides and pickups arrived "
                "behind its watermark and were dropped (never joined), so that they are counted, not lost silently. "
                "The first run of the join creates it (empty until the watermark drops a row).",
            ),
        ],
        reads=[RAW_RIDES, RAW_PICKUP_LOCATIONS],
        query=joins_query,
        compute=joined_rides,
        config=RidePickupJoinsConfig,
        priority=20,
    )


@dg.asset_check(
    asset=RIDE_PICKUP_JOINS.name,
    description="Each (ride, pickup) pair appears once: no pair is appended twice.",
)
def unique_join_pairs(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    pair = ["ride_kafka_partition", "ride_kafka_offset", "pickup_kafka_partition", "pickup_kafka_offset"]
    duplicates = count_duplicate_keys(spark.get_session(), lakehouse.table_path(RIDE_PICKUP_JOINS.name), pair)
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_pairs": duplicates})
