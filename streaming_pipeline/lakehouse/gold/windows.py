"""The ride_window_aggregates stream: event-time windows of raw_rides, upserted, then reconciled (late rides and
finality, `gold.window_reconcile`). Upserts are SQL MERGE INTO delta.`path`, which works over Spark Connect and
in-process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.engine.delta_tables import delta_path_sql, table_exists
from streaming_pipeline.lakehouse.engine.run_log import Log
from streaming_pipeline.lakehouse.engine.streams import (
    QueryRun,
    StreamQuery,
    StreamRunReport,
    delta_stream,
    run_available_now,
)
from streaming_pipeline.lakehouse.gold.transformations import ride_window_aggregates
from streaming_pipeline.lakehouse.gold.window_reconcile import (
    WINDOW_KEY,
    WINDOWS,
    WindowReconcile,
    reconcile_ride_windows,
    stream_position,
)
from streaming_pipeline.lakehouse.tables import RAW_RIDES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streaming_pipeline.lakehouse.connections import Lakehouse


@dataclass
class WindowUpsert:
    """foreachBatch handler: upsert the windows Spark updated in this micro-batch (absolute values,
    so replaying a batch after a crash writes the same rows again).

    Spark's late-event watermark lags one micro-batch, so it can still count a ride whose window was final when
    the run started (it ended at or before `final_before_micros`, the stream's watermark then, in epoch
    microseconds). Such a ride is the reconcile step's to count as late: a final window is frozen here, and a
    window new to the table that ended by then is left for the reconcile to add, as made of late rides only.
    """

    table_path: str
    final_before_micros: int | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Upsert one micro-batch of windows.

        Args:
            batch: The windows Spark updated in the micro-batch (the columns of `ride_window_aggregates`).
            batch_id: Spark's id of the micro-batch (names the batch's temporary view).
        """
        from pyspark.sql import functions as F

        spark = batch.sparkSession
        updates = batch.select(
            "window_start",
            "window_end",
            "vendor_id",
            "trip_count",
            "total_amount_sum",
            "max_pickup_datetime",
            F.lit(0).cast("long").alias("late_trip_count"),
            F.lit(False).alias("is_final"),
        )
        if not table_exists(self.table_path):
            updates.write.format("delta").mode("append").save(self.table_path)
            return
        view = f"window_updates_{batch_id}"
        updates.createOrReplaceTempView(view)
        open_when_run_started = (
            f" AND s.window_end > timestamp_micros({int(self.final_before_micros)})"
            if self.final_before_micros is not None
            else ""
        )
        spark.sql(
            f"MERGE INTO {delta_path_sql(self.table_path)} t USING {view} s ON {WINDOW_KEY} "
            f"WHEN MATCHED AND NOT t.is_final{open_when_run_started} THEN UPDATE SET trip_count = s.trip_count, "
            "total_amount_sum = s.total_amount_sum, max_pickup_datetime = s.max_pickup_datetime "
            f"WHEN NOT MATCHED{open_when_run_started} THEN INSERT *"
        )
        spark.catalog.dropTempView(view)


@dataclass
class WindowRunResult:
    """What a windows run (`window_run_result`) did: the stream's report, then its reconcile."""

    report: StreamRunReport
    watermark: Any
    windows_changed_by_reconcile: int
    reconcile: WindowReconcile = field(default_factory=WindowReconcile)


def window_run_result(run: QueryRun) -> WindowRunResult:
    """What one availableNow run of `ride_windows_query` (`engine.streams.run_once`) did: its stream's report, then
    its reconcile (the query's `after_stop`), which set `late_trip_count` of the windows that rides added since the
    previous reconcile fall in (windows made only of late rides are added), and `is_final` where the watermark
    (latest pickup seen minus the watermark delay) has passed the window's end.

    Args:
        run: The run.

    Returns:
        The stream's report and the reconcile's outcome (its `seconds` set).
    """
    reconcile: WindowReconcile = run.after_stop
    reconcile.seconds = run.after_stop_seconds
    return WindowRunResult(run.report, reconcile.watermark, reconcile.windows, reconcile)


def ride_windows_query(
    spark: SparkSession, lakehouse: Lakehouse, *, window_duration: str, watermark_delay: str, log: Log | None = None
) -> StreamQuery:
    """The windows of `window_duration` (a Spark interval) streamed from raw_rides, watermarked `watermark_delay`
    behind the latest pickup, and upserted. The reconcile needs the query stopped (it reads the table and the
    checkpoint at the same micro-batch): it is the query's `after_stop`.

    Args:
        spark: The session to run on.
        lakehouse: Where raw_rides, the windows table and its checkpoint are.
        window_duration: The windows' length, a Spark interval.
        watermark_delay: How far behind the latest pickup a ride still counts on time, a Spark interval.
        log: Where the reconcile reports (none when None).

    Returns:
        The query, named after the windows table, ready to start with any trigger.
    """

    def start_writer() -> DataStreamWriter:
        # The windows final when this run of the query starts are frozen for it (see WindowUpsert).
        before = stream_position(lakehouse.checkpoint_path(WINDOWS))
        handler = WindowUpsert(lakehouse.table_path(WINDOWS), before.watermark_micros if before else None)
        windows = ride_window_aggregates(
            delta_stream(spark, lakehouse, RAW_RIDES.name), window_duration, watermark_delay
        )
        return (
            windows.writeStream.outputMode("update")
            .foreachBatch(handler)
            .option("checkpointLocation", lakehouse.checkpoint_path(WINDOWS))
        )

    return StreamQuery(
        WINDOWS,
        start_writer,
        tables=(WINDOWS,),
        after_stop=lambda: reconcile_ride_windows(spark, lakehouse, window_duration=window_duration, log=log),
    )


def stream_ride_windows(
    spark: SparkSession, lakehouse: Lakehouse, *, window_duration: str, watermark_delay: str, log: Log | None = None
) -> StreamRunReport:
    """The streaming half of a windows run: one availableNow run of `ride_windows_query`, not reconciled.

    Args:
        spark: The session to run on.
        lakehouse: Where raw_rides, the windows table and its checkpoint are.
        window_duration: The windows' length, a Spark interval.
        watermark_delay: How far behind the latest pickup a ride still counts on time, a Spark interval.
        log: Where to report the micro-batches (the streams' logger when None).

    Returns:
        What the run's micro-batches reported.
    """
    query = ride_windows_query(spark, lakehouse, window_duration=window_duration, watermark_delay=watermark_delay)
    return run_available_now(query.name, query.start_writer, log=log)
