"""Stream-table enrichment (the course's KStream-GlobalKTable join): rides with the names of their zones."""

import dagster as dg

from streaming_pipeline.assets import tables
from streaming_pipeline.assets.bronze import raw_rides
from streaming_pipeline.assets.metadata import OWNERS, checkpoint_pool, delta_table_metadata, step_priority
from streaming_pipeline.delta_streams import (
    RAW_RIDES,
    RIDES_ENRICHED,
    TAXI_ZONES,
    refresh_taxi_zones,
    update_rides_enriched,
)
from streaming_pipeline.delta_tables import table_exists
from streaming_pipeline.resources import LakehouseResource, SparkResource


@dg.asset(
    name=TAXI_ZONES,
    group_name="silver",
    kinds={"csv", "spark", "delta"},
    owners=OWNERS,
    tags={"layer": "silver"},
    # Loaded once by Dagster's automation sensor when missing (on_missing() fires only when a target becomes
    # missing, never for one missing since the first tick); a failed load waits for someone to fix the CSV.
    automation_condition=dg.AutomationCondition.missing()
    & ~dg.AutomationCondition.in_progress()
    & ~dg.AutomationCondition.execution_failed(),
    metadata={"dagster/column_schema": tables.TAXI_ZONES},
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
            **delta_table_metadata(session, lakehouse.table_path(TAXI_ZONES), preview_order=["location_id"]),
        }
    )


@dg.asset(
    name=RIDES_ENRICHED,
    group_name="silver",
    deps=[raw_rides, taxi_zones],
    kinds={"spark", "delta"},
    owners=OWNERS,
    tags={"layer": "silver"},
    automation_condition=dg.AutomationCondition.eager(),
    pool=checkpoint_pool(RIDES_ENRICHED),
    op_tags=step_priority(RIDES_ENRICHED),
    metadata={"dagster/column_schema": tables.RIDES_ENRICHED},
)
def rides_enriched(context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource):
    """Every ride of raw_rides once, plus pu_borough, pu_zone, do_borough and do_zone: a stream-static join
    with a broadcast of taxi_zones. An unknown location id keeps its ride, with null zone columns, and is
    counted. Rides keep the zones they were enriched with when the lookup changes later."""
    session = spark.get_session()
    missing = [n for n in (RAW_RIDES, TAXI_ZONES) if not table_exists(lakehouse.table_path(n))]
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
            **delta_table_metadata(session, lakehouse.table_path(RIDES_ENRICHED)),
        }
    )
