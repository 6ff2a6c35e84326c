"""The running count of rides per vendor, and the check that it adds up to raw_rides."""

import dagster as dg

from streaming_pipeline.components.asset_metadata import (
    delta_table_metadata,
    missing_sources,
    position_against_raw_rides,
    stream_metadata,
)
from streaming_pipeline.components.streamed_table import StreamedTable, WrittenTable
from streaming_pipeline.lakehouse.engine.delta_tables import count_rows, sum_columns
from streaming_pipeline.lakehouse.gold.vendor_counts import update_vendor_counts, vendor_counts_query
from streaming_pipeline.lakehouse.tables import RAW_RIDES, VENDOR_COUNTS
from streaming_pipeline.resources import LakehouseResource, SparkResource


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step=VENDOR_COUNTS.name,
        writes=[WrittenTable(VENDOR_COUNTS, deps=[RAW_RIDES.name])],
        compute=vendor_counts,
        live_query=lambda inputs, config: vendor_counts_query(inputs.spark, inputs.lakehouse),
        priority=40,
        latency_critical=True,
    )


def vendor_counts(
    context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource
) -> dg.MaterializeResult:
    """Number of rides per vendor over everything ingested (a running count, stream/table duality)."""
    session = spark.get_session()
    if missing_sources(context, lakehouse, RAW_RIDES.name):
        return dg.MaterializeResult(metadata={"skipped": "raw_rides does not exist yet"})
    report = update_vendor_counts(session, lakehouse, log=context.log)
    return dg.MaterializeResult(
        metadata={
            **stream_metadata(report),
            **delta_table_metadata(session, lakehouse, VENDOR_COUNTS, preview_order=["vendor_id"]),
        }
    )


@dg.asset_check(
    asset=VENDOR_COUNTS.name,
    additional_deps=[RAW_RIDES.name],
    description="The vendors' trip counts add up to the rows of raw_rides they were counted from (the raw_rides "
    "version the vendor_counts query had read when it wrote them).",
)
def vendor_counts_match_raw_rides(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    session = spark.get_session()
    position = position_against_raw_rides(session, lakehouse, VENDOR_COUNTS.name, empty_metadata={"sum_trip_count": 0})
    if isinstance(position, dg.AssetCheckResult):
        return position
    path = lakehouse.table_path(VENDOR_COUNTS.name)
    counted = sum_columns(session, path, ["trip_count"], version=position.table_version)["trip_count"]
    rides = count_rows(session, lakehouse.table_path(RAW_RIDES.name), version=position.source_version)
    return dg.AssetCheckResult(
        passed=counted == rides,
        metadata={
            "sum_trip_count": counted,
            "raw_rides_rows": rides,
            "vendor_counts_version": position.table_version,
            "raw_rides_version": position.source_version,
        },
    )
