"""The running count of rides per vendor, and the check that it adds up to raw_rides."""

from typing import TYPE_CHECKING

import dagster as dg

from streaming_pipeline.components.asset_metadata import (
    delta_table_metadata,
    position_against_raw_rides,
    stream_metadata,
)
from streaming_pipeline.components.streamed_table import QueryInputs, StepRun, StreamedTable
from streaming_pipeline.lakehouse.engine.delta_tables import count_rows, sum_columns
from streaming_pipeline.lakehouse.engine.streams import StreamQuery, delta_stream
from streaming_pipeline.lakehouse.gold.transformations import vendor_counts
from streaming_pipeline.lakehouse.table_model import GOLD, Column, Table
from streaming_pipeline.lakehouse.tables import RAW_RIDES
from streaming_pipeline.resources import LakehouseResource, SparkResource

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter

VENDOR_COUNTS = Table(
    "vendor_counts",
    GOLD,
    (
        Column("vendor_id", "int"),
        Column("trip_count", "bigint", "Rides of this vendor over everything ingested."),
    ),
)


def vendor_counts_query(inputs: QueryInputs, config: None) -> StreamQuery:
    """Complete-mode running count: every micro-batch rewrites the small table from Spark's state."""
    lakehouse = inputs.lakehouse

    def start_writer() -> "DataStreamWriter":
        counts = vendor_counts(delta_stream(inputs.spark, lakehouse, RAW_RIDES.name))
        return (
            counts.writeStream.format("delta")
            .outputMode("complete")
            .option("checkpointLocation", lakehouse.checkpoint_path(VENDOR_COUNTS.name))
            .option("path", lakehouse.table_path(VENDOR_COUNTS.name))
        )

    return StreamQuery(VENDOR_COUNTS.name, start_writer, tables=(VENDOR_COUNTS.name,))


def counted_vendors(step: StepRun) -> dg.MaterializeResult:
    """Number of rides per vendor over everything ingested (a running count, stream/table duality)."""
    run = step.run()
    return dg.MaterializeResult(
        metadata={
            **stream_metadata(run.report),
            **delta_table_metadata(step.spark, step.lakehouse, VENDOR_COUNTS, preview_order=["vendor_id"]),
        }
    )


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step=VENDOR_COUNTS.name,
        writes=[VENDOR_COUNTS],
        reads=[RAW_RIDES],
        query=vendor_counts_query,
        compute=counted_vendors,
        priority=40,
        latency_critical=True,
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
