"""The ride_window_aggregates table's own sink and reconcile, the hooks its declaration
(`defs/gold/ride_window_aggregates.py`) gives its query: event-time windows of raw_rides upserted (`window_upsert`),
then reconciled (late rides and finality, `gold.window_reconcile`). Upserts are SQL MERGE INTO delta.`path`, which
works over Spark Connect and in-process."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streaming_pipeline.lakehouse.engine.delta_tables import delta_path_sql, table_exists
from streaming_pipeline.lakehouse.gold.window_reconcile import (
    WINDOW_KEY,
    WindowReconcile,
    reconcile_ride_windows,
    stream_position,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streaming_pipeline.lakehouse.streaming_tables import TableTarget


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


def window_upsert(target: TableTarget) -> WindowUpsert:
    """The windows' foreachBatch handler for a run of their query starting now: the windows final when it starts
    (by the watermark its checkpoint recorded) are frozen for it (see WindowUpsert)."""
    before = stream_position(target.checkpoint_path)
    return WindowUpsert(target.table_path, before.watermark_micros if before else None)


def reconcile_after_run(target: TableTarget) -> WindowReconcile:
    """The windows' reconcile, with the query at rest (it reads the table and the checkpoint at the same
    micro-batch): `late_trip_count` of the windows that rides added since the previous reconcile fall in (windows
    made only of late rides are added), and `is_final` where the watermark (latest pickup seen minus the watermark
    delay) has passed the window's end; its `seconds` set."""
    started = time.monotonic()
    reconcile = reconcile_ride_windows(
        target.spark, target.lakehouse, window_duration=target.parameters["window_duration"], log=target.log
    )
    reconcile.seconds = time.monotonic() - started
    return reconcile
