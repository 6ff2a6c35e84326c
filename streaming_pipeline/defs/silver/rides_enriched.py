"""Rides enriched with their zones (the course's KStream-GlobalKTable join), and the check that each ride is there
once."""

import dagster as dg

from streaming_pipeline.components.asset_metadata import (
    delta_table_metadata,
    position_against_raw_rides,
    stream_metadata,
)
from streaming_pipeline.components.streamed_table import StreamedTable, WrittenTable
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows, table_exists
from streaming_pipeline.lakehouse.silver.enrichment import rides_enriched_query, update_rides_enriched
from streaming_pipeline.lakehouse.tables import KAFKA_KEY, RAW_RIDES, RIDES_ENRICHED, TAXI_ZONES
from streaming_pipeline.resources import LakehouseResource, SparkResource


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step=RIDES_ENRICHED.name,
        writes=[WrittenTable(RIDES_ENRICHED, deps=[RAW_RIDES.name, TAXI_ZONES.name])],
        compute=rides_enriched,
        live_query=lambda inputs, config: rides_enriched_query(inputs.spark, inputs.lakehouse),
        priority=30,
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
            **stream_metadata(result.report),
            "unknown_pickup_zones": dg.MetadataValue.int(result.unknown_pickup_zones),
            "unknown_dropoff_zones": dg.MetadataValue.int(result.unknown_dropoff_zones),
            **delta_table_metadata(session, lakehouse, RIDES_ENRICHED),
        }
    )


@dg.asset_check(
    asset=RIDES_ENRICHED.name,
    additional_deps=[RAW_RIDES.name],
    description="rides_enriched has one row per ride of raw_rides, no more, no fewer (of the raw_rides version the "
    "enrichment query had read when it wrote them).",
)
def enriched_rows_equal_raw_rows(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    session = spark.get_session()
    position = position_against_raw_rides(
        session, lakehouse, RIDES_ENRICHED.name, empty_metadata={"rides_enriched_rows": 0}
    )
    if isinstance(position, dg.AssetCheckResult):
        return position
    path = lakehouse.table_path(RIDES_ENRICHED.name)
    enriched = count_rows(session, path, version=position.table_version)
    rides = count_rows(session, lakehouse.table_path(RAW_RIDES.name), version=position.source_version)
    duplicates = count_duplicate_keys(session, path, KAFKA_KEY)
    return dg.AssetCheckResult(
        passed=enriched == rides and duplicates == 0,
        metadata={
            "rides_enriched_rows": enriched,
            "raw_rides_rows": rides,
            "duplicated_keys": duplicates,
            "rides_enriched_version": position.table_version,
            "raw_rides_version": position.source_version,
        },
    )
