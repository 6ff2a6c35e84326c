"""Trips and revenue per vendor in event-time tumbling windows, with late rides and finality; its checks."""

import dagster as dg

from streaming_pipeline.components.asset_metadata import IntervalsConfig, delta_table_metadata, stream_metadata
from streaming_pipeline.components.parameters import parameter
from streaming_pipeline.components.streamed_table import QueryInputs, StepRun, StreamedTable
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows, small_table, table_exists
from streaming_pipeline.lakehouse.engine.streams import StreamQuery
from streaming_pipeline.lakehouse.gold.windows import ride_windows_query, window_run_result
from streaming_pipeline.lakehouse.tables import RAW_RIDES, RIDE_WINDOW_AGGREGATES
from streaming_pipeline.resources import LakehouseResource, SparkResource

MAX_CHART_WINDOWS = 200


class RideWindowsConfig(IntervalsConfig):
    ASSET = RIDE_WINDOW_AGGREGATES.name
    INTERVALS = ("window_duration", "watermark_delay")

    window_duration: str = parameter(
        env="RIDE_WINDOW_DURATION", default="10 minutes", kind="interval", description="The tumbling windows' length"
    )
    # RIDE_WATERMARK_DELAY is the join's too (`silver/ride_pickup_joins/defs.yaml`), with the same default
    watermark_delay: str = parameter(
        env="RIDE_WATERMARK_DELAY",
        default="15 minutes",
        kind="interval",
        description="How far behind the latest pickup a ride may arrive and still count on time",
    )


def windows_query(inputs: QueryInputs, config: RideWindowsConfig) -> StreamQuery:
    return ride_windows_query(
        inputs.spark,
        inputs.lakehouse,
        window_duration=config.interval("window_duration"),
        watermark_delay=config.interval("watermark_delay"),
        log=inputs.log,
    )


def counted_windows(step: StepRun) -> dg.MaterializeResult:
    """Trips and revenue per vendor in event-time tumbling windows of window_duration on pickup
    time, upserted as they change; `is_final` once the watermark (watermark_delay) passed the
    window end; rides arriving after that are counted in `late_trip_count`, never dropped silently."""
    result = window_run_result(step.run())
    session, lakehouse = step.spark, step.lakehouse
    path = lakehouse.table_path(RIDE_WINDOW_AGGREGATES.name)
    metadata = {
        **stream_metadata(result.report),
        **delta_table_metadata(session, lakehouse, RIDE_WINDOW_AGGREGATES, preview_order=["window_start", "vendor_id"]),
    }
    windows = small_table(session, path)
    if windows is not None:
        from streaming_pipeline.lakehouse.gold.charts import (  # matplotlib: only when drawing
            png_markdown,
            window_chart_png,
        )

        recent = windows.sort_values("window_start", ascending=False).head(MAX_CHART_WINDOWS * 3)
        png = window_chart_png(recent.sort_values("window_start"))
        reconcile = result.reconcile
        metadata.update(
            {
                "watermark": dg.MetadataValue.text(str(result.watermark)),
                "late_rides_total": dg.MetadataValue.int(int(windows["late_trip_count"].fillna(0).sum())),
                "late_rides_found_this_run": dg.MetadataValue.int(reconcile.late_rides_found),
                "late_rides_dropped_by_watermark_this_run": dg.MetadataValue.int(
                    result.report.rows_dropped_by_watermark()
                ),
                "final_windows": dg.MetadataValue.int(int(windows["is_final"].fillna(False).astype(bool).sum())),
                "windows_reconciled": dg.MetadataValue.int(result.windows_changed_by_reconcile),
                "reconciled_raw_rides_version": dg.MetadataValue.text(str(reconcile.raw_rides_version)),
                "reconcile": dg.MetadataValue.text(reconcile.reason or "-"),
                "reconcile_full_recount": dg.MetadataValue.bool(reconcile.full),
                "reconcile_seconds": dg.MetadataValue.float(round(reconcile.seconds, 3)),
                "chart": dg.MetadataValue.md(png_markdown(png, "trips per window and vendor")),
            }
        )
    return dg.MaterializeResult(metadata=metadata)


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step=RIDE_WINDOW_AGGREGATES.name,
        writes=[RIDE_WINDOW_AGGREGATES],
        reads=[RAW_RIDES],
        query=windows_query,
        compute=counted_windows,
        config=RideWindowsConfig,
        priority=0,
    )


@dg.asset_check(asset=RIDE_WINDOW_AGGREGATES.name, description="One row per (window_start, vendor_id).")
def unique_window_per_vendor(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    duplicates = count_duplicate_keys(
        spark.get_session(), lakehouse.table_path(RIDE_WINDOW_AGGREGATES.name), ["window_start", "vendor_id"]
    )
    return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_keys": duplicates})


@dg.asset_check(
    asset=RIDE_WINDOW_AGGREGATES.name,
    additional_deps=[RAW_RIDES.name],
    description="Each ride of raw_rides that the window stream has read is counted once: on time in trip_count or "
    "late in late_trip_count. Read at the windows' newest reconcile (before the first: as the table stands), so it "
    "holds while the stream writes.",
)
def windows_count_each_ride_once(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    from streaming_pipeline.lakehouse.gold.window_reconcile import windows_count

    session = spark.get_session()
    path = lakehouse.table_path(RIDE_WINDOW_AGGREGATES.name)
    count = windows_count(session, lakehouse) if table_exists(path) else None
    if count is None:
        return dg.AssetCheckResult(
            passed=True,
            metadata={"note": "the window stream has read no whole version of raw_rides yet, or wrote all along"},
        )
    rides = count_rows(session, lakehouse.table_path(RAW_RIDES.name), version=count.raw_rides_version)
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
