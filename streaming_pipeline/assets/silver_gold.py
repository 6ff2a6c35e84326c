"""Silver/gold assets: streams from the bronze Delta tables (true lineage in the asset graph)."""

from typing import TYPE_CHECKING

import dagster as dg

from streaming_pipeline.assets import tables
from streaming_pipeline.assets.bronze import raw_pickup_locations, raw_rides
from streaming_pipeline.assets.metadata import (
    OWNERS,
    SharedSpecArgs,
    checkpoint_pool,
    delta_table_metadata,
    step_priority,
)
from streaming_pipeline.delta_streams import (
    JOIN_LATE_ROWS,
    JOINS,
    RAW_PICKUPS,
    RAW_RIDES,
    VENDOR_COUNTS,
    WINDOWS,
    update_ride_pickup_joins,
    update_ride_window_aggregates,
    update_vendor_counts,
)
from streaming_pipeline.delta_tables import read_table, table_exists
from streaming_pipeline.resources import LakehouseResource, SparkResource

if TYPE_CHECKING:
    import pandas as pd

MAX_CHART_WINDOWS = 200


def _sources_missing(context: dg.AssetExecutionContext, lakehouse: LakehouseResource, *names: str) -> list[str]:
    missing = [n for n in names if not table_exists(lakehouse.table_path(n))]
    if missing:
        context.log.warning(f"source table(s) {', '.join(missing)} not created yet: nothing to stream")
    return missing


def _stream_metadata(report) -> dict:
    return {
        "rows_read": dg.MetadataValue.int(report.input_rows),
        "micro_batches": dg.MetadataValue.int(report.batches),
    }


@dg.asset(
    group_name="gold",
    deps=[raw_rides],
    kinds={"spark", "delta"},
    owners=OWNERS,
    tags={"layer": "gold"},
    automation_condition=dg.AutomationCondition.eager(),
    pool=checkpoint_pool("vendor_counts"),
    op_tags=step_priority("vendor_counts"),
    metadata={"dagster/column_schema": tables.VENDOR_COUNTS},
)
def vendor_counts(
    context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource
) -> dg.MaterializeResult:
    """Number of rides per vendor over everything ingested (a running count, stream/table duality)."""
    session = spark.get_session()
    if _sources_missing(context, lakehouse, RAW_RIDES):
        return dg.MaterializeResult(metadata={"skipped": "raw_rides does not exist yet"})
    report = update_vendor_counts(session, lakehouse, log=context.log)
    return dg.MaterializeResult(
        metadata={
            **_stream_metadata(report),
            **delta_table_metadata(session, lakehouse.table_path(VENDOR_COUNTS), preview_order=["vendor_id"]),
        }
    )


@dg.asset(
    group_name="gold",
    deps=[raw_rides],
    kinds={"spark", "delta"},
    owners=OWNERS,
    tags={"layer": "gold"},
    automation_condition=dg.AutomationCondition.eager(),
    pool=checkpoint_pool("ride_window_aggregates"),
    op_tags=step_priority("ride_window_aggregates"),
    metadata={"dagster/column_schema": tables.RIDE_WINDOW_AGGREGATES},
)
def ride_window_aggregates(
    context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource
) -> dg.MaterializeResult:
    """Trips and revenue per vendor in event-time tumbling windows of RIDE_WINDOW_DURATION on pickup
    time, upserted as they change; `is_final` once the watermark (RIDE_WATERMARK_DELAY) passed the
    window end; rides arriving after that are counted in `late_trip_count`, never dropped silently."""
    session = spark.get_session()
    if _sources_missing(context, lakehouse, RAW_RIDES):
        return dg.MaterializeResult(metadata={"skipped": "raw_rides does not exist yet"})
    result = update_ride_window_aggregates(session, lakehouse, log=context.log)
    path = lakehouse.table_path(WINDOWS)
    metadata = {
        **_stream_metadata(result.report),
        **delta_table_metadata(session, path, preview_order=["window_start", "vendor_id"]),
    }
    if table_exists(path):
        from pyspark.sql import functions as F

        from streaming_pipeline.charts import png_markdown, window_chart_png  # matplotlib: only when drawing

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


JOIN_LATE_ROWS_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn(
            "query_id", "string", description="The join query (its checkpoint); batch ids restart with a new one."
        ),
        dg.TableColumn("batch_id", "bigint", description="Micro-batch of the join query."),
        dg.TableColumn("input_rows", "bigint", description="Rides and pickups the micro-batch read."),
        dg.TableColumn(
            "rows_dropped_by_watermark",
            "bigint",
            description="Rides or pickups that arrived at or before the watermark of the previous micro-batch: "
            "too late to be joined, dropped by Spark.",
        ),
        dg.TableColumn("watermark", "timestamp", description="The join's watermark in this micro-batch (UTC)."),
        dg.TableColumn("run_id", "string", description="The Dagster run."),
        dg.TableColumn("recorded_at", "timestamp", description="When the row was written (UTC)."),
    ]
)

_JOIN_SPEC = SharedSpecArgs(
    group_name="silver",
    deps=[raw_rides, raw_pickup_locations],
    kinds={"spark", "delta"},
    owners=OWNERS,
    tags={"layer": "silver"},
    automation_condition=dg.AutomationCondition.eager(),
)


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            JOINS,
            description="Rides joined with pickups at their dropoff zone within JOIN_MAX_GAP (inclusive) of the "
            "dropoff, one row per matching pair (stream-stream join, watermarked on both sides).",
            metadata={"dagster/column_schema": tables.RIDE_PICKUP_JOINS},
            **_JOIN_SPEC,
        ),
        dg.AssetSpec(
            JOIN_LATE_ROWS,
            description="Per micro-batch of the ride_pickup_joins query that dropped rows: how many rides and "
            "pickups arrived behind its watermark and were dropped (never joined), so that they are counted, not "
            "lost silently. The first run of the join creates it (empty until the watermark drops a row).",
            metadata={"dagster/column_schema": JOIN_LATE_ROWS_SCHEMA},
            **_JOIN_SPEC,
        ),
    ],
    pool=checkpoint_pool("ride_pickup_joins"),
    op_tags=step_priority("ride_pickup_joins"),
)
def ride_pickup_joins(context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource):
    """The stream-stream join, and the count of rows its watermark dropped."""
    session = spark.get_session()
    if _sources_missing(context, lakehouse, RAW_RIDES, RAW_PICKUPS):
        for name in (JOINS, JOIN_LATE_ROWS):
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
    late_path = lakehouse.table_path(JOIN_LATE_ROWS)
    if table_exists(late_path):
        from pyspark.sql import functions as F

        total = read_table(session, late_path).agg(F.sum("rows_dropped_by_watermark")).collect()[0][0]
        late["rows_dropped_by_watermark_total"] = dg.MetadataValue.int(int(total or 0))
    yield dg.MaterializeResult(
        asset_key=JOINS,
        metadata={
            **_stream_metadata(result.report),
            **late,
            **delta_table_metadata(session, lakehouse.table_path(JOINS)),
        },
    )
    yield dg.MaterializeResult(
        asset_key=JOIN_LATE_ROWS,
        metadata={
            **late,
            "micro_batches_recorded": dg.MetadataValue.int(result.batches_recorded),
            **delta_table_metadata(session, late_path, preview_order=["query_id", "batch_id"]),
        },
    )
