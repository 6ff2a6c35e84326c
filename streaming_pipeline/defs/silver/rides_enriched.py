"""Rides enriched with their zones (the course's KStream-GlobalKTable join), and the check that each ride is there
once."""

from typing import TYPE_CHECKING

import dagster as dg

from streaming_pipeline.components.asset_metadata import (
    delta_table_metadata,
    position_against_raw_rides,
    stream_metadata,
)
from streaming_pipeline.components.streamed_table import QueryInputs, StepRun, StreamedTable
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows, read_table
from streaming_pipeline.lakehouse.engine.streams import StreamQuery, delta_stream
from streaming_pipeline.lakehouse.silver.transformations import enrich_rides_with_zones
from streaming_pipeline.lakehouse.table_model import SILVER, Column, Table
from streaming_pipeline.lakehouse.tables import KAFKA_KEY, RAW_RIDES, RIDE_COLUMNS, TAXI_ZONES
from streaming_pipeline.resources import LakehouseResource, SparkResource

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter

RIDES_ENRICHED = Table(
    "rides_enriched",
    SILVER,
    (
        *RIDE_COLUMNS,
        Column("pu_borough", "string", "Borough of the pickup zone; null for an unknown id."),
        Column("pu_zone", "string", "Pickup zone name; null for an unknown id."),
        Column("do_borough", "string", "Borough of the dropoff zone; null for an unknown id."),
        Column("do_zone", "string", "Dropoff zone name; null for an unknown id."),
    ),
)


def enrichment_query(inputs: QueryInputs, config: None) -> StreamQuery:
    """Every ride of raw_rides once, with the boroughs and zones of its pickup and dropoff locations.

    A stream-static join: each micro-batch joins the zone table as it is then (broadcast). Rides already
    enriched keep the zones they were enriched with when the lookup changes later.
    """
    from pyspark.sql import functions as F

    spark, lakehouse = inputs.spark, inputs.lakehouse

    def start_writer() -> "DataStreamWriter":
        zones = read_table(spark, lakehouse.table_path(TAXI_ZONES.name))
        enriched = enrich_rides_with_zones(delta_stream(spark, lakehouse, RAW_RIDES.name), zones).observe(
            "enrichment",
            F.count(F.when(F.col("pu_zone").isNull(), 1)).alias("unknown_pickup_zones"),
            F.count(F.when(F.col("do_zone").isNull(), 1)).alias("unknown_dropoff_zones"),
        )
        return (
            enriched.writeStream.format("delta")
            .outputMode("append")
            .option("checkpointLocation", lakehouse.checkpoint_path(RIDES_ENRICHED.name))
            .option("path", lakehouse.table_path(RIDES_ENRICHED.name))
            # A column raw_rides gained (a new field of the value schema) joins the table with its first batch.
            .option("mergeSchema", "true")
        )

    return StreamQuery(RIDES_ENRICHED.name, start_writer, tables=(RIDES_ENRICHED.name,))


def enriched_rides(step: StepRun) -> dg.MaterializeResult:
    """Every ride of raw_rides once, plus pu_borough, pu_zone, do_borough and do_zone: a stream-static join
    with a broadcast of taxi_zones. An unknown location id keeps its ride, with null zone columns, and is
    counted. Rides keep the zones they were enriched with when the lookup changes later."""
    report = step.run().report
    observed = report.observed_metrics("enrichment")
    unknown_pickup, unknown_dropoff = observed.get("unknown_pickup_zones", 0), observed.get("unknown_dropoff_zones", 0)
    if unknown_pickup or unknown_dropoff:
        step.context.log.warning(
            f"{unknown_pickup} pickup and {unknown_dropoff} dropoff location id(s) "
            "are not in taxi_zones: those rides keep null zone columns"
        )
    return dg.MaterializeResult(
        metadata={
            **stream_metadata(report),
            "unknown_pickup_zones": dg.MetadataValue.int(unknown_pickup),
            "unknown_dropoff_zones": dg.MetadataValue.int(unknown_dropoff),
            **delta_table_metadata(step.spark, step.lakehouse, RIDES_ENRICHED),
        }
    )


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step=RIDES_ENRICHED.name,
        writes=[RIDES_ENRICHED],
        reads=[RAW_RIDES, TAXI_ZONES],
        query=enrichment_query,
        compute=enriched_rides,
        priority=30,
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
