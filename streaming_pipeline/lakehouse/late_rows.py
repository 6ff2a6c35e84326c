"""The late rows of a watermarked streaming table: one row per micro-batch whose watermark dropped input rows (rows
that arrived at or before the previous micro-batch's watermark, too late to be joined or counted), so that they are
counted, not lost silently. A streaming table declares the table that records them (`late_rows_table`); its query
records them after each run (and, kept running, after each report of its progress).

Plain Python and Spark, no Dagster.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.engine.delta_tables import create_if_missing
from streaming_pipeline.lakehouse.engine.streams import EPOCH, Log, QueryRun, StreamRunReport
from streaming_pipeline.lakehouse.table_model import Column, ddl

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LATE_ROWS_COLUMNS = (
    Column("query_id", "string", "The streaming query (its checkpoint); batch ids restart with a new one."),
    Column("batch_id", "bigint", "Micro-batch of the query."),
    Column("input_rows", "bigint", "Rows the micro-batch read, of every table it streams."),
    Column(
        "rows_dropped_by_watermark",
        "bigint",
        "Rows that arrived at or before the watermark of the previous micro-batch: too late to be joined or "
        "counted, dropped by Spark.",
    ),
    Column("watermark", "timestamp", "The query's watermark in this micro-batch (UTC)."),
    Column("run_id", "string", "The Dagster run."),
    Column("recorded_at", "timestamp", "When the row was written (UTC)."),
)


@dataclass(frozen=True)
class LateRows:
    """What one run of a watermarked query dropped, and what it recorded of it."""

    rows_dropped_by_watermark: int  # rows of its streamed inputs behind the watermark, this run
    batches_recorded: int  # rows appended to the late-rows table (one per micro-batch that dropped rows)
    watermark: datetime | None = None  # the watermark in the run's last micro-batch; None before one is set


def late_rows_of(run: QueryRun) -> LateRows:
    """What the late-rows recorder of a query (`LateRowsRecorder`) found in one availableNow run."""
    recorded, dropped = run.progress if run.progress is not None else (0, run.report.rows_dropped_by_watermark())
    progresses = run.report.progresses
    last = (progresses[-1].get("eventTime") or {}).get("watermark") if progresses else None
    watermark = datetime.fromisoformat(last.replace("Z", "+00:00")) if last else None
    # Spark reports the epoch until a micro-batch has seen event times: no watermark yet.
    return LateRows(dropped, recorded, watermark if watermark != EPOCH else None)


@dataclass
class LateRowsRecorder:
    """A query's `on_progress`: the micro-batches that dropped rows appended to the late-rows table at `path`, once
    (the append carries the query id and its last batch id as txnAppId/txnVersion, so recording the same batches
    again adds nothing), and a warning to `log`. Returns (rows recorded, rows dropped)."""

    spark: SparkSession
    query: str  # the streaming table's name, for the warning
    table: str  # the late-rows table's name (its txnAppId) ...
    path: str  # ... and where it is
    run_id: str | None = None
    log: Log | None = None

    def __call__(self, report: StreamRunReport) -> tuple[int, int]:
        recorded = record_late_rows(self.spark, self.table, self.path, late_row_records(report, self.run_id))
        dropped = report.rows_dropped_by_watermark()
        if dropped and self.log is not None:
            self.log.warning(
                f"{self.query}: {dropped} row(s) arrived behind its watermark and were dropped (see {self.table})"
            )
        return recorded, dropped


def late_row_records(report: StreamRunReport, run_id: str | None) -> list[tuple[Any, ...]]:
    """One row per micro-batch whose watermark dropped rows: (query id, batch id, input rows, rows dropped by the
    watermark, the batch's watermark in epoch microseconds, run id)."""
    rows = []
    for progress in report.progresses:
        dropped = sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in progress.get("stateOperators", []))
        if not dropped:
            continue
        text = (progress.get("eventTime") or {}).get("watermark")
        micros = (
            (datetime.fromisoformat(text.replace("Z", "+00:00")) - EPOCH) // timedelta(microseconds=1) if text else None
        )
        inputs = int(progress.get("numInputRows") or 0)
        rows.append((str(progress.get("id")), int(progress["batchId"]), inputs, dropped, micros, run_id))
    return rows


def record_late_rows(spark: SparkSession, table: str, path: str, rows: list[tuple[Any, ...]]) -> int:
    """Append `rows` (see late_row_records) to the table at `path`, once; the rows appended. With no rows the table
    is created empty when it does not exist yet, so that it can be queried (and is empty) before the watermark has
    dropped anything."""
    from pyspark.sql import functions as F

    if not rows:
        create_if_missing(spark, path, ddl(LATE_ROWS_COLUMNS))
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
        .option("txnAppId", f"{table}:{rows[-1][0]}")
        .option("txnVersion", max(int(r[1]) for r in rows))
        .save(path)
    )
    return len(rows) if latest_version(path) != before else 0
