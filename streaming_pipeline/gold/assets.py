"""Gold assets: the running count per vendor and the event-time windows (with late rides and finality), streamed
from raw_rides."""

from typing import TYPE_CHECKING

import dagster as dg

from streaming_pipeline.asset_metadata import (
    SPARK_KINDS,
    delta_table_metadata,
    missing_sources,
    stream_metadata,
    stream_step_args,
    table_args,
)
from streaming_pipeline.bronze.assets import raw_rides
from streaming_pipeline.engine.delta_tables import read_table, table_exists
from streaming_pipeline.engine.spark import SparkResource
from streaming_pipeline.gold.vendor_counts import update_vendor_counts
from streaming_pipeline.gold.windows import update_ride_window_aggregates
from streaming_pipeline.resources import LakehouseResource
from streaming_pipeline.tables import RAW_RIDES, RIDE_WINDOW_AGGREGATES, VENDOR_COUNTS

if TYPE_CHECKING:
    import pandas as pd

MAX_CHART_WINDOWS = 200


@dg.asset(
    name=VENDOR_COUNTS.name,
    **table_args(VENDOR_COUNTS, kinds=SPARK_KINDS, deps=[raw_rides]),
    **stream_step_args(VENDOR_COUNTS.name),
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
            **delta_table_metadata(session, lakehouse.table_path(VENDOR_COUNTS.name), preview_order=["vendor_id"]),
        }
    )


@dg.asset(
    name=RIDE_WINDOW_AGGREGATES.name,
    **table_args(RIDE_WINDOW_AGGREGATES, kinds=SPARK_KINDS, deps=[raw_rides]),
    **stream_step_args(RIDE_WINDOW_AGGREGATES.name),
)
def ride_window_aggregates(
    context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource
) -> dg.MaterializeResult:
    """Trips and revenue per vendor in event-time tumbling windows of RIDE_WINDOW_DURATION on pickup
    time, upserted as they change; `is_final` once the watermark (RIDE_WATERMARK_DELAY) passed the
    window end; rides arriving after that are counted in `late_trip_count`, never dropped silently."""
    session = spark.get_session()
    if missing_sources(context, lakehouse, RAW_RIDES.name):
        return dg.MaterializeResult(metadata={"skipped": "raw_rides does not exist yet"})
    result = update_ride_window_aggregates(session, lakehouse, log=context.log)
    path = lakehouse.table_path(RIDE_WINDOW_AGGREGATES.name)
    metadata = {
        **stream_metadata(result.report),
        **delta_table_metadata(session, path, preview_order=["window_start", "vendor_id"]),
    }
    if table_exists(path):
        from pyspark.sql import functions as F

        from streaming_pipeline.gold.charts import png_markdown, window_chart_png  # matplotlib: only when drawing

        frame = read_table(session, path)
        totals = frame.agg(
            F.sum("late_trip_count").alias("late"), F.sum(F.col("is_final").cast("int")).alias("final")
        ).collect()[0]
        recent: pd.DataFrame = frame.orderBy(F.col("window_start").desc()).limit(MAX_CHART_WINDOWS * 3).toPandas()
        png = window_chart_png(recent.sort_values("window_start"))
        reconcile = result.reconcile
        metadata.update(
            {
                "watermark": dg.MetadataValue.text(str(result.watermark)),
                "late_rides_total": dg.MetadataValue.int(int(totals["late"] or 0)),
                "late_rides_found_this_run": dg.MetadataValue.int(reconcile.late_rides_found),
                "late_rides_dropped_by_watermark_this_run": dg.MetadataValue.int(
                    result.report.rows_dropped_by_watermark()
                ),
                "final_windows": dg.MetadataValue.int(int(totals["final"] or 0)),
                "windows_reconciled": dg.MetadataValue.int(result.windows_changed_by_reconcile),
                "reconciled_raw_rides_version": dg.MetadataValue.text(str(reconcile.raw_rides_version)),
                "reconcile": dg.MetadataValue.text(reconcile.reason or "-"),
                "reconcile_full_recount": dg.MetadataValue.bool(reconcile.full),
                "chart": dg.MetadataValue.md(png_markdown(png, "trips per window and vendor")),
            }
        )
    return dg.MaterializeResult(metadata=metadata)


ASSETS = [vendor_counts, ride_window_aggregates]
