"""Silver assets: the amount branches (the course's Faust app), the taxi zones and the rides enriched with them
(the course's KStream-GlobalKTable join), the stream-stream join of rides and pickups."""

import dagster as dg

from streaming_pipeline.asset_metadata import (
    SPARK_KINDS,
    delta_table_metadata,
    missing_sources,
    stream_metadata,
    stream_step_args,
    table_args,
)
from streaming_pipeline.bronze.assets import raw_pickup_locations, raw_rides
from streaming_pipeline.engine.delta_tables import read_table, table_exists
from streaming_pipeline.engine.spark import SparkResource
from streaming_pipeline.resources import LakehouseResource
from streaming_pipeline.silver.branches import update_amount_branches
from streaming_pipeline.silver.enrichment import refresh_taxi_zones, update_rides_enriched
from streaming_pipeline.silver.joins import update_ride_pickup_joins
from streaming_pipeline.tables import (
    AMOUNT_BRANCHES,
    HIGH_AMOUNT_RIDES,
    JOIN_LATE_ROWS,
    LOW_AMOUNT_RIDES,
    RAW_PICKUP_LOCATIONS,
    RAW_RIDES,
    RIDE_PICKUP_JOINS,
    RIDES_ENRICHED,
    TAXI_ZONES,
)

# ------------------------------------------------------------------------------------------ amount branches


@dg.multi_asset(
    name=AMOUNT_BRANCHES,
    specs=[
        dg.AssetSpec(
            HIGH_AMOUNT_RIDES.name,
            description="Rides with total_amount >= HIGH_AMOUNT_THRESHOLD (default 40), same columns as raw_rides.",
            **table_args(HIGH_AMOUNT_RIDES, kinds=SPARK_KINDS, deps=[raw_rides]),
        ),
        dg.AssetSpec(
            LOW_AMOUNT_RIDES.name,
            description="Rides with total_amount < HIGH_AMOUNT_THRESHOLD (default 40), same columns as raw_rides.",
            **table_args(LOW_AMOUNT_RIDES, kinds=SPARK_KINDS, deps=[raw_rides]),
        ),
    ],
    **stream_step_args(AMOUNT_BRANCHES),
)
def amount_branches(context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource):
    """One stream from raw_rides, branched per micro-batch; a ride with no total_amount goes to neither table
    and is counted. Exactly once: both appends are idempotent per micro-batch."""
    session = spark.get_session()
    if not table_exists(lakehouse.table_path(RAW_RIDES.name)):
        context.log.warning("raw_rides does not exist yet: nothing to branch")
        for name in (HIGH_AMOUNT_RIDES.name, LOW_AMOUNT_RIDES.name):
            yield dg.MaterializeResult(asset_key=name, metadata={"skipped": "raw_rides does not exist yet"})
        return
    result = update_amount_branches(session, lakehouse, log=context.log)
    context.log.info(
        f"{result.report.input_rows} rides: {result.high_rows} high, {result.low_rows} low, "
        f"{result.null_amount_rides} with no total_amount (in neither)"
    )
    common = {
        "rows_read": dg.MetadataValue.int(result.report.input_rows),
        "micro_batches": dg.MetadataValue.int(result.report.batches),
        "threshold": dg.MetadataValue.float(lakehouse.high_amount_threshold),
        "null_amount_rides": dg.MetadataValue.int(result.null_amount_rides),
    }
    for name, written in ((HIGH_AMOUNT_RIDES.name, result.high_rows), (LOW_AMOUNT_RIDES.name, result.low_rows)):
        yield dg.MaterializeResult(
            asset_key=name,
            metadata={
                **common,
                "rows_written": dg.MetadataValue.int(written),
                **delta_table_metadata(session, lakehouse.table_path(name)),
            },
        )


# ------------------------------------------------------------------------------ taxi zones and enrichment


@dg.asset(
    name=TAXI_ZONES.name,
    **table_args(
        TAXI_ZONES,
        kinds={"csv", *SPARK_KINDS},
        # Loaded once by Dagster's automation sensor when missing (on_missing() fires only when a target becomes
        # missing, never for one missing since the first tick); a failed load waits for someone to fix the CSV.
        automation_condition=dg.AutomationCondition.missing()
        & ~dg.AutomationCondition.in_progress()
        & ~dg.AutomationCondition.execution_failed(),
    ),
)
def taxi_zones(context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource):
    """The NYC TLC taxi-zone lookup (265 zones) as a Delta table: the static side of the enrichment join.
    Loaded from the lookup shipped with the package, or TAXI_ZONES_CSV; rewritten only when it changed."""
    session = spark.get_session()
    changed = refresh_taxi_zones(session, lakehouse)
    context.log.info(f"taxi_zones {'loaded from' if changed else 'unchanged, as in'} {lakehouse.taxi_zones_csv}")
    return dg.MaterializeResult(
        metadata={
            "source_csv": dg.MetadataValue.path(lakehouse.taxi_zones_csv),
            "changed": dg.MetadataValue.bool(changed),
            **delta_table_metadata(session, lakehouse.table_path(TAXI_ZONES.name), preview_order=["location_id"]),
        }
    )


