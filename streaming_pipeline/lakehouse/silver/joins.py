"""The ride_pickup_joins stream (stream-stream join of raw_rides and raw_pickup_locations) and join_late_rows, the
rows its watermark dropped, per micro-batch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.engine.delta_tables import create_if_missing
from streaming_pipeline.lakehouse.engine.streams import (
    EPOCH,
    Log,
    QueryRun,
    StreamQuery,
    StreamRunReport,
    delta_stream,
)
from streaming_pipeline.lakehouse.silver.transformations import ride_pickup_joins
from streaming_pipeline.lakehouse.tables import JOIN_LATE_ROWS, RAW_PICKUP_LOCATIONS, RAW_RIDES, RIDE_PICKUP_JOINS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streaming_pipeline.lakehouse.connections import Lakehouse

JOINS = RIDE_PICKUP_JOINS.name


@dataclass
class JoinRunResult:
    report: StreamRunReport
    rows_dropped_by_watermark: int  # rows of either side that arrived at or before the join's watermark, this run
    watermark: Any = None  # the join's watermark in the run's last micro-batch
    batches_recorded: int = 0  # rows appended to join_late_rows


def ride_pickup_joins_query(
    spark: SparkSession,
    lakehouse: Lakehouse,
    *,
    join_max_gap: str,
    watermark_delay: str,
    run_id: str | None = None,
    log: Log | None = None,
) -> StreamQuery:
    """Stream-stream inner join, both sides watermarked, appended to Delta (exactly once via the checkpoint).

    A ride or pickup that arrives with an event time at or before the watermark of the previous micro-batch
    (the latest event time seen on the slower side minus RIDE_WATERMARK_DELAY) cannot be joined any more: Spark
    drops it. Kept running, each report of the query's progress records the micro-batches that dropped rows in
    `join_late_rows` (an availableNow run records its whole run at its end).
    """

    def start_writer() -> DataStreamWriter:
        joined = ride_pickup_joins(
            delta_stream(spark, lakehouse, RAW_RIDES.name),
            delta_stream(spark, lakehouse, RAW_PICKUP_LOCATIONS.name),
            join_max_gap,
            watermark_delay,
        )
        return (
            joined.writeStream.format("delta")
            .outputMode("append")
            .option("checkpointLocation", lakehouse.checkpoint_path(JOINS))
            .option("path", lakehouse.table_path(JOINS))
        )

    def on_progress(report: StreamRunReport) -> tuple[int, int]:
        return _record_late_rows(spark, lakehouse, report, run_id, log)

    return StreamQuery(JOINS, start_writer, tables=(JOINS, JOIN_LATE_ROWS.name), on_progress=on_progress)


def join_run_result(run: QueryRun) -> JoinRunResult:
    """What one availableNow run of the join (`engine.streams.run_once`) did: the rows its watermark dropped, its
    last watermark, and the rows its `on_progress` appended to `join_late_rows` (which the first run creates)."""
    recorded, dropped = run.progress
    report = run.report
    last = (report.progresses[-1].get("eventTime") or {}).get("watermark") if report.progresses else None
    watermark = datetime.fromisoformat(last.replace("Z", "+00:00")) if last else None
    return JoinRunResult(report, dropped, watermark, recorded)


def _record_late_rows(
    spark: SparkSession, lakehouse: Lakehouse, report: StreamRunReport, run_id: str | None, log: Log | None
) -> tuple[int, int]:
    """(rows appended to join_late_rows, rows the watermark dropped) for the micro-batches of `report`."""
    recorded = record_join_late_rows(spark, lakehouse.table_path(JOIN_LATE_ROWS.name), join_late_rows(report, run_id))
    dropped = report.rows_dropped_by_watermark()
    if dropped and log is not None:
        log.warning(
            f"{JOINS}: {dropped} row(s) arrived behind the join's watermark and were dropped "
            f"(see {JOIN_LATE_ROWS.name})"
        )
    return recorded, dropped


def join_late_rows(report: StreamRunReport, run_id: str | None) -> list[tuple[Any, ...]]:
    """One row per micro-batch whose watermark dropped rows: (query id, batch id, input rows, rows dropped by
    the watermark, the batch's watermark in epoch microseconds, run id)."""
    rows = []
    for progress in report.progresses:
        dropped = sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in progress.get("stateOperators", []))
        inputs = int(progress.get("numInputRows") or 0)
        if not dropped:
            continue
        text = (progress.get("eventTime") or {}).get("watermark")
        micros = (
            (datetime.fromisoformat(text.replace("Z", "+00:00")) - EPOCH) // timedelta(microseconds=1) if text else None
        )
        rows.append((str(progress.get("id")), int(progress["batchId"]), inputs, dropped, micros, run_id))
    return rows


def record_join_late_rows(spark: SparkSession, path: str, rows: list[tuple[Any, ...]]) -> int:
    """Append `rows` (see join_late_rows) to the table at `path`, once: the append carries the query id and its
    last batch id as txnAppId/txnVersion, so recording the same batches again adds nothing. The rows that were
    appended. With no rows the table is created empty when it does not exist yet, so that it can be queried
    (and is empty) before the watermark has dropped anything."""
    from pyspark.sql import functions as F

    if not rows:
        create_if_missing(spark, path, JOIN_LATE_ROWS.ddl)
        return 0
    frame = spark.createDataFrame(
        rows,
        "query_id STRING, batch_id BIGINT, input_rows BIGINT, rows_dropped_by_watermark BIGINT, watermark_micros "
        "BIGINT, run_id STRING",
    ).select(
        "query_id",
        "batch_id",
        "input_rows",
        "rows_dropped_by_watermark",
        F.timestamp_micros("watermark_micros").alias("watermark"),
        "run_id",
        F.current_timestamp().alias("recorded_at"),
    )
    before = latest_version(path)
    (
        frame.write.format("delta")
        .mode("append")
        .option("txnAppId", f"{JOIN_LATE_ROWS.name}:{rows[-1][0]}")
        .option("txnVersion", max(int(r[1]) for r in rows))
        .save(path)
    )
    return len(rows) if latest_version(path) != before else 0
