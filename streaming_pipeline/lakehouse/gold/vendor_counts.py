"""The vendor_counts query: raw_rides -> a complete-mode running count per vendor, rewritten each micro-batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streaming_pipeline.lakehouse.engine.streams import (
    Log,
    StreamQuery,
    StreamRunReport,
    delta_stream,
    run_available_now,
)
from streaming_pipeline.lakehouse.gold.transformations import vendor_counts
from streaming_pipeline.lakehouse.tables import RAW_RIDES, VENDOR_COUNTS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streaming_pipeline.lakehouse.connections import Lakehouse


def vendor_counts_query(spark: SparkSession, lakehouse: Lakehouse) -> StreamQuery:
    """Complete-mode running count: every micro-batch rewrites the small table from Spark's state."""

    def start_writer() -> DataStreamWriter:
        counts = vendor_counts(delta_stream(spark, lakehouse, RAW_RIDES.name))
        return (
            counts.writeStream.format("delta")
            .outputMode("complete")
            .option("checkpointLocation", lakehouse.checkpoint_path(VENDOR_COUNTS.name))
            .option("path", lakehouse.table_path(VENDOR_COUNTS.name))
        )

    return StreamQuery(
        VENDOR_COUNTS.name,
        start_writer,
        tables=(VENDOR_COUNTS.name,),
        source_paths=(lakehouse.table_path(RAW_RIDES.name),),
    )


def update_vendor_counts(spark: SparkSession, lakehouse: Lakehouse, log: Log | None = None) -> StreamRunReport:
    """One availableNow run of the running count."""
    query = vendor_counts_query(spark, lakehouse)
    return run_available_now(query.name, query.start_writer, log=log)