@dg.asset(
    name=RIDES_ENRICHED.name,
    **table_args(RIDES_ENRICHED, kinds=SPARK_KINDS, deps=[raw_rides, taxi_zones]),
    **stream_step_args(RIDES_ENRICHED.name),
)
def rides_enriched(context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource):
    """Every ride of raw_rides once, plus pu_borough, pu_zone, do_borough and do_zone: a stream-static join
    with a broadcast of taxi_zones. An unknown location id keeps its ride, with null zone columns, and is
    counted. Rides keep the zones they were enriched with when the lookup changes later."""
    session = spark.get_session()
    missing = [n for n in (RAW_RIDES.name, TAXI_ZONES.name) if not table_exists(lakehouse.table_path(n))]
    if missing:
        context.log.warning(f"{', '.join(missing)} not created yet: nothing to enrich")
        return dg.MaterializeResult(metadata={"skipped": f"{', '.join(missing)} does not exist yet"})
    result = update_rides_enriched(session, lakehouse, log=context.log)
    if result.unknown_pickup_zones or result.unknown_dropoff_zones:
        context.log.warning(
            f"{result.unknown_pickup_zones} pickup and {result.unknown_dropoff_zones} dropoff location id(s) "
            "are not in taxi_zones: those rides keep null zone columns"
        )
    return dg.MaterializeResult(
        metadata={
            "rows_read": dg.MetadataValue.int(result.report.input_rows),
            "micro_batches": dg.MetadataValue.int(result.report.batches),
            "unknown_pickup_zones": dg.MetadataValue.int(result.unknown_pickup_zones),
            "unknown_dropoff_zones": dg.MetadataValue.int(result.unknown_dropoff_zones),
            **delta_table_metadata(session, lakehouse.table_path(RIDES_ENRICHED.name)),
        }
    )


# ------------------------------------------------------------------------------------ rides x pickups join


@dg.multi_asset(
    name=RIDE_PICKUP_JOINS.name,
    specs=[
        dg.AssetSpec(
            RIDE_PICKUP_JOINS.name,
            description="Rides joined with pickups at their dropoff zone within JOIN_MAX_GAP (inclusive) of the "
            "dropoff, one row per matching pair (stream-stream join, watermarked on both sides).",
            **table_args(RIDE_PICKUP_JOINS, kinds=SPARK_KINDS, deps=[raw_rides, raw_pickup_locations]),
        ),
        dg.AssetSpec(
            JOIN_LATE_ROWS.name,
            description="Per micro-batch of the ride_pickup_joins query that dropped rows: how many rides and "
            "pickups arrived behind its watermark and were dropped (never joined), so that they are counted, not "
            "lost silently. The first run of the join creates it (empty until the watermark drops a row).",
            **table_args(JOIN_LATE_ROWS, kinds=SPARK_KINDS, deps=[raw_rides, raw_pickup_locations]),
        ),
    ],
    **stream_step_args(RIDE_PICKUP_JOINS.name),
)
def ride_pickup_joins(context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource):
    """The stream-stream join, and the count of rows its watermark dropped."""
    session = spark.get_session()
    if missing_sources(context, lakehouse, RAW_RIDES.name, RAW_PICKUP_LOCATIONS.name):
        for name in (RIDE_PICKUP_JOINS.name, JOIN_LATE_ROWS.name):
            yield dg.MaterializeResult(
                asset_key=name, metadata={"skipped": "raw_rides or raw_pickup_locations does not exist yet"}
            )
        return
    result = update_ride_pickup_joins(session, lakehouse, log=context.log, run_id=context.run_id)
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
            **delta_table_metadata(session, lakehouse.table_path(RIDE_PICKUP_JOINS.name)),
        },
    )
    yield dg.MaterializeResult(
        asset_key=JOIN_LATE_ROWS.name,
        metadata={
            **late,
            "micro_batches_recorded": dg.MetadataValue.int(result.batches_recorded),
            **delta_table_metadata(session, late_path, preview_order=["query_id", "batch_id"]),
        },
    )


ASSETS = [amount_branches, taxi_zones, rides_enriched, ride_pickup_joins]
