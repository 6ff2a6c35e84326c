"""Trips and revenue per vendor in event-time tumbling windows, with late rides and finality: a streaming table
declared in Python, with a sink and a reconcile of its own; its checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg

from streaming_pipeline.components import streaming_table
from streaming_pipeline.components.asset_metadata import OWNERS
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows, small_table, table_exists
from streaming_pipeline.lakehouse.gold.window_reconcile import WINDOWS, WindowReconcile
from streaming_pipeline.lakehouse.gold.windows import reconcile_after_run, window_upsert
from streaming_pipeline.lakehouse.streaming_tables import TableTarget
from streaming_pipeline.resources import LakehouseResource, SparkResource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MAX_CHART_WINDOWS = 200


def window_metadata(target: TableTarget, reconcile: WindowReconcile) -> Mapping[str, Any]:
    """A triggered run's late rides, finality and reconcile, and a chart of the recent windows."""
    windows = small_table(target.spark, target.table_path)
    if windows is None:
        return {}
    from streaming_pipeline.lakehouse.gold.charts import (  # matplotlib: only when drawing
        png_markdown,
        window_chart_png,
    )

    recent = windows.sort_values("window_start", ascending=False).head(MAX_CHART_WINDOWS * 3)
    png = window_chart_png(recent.sort_values("window_start"))
    return {
        "watermark": dg.MetadataValue.text(str(reconcile.watermark)),
        "late_rides_total": dg.MetadataValue.int(int(windows["late_trip_count"].fillna(0).sum())),
        "late_rides_found_this_run": dg.MetadataValue.int(reconcile.late_rides_found),
        "final_windows": dg.MetadataValue.int(int(windows["is_final"].fillna(False).astype(bool).sum())),
        "windows_reconciled": dg.MetadataValue.int(reconcile.windows),
        "reconciled_raw_rides_version": dg.MetadataValue.text(str(reconcile.raw_rides_version)),
        "reconcile": dg.MetadataValue.text(reconcile.reason or "-"),
        "reconcile_full_recount": dg.MetadataValue.bool(reconcile.full),
        "reconcile_seconds": dg.MetadataValue.float(round(reconcile.seconds, 3)),
        "chart": dg.MetadataValue.md(png_markdown(png, "trips per window and vendor")),
    }


@streaming_table(
    streams=["raw_rides"],
    mode="upsert",
    keys=["window_start", "vendor_id"],
    watermarks={"raw_rides": {"column": "pickup_datetime", "delay": "${watermark_delay}"}},
    parameters={
        "window_duration": {
            "type": "interval",
            "default": "10 minutes",
            "env": "RIDE_WINDOW_DURATION",
            "description": "The tumbling windows' length",
        },
        # RIDE_WATERMARK_DELAY is the join's too (`silver/ride_pickup_joins/defs.yaml`), with the same default
        "watermark_delay": {
            "type": "interval",
            "default": "15 minutes",
            "env": "RIDE_WATERMARK_DELAY",
            "description": "How far behind the latest pickup a ride may arrive and still count on time",
        },
    },
    group="gold",
    columns={
        "window_start": {"type": "timestamp", "description": "Tumbling window start (inclusive, UTC)."},
        "window_end": {"type": "timestamp", "description": "Window end (exclusive)."},
        "vendor_id": {"type": "int"},
        "trip_count": {"type": "bigint", "description": "Rides counted before the window was final."},
        "total_amount_sum": {"type": "double", "description": "Sum of total_amount of those rides."},
        "is_final": {"type": "boolean", "description": "The watermark has passed window_end."},
        "late_trip_count": {"type": "bigint", "description": "Rides that arrived after the window was final."},
        "max_pickup_datetime": {"type": "timestamp", "description": "Latest on-time pickup in the window."},
    },
    owners=OWNERS,
    foreach_batch=window_upsert,
    after_run=reconcile_after_run,
    metadata=window_metadata,
)
def ride_window_aggregates(raw_rides: DataFrame, parameters: Mapping[str, Any]) -> DataFrame:
    """Trips and revenue per vendor in event-time tumbling windows of window_duration on pickup
    time, upserted as they change; `is_final` once the watermark (watermark_delay) passed the
    window end; rides arriving after that are counted in `late_trip_count`, never dropped silently."""
    from streaming_pipeline.lakehouse.gold.transformations import ride_window_aggregates as windows

    return windows(raw_rides, parameters["window_duration"])


@dg.asset_check(asset=WINDOWS, description="One row per (window_start, vendor_id).")
def unique_window_per_vendor(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    duplicates = count_duplicate_keys(spark.get_session(), lakehouse.table_path(WINDOWS), ["window_start", "vendor_id"])
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_keys": duplicates})


@dg.asset_check(
    asset=WINDOWS,
    additional_deps=["raw_rides"],
    description="Each ride of raw_rides that the window stream has read is counted once: on time in trip_count or "
    "late in late_trip_count. Read at the windows' newest reconcile (before the first: as the table stands), so it "
    "holds while the stream writes.",
)
def windows_count_each_ride_once(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    from streaming_pipeline.lakehouse.gold.window_reconcile import windows_count

    session = spark.get_session()
    path = lakehouse.table_path(WINDOWS)
    count = windows_count(session, lakehouse) if table_exists(path) else None
    if count is None:
        return dg.AssetCheckResult(
            passed=True,
            metadata={"note": "the window stream has read no whole version of raw_rides yet, or wrote all along"},
        )
    rides = count_rows(session, lakehouse.table_path("raw_rides"), version=count.raw_rides_version)
    return dg.AssetCheckResult(
        passed=count.counted == rides,
        metadata={
            "raw_rides_version": count.raw_rides_version,
            "windows_version": count.windows_version,
            "at_a_reconcile": count.reconciled,
            "raw_rides_rows": rides,
            "on_time_plus_late": count.counted,
        },
    )
