"""Streams from the bronze Delta tables into the silver/gold tables (Spark and Delta I/O around the
pure transformations). Upserts are SQL MERGE INTO delta.`path`, which works over Spark Connect and in-process."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from streaming_pipeline.delta_tables import delta_path_sql, read_table, table_exists
from streaming_pipeline.resources.lakehouse import LakehouseResource
from streaming_pipeline.settings import interval_seconds
from streaming_pipeline.streaming import StreamRunReport, run_available_now
from streaming_pipeline.transformations import late_ride_counts, ride_pickup_joins, ride_window_aggregates, vendor_counts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RAW_RIDES = "raw_rides"
RAW_PICKUPS = "raw_pickup_locations"
VENDOR_COUNTS = "vendor_counts"
WINDOWS = "ride_window_aggregates"
JOINS = "ride_pickup_joins"

_WINDOW_KEY = "t.window_start = s.window_start AND t.vendor_id <=> s.vendor_id"


def _delta_stream(spark: SparkSession, lakehouse: LakehouseResource, table: str) -> DataFrame:
    return (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", lakehouse.max_files_per_trigger)
        .load(lakehouse.table_path(table))
    )


def update_vendor_counts(spark: SparkSession, lakehouse: LakehouseResource, log: Any = None) -> StreamRunReport:
    """Complete-mode running count: every micro-batch rewrites the small table from Spark's state."""

    def start_writer():  # type: ignore[no-untyped-def]
        counts = vendor_counts(_delta_stream(spark, lakehouse, RAW_RIDES))
        return (
            counts.writeStream.format("delta")
            .outputMode("complete")
            .option("checkpointLocation", lakehouse.checkpoint_path(VENDOR_COUNTS))
            .option("path", lakehouse.table_path(VENDOR_COUNTS))
        )

    return run_available_now(VENDOR_COUNTS, start_writer, log=log)


@dataclass
class WindowUpsert:
    """foreachBatch handler: upsert the windows Spark updated in this micro-batch (absolute values,
    so replaying a batch after a crash writes the same rows again)."""

    table_path: str

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
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
        if not table_exists(spark, self.table_path):
            updates.write.format("delta").mode("append").save(self.table_path)
            return
        view = f"window_updates_{batch_id}"
        updates.createOrReplaceTempView(view)
        # A final window is frozen: Spark can still add a late ride in the first micro-batch of a run (its
        # late-event watermark lags one batch); the reconcile step counts it as late.
        spark.sql(
            f"MERGE INTO {delta_path_sql(self.table_path)} t USING {view} s ON {_WINDOW_KEY} "
            "WHEN MATCHED AND NOT t.is_final THEN UPDATE SET trip_count = s.trip_count, "
            "total_amount_sum = s.total_amount_sum, max_pickup_datetime = s.max_pickup_datetime "
            "WHEN NOT MATCHED THEN INSERT *"
        )
        spark.catalog.dropTempView(view)


@dataclass
class WindowRunResult:
    report: StreamRunReport
    watermark: Any
    windows_changed_by_reconcile: int


def update_ride_window_aggregates(
    spark: SparkSession, lakehouse: LakehouseResource, log: Any = None
) -> WindowRunResult:
    """Stream the windows, then make late rides and finality visible.

    Spark's watermark drops rides that arrive after their window was finalized. After the stream,
    every window's `late_trip_count` is set to the rides of `raw_rides` that the on-time count left
    out, windows made only of late rides are added, and `is_final` is set where the watermark
    (latest pickup seen minus RIDE_WATERMARK_DELAY) has passed the window's end.
    """
    table_path = lakehouse.table_path(WINDOWS)
    handler = WindowUpsert(table_path)

    def start_writer():
        windows = ride_window_aggregates(
            _delta_stream(spark, lakehouse, RAW_RIDES), lakehouse.window_duration, lakehouse.watermark_delay
        )
        return (
            windows.writeStream.outputMode("update")
            .foreachBatch(handler)
            .option("checkpointLocation", lakehouse.checkpoint_path(WINDOWS))
        )

    report = run_available_now(WINDOWS, start_writer, log=log)
    if not table_exists(spark, table_path):
        return WindowRunResult(report, None, 0)
    watermark, changed = _reconcile_windows(spark, lakehouse, table_path)
    return WindowRunResult(report, watermark, changed)


def _reconcile_windows(spark: SparkSession, lakehouse: LakehouseResource, table_path: str) -> tuple[Any, int]:
    current = read_table(spark, table_path)
    latest_pickup = current.agg(F.max("max_pickup_datetime")).collect()[0][0]
    delay = timedelta(seconds=interval_seconds(lakehouse.ride_watermark_delay, name="RIDE_WATERMARK_DELAY"))
    watermark = None if latest_pickup is None else latest_pickup - delay
    all_windows = ride_window_aggregates(read_table(spark, lakehouse.table_path(RAW_RIDES)), lakehouse.window_duration)
    late = late_ride_counts(all_windows, current).alias("l")
    is_final = (F.col("window_end") <= F.lit(watermark)) if watermark is not None else F.lit(False)
    existing = current.alias("c").join(
        late, (F.col("c.window_start") == F.col("l.window_start")) & F.col("c.vendor_id").eqNullSafe(F.col("l.vendor_id")), "left"
    ).select(
        F.col("c.window_start").alias("window_start"),
        F.col("c.window_end").alias("window_end"),
        F.col("c.vendor_id").alias("vendor_id"),
        F.col("c.trip_count").alias("trip_count"),
        F.col("c.total_amount_sum").alias("total_amount_sum"),
        F.col("c.max_pickup_datetime").alias("max_pickup_datetime"),
        F.coalesce(F.col("l.late_trip_count"), F.lit(0)).cast("long").alias("late_trip_count"),
        F.col("c.late_trip_count").alias("old_late"),
        F.col("c.is_final").alias("old_final"),
    ).withColumn("is_final", is_final)
    changed_existing = existing.where(
        (F.col("late_trip_count") != F.col("old_late")) | (F.col("is_final") != F.col("old_final"))
    ).drop("old_late", "old_final")
    late_only = late.join(current.select("window_start", "vendor_id").alias("c2"),
                          (F.col("l.window_start") == F.col("c2.window_start")) & F.col("l.vendor_id").eqNullSafe(F.col("c2.vendor_id")),
                          "left_anti").select(
        "l.window_start", "l.window_end", "l.vendor_id",
        F.lit(0).cast("long").alias("trip_count"),
        F.lit(0.0).alias("total_amount_sum"),
        F.lit(None).cast("timestamp").alias("max_pickup_datetime"),
        F.col("l.late_trip_count").cast("long").alias("late_trip_count"),
    ).withColumn("is_final", is_final)
    changes = changed_existing.unionByName(late_only).localCheckpoint()
    count = changes.count()
    if count:
        changes.createOrReplaceTempView("window_reconcile_changes")
        spark.sql(
            f"MERGE INTO {delta_path_sql(table_path)} t USING window_reconcile_changes s ON {_WINDOW_KEY} "
            "WHEN MATCHED THEN UPDATE SET late_trip_count = s.late_trip_count, is_final = s.is_final "
            "WHEN NOT MATCHED THEN INSERT *"
        )
        spark.catalog.dropTempView("window_reconcile_changes")
    return watermark, count


def update_ride_pickup_joins(spark: SparkSession, lakehouse: LakehouseResource, log: Any = None) -> StreamRunReport:
    """Stream-stream inner join, both sides watermarked, appended to Delta (exactly once via the checkpoint)."""

    def start_writer():
        joined = ride_pickup_joins(
            _delta_stream(spark, lakehouse, RAW_RIDES),
            _delta_stream(spark, lakehouse, RAW_PICKUPS),
            lakehouse.join_gap,
            lakehouse.watermark_delay,
        )
        return (
            joined.writeStream.format("delta")
            .outputMode("append")
            .option("checkpointLocation", lakehouse.checkpoint_path(JOINS))
            .option("path", lakehouse.table_path(JOINS))
        )

    return run_available_now(JOINS, start_writer, log=log)


HIGH_AMOUNT = "high_amount_rides"
LOW_AMOUNT = "low_amount_rides"
TAXI_ZONES = "taxi_zones"
RIDES_ENRICHED = "rides_enriched"


@dataclass
class AmountBranchWriter:
    """foreachBatch handler that branches each micro-batch of raw_rides into the high- and low-amount tables.

    Both appends carry (txnAppId, txnVersion=batch id), so a batch replayed after a crash is skipped by a table
    that has it. An Observation counts the rides with no total_amount (they go to neither table); the count
    travels in the marker of the low-amount commit, which is written after the high-amount one.
    """

    high_path: str
    low_path: str
    threshold: float

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        import uuid

        from pyspark.sql import Observation

        from streaming_pipeline.kafka_ingestion import append_once
        from streaming_pipeline.transformations import high_amount_rides, low_amount_rides

        attempt = uuid.uuid4().hex
        observation = Observation(f"branch-{batch_id}-{attempt}")
        observed = batch.observe(observation, F.count(F.when(F.col("total_amount").isNull(), 1)).alias("null_amount"))
        wrote_high = append_once(
            high_amount_rides(observed, self.threshold), self.high_path, f"branch:{HIGH_AMOUNT}", batch_id, attempt
        )
        null_amount = int(observation.get["null_amount"]) if wrote_high else None
        append_once(
            low_amount_rides(batch, self.threshold),
            self.low_path,
            f"branch:{LOW_AMOUNT}",
            batch_id,
            attempt,
            extra={"null_amount_rides": null_amount},
        )


@dataclass
class BranchRunResult:
    report: StreamRunReport
    high_rows: int
    low_rows: int
    null_amount_rides: int


def update_amount_branches(spark: SparkSession, lakehouse: LakehouseResource, log: Any = None) -> BranchRunResult:
    """Branch raw_rides by total_amount (>= HIGH_AMOUNT_THRESHOLD goes high, below goes low, null to neither)."""
    from streaming_pipeline.kafka_ingestion import commits_since
    from streaming_pipeline.delta_tables import table_version

    high_path, low_path = lakehouse.table_path(HIGH_AMOUNT), lakehouse.table_path(LOW_AMOUNT)
    handler = AmountBranchWriter(high_path, low_path, lakehouse.high_amount_threshold)
    before = table_version(spark, high_path), table_version(spark, low_path)

    def start_writer():  # type: ignore[no-untyped-def]
        return (
            _delta_stream(spark, lakehouse, RAW_RIDES)
            .writeStream.foreachBatch(handler)
            .option("checkpointLocation", lakehouse.checkpoint_path(f"{HIGH_AMOUNT}+{LOW_AMOUNT}"))
        )

    report = run_available_now("amount_branches", start_writer, log=log)
    high = commits_since(spark, high_path, before[0], f"branch:{HIGH_AMOUNT}")
    low = commits_since(spark, low_path, before[1], f"branch:{LOW_AMOUNT}")
    return BranchRunResult(
        report,
        high_rows=sum(c.rows for c in high),
        low_rows=sum(c.rows for c in low),
        null_amount_rides=sum(int(c.marker.get("null_amount_rides") or 0) for c in low),
    )


def refresh_taxi_zones(spark: SparkSession, lakehouse: LakehouseResource) -> bool:
    """Load the zone lookup into its Delta table when the table differs from the CSV; True when it changed.

    An unchanged lookup writes nothing, so re-running leaves the table's version as it is.
    """
    from streaming_pipeline.taxi_zones import read_taxi_zones

    path = lakehouse.table_path(TAXI_ZONES)
    zones = read_taxi_zones(spark, lakehouse.taxi_zones_csv)
    if table_exists(spark, path):
        current = read_table(spark, path)
        if current.exceptAll(zones).isEmpty() and zones.exceptAll(current).isEmpty():
            return False
    zones.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
    return True


@dataclass
class EnrichmentRunResult:
    report: StreamRunReport
    unknown_pickup_zones: int
    unknown_dropoff_zones: int


def update_rides_enriched(spark: SparkSession, lakehouse: LakehouseResource, log: Any = None) -> EnrichmentRunResult:
    """Every ride of raw_rides once, with the boroughs and zones of its pickup and dropoff locations.

    A stream-static join: each micro-batch joins the zone table as it is then (broadcast). Rides already
    enriched keep the zones they were enriched with when the lookup changes later.
    """
    from streaming_pipeline.transformations import enrich_rides_with_zones

    def start_writer():  # type: ignore[no-untyped-def]
        zones = read_table(spark, lakehouse.table_path(TAXI_ZONES))
        enriched = enrich_rides_with_zones(_delta_stream(spark, lakehouse, RAW_RIDES), zones).observe(
            "enrichment",
            F.count(F.when(F.col("pu_zone").isNull(), 1)).alias("unknown_pickup_zones"),
            F.count(F.when(F.col("do_zone").isNull(), 1)).alias("unknown_dropoff_zones"),
        )
        return (
            enriched.writeStream.format("delta")
            .outputMode("append")
            .option("checkpointLocation", lakehouse.checkpoint_path(RIDES_ENRICHED))
            .option("path", lakehouse.table_path(RIDES_ENRICHED))
        )

    report = run_available_now(RIDES_ENRICHED, start_writer, log=log)
    observed = report.observed_metrics("enrichment")
    return EnrichmentRunResult(
        report,
        unknown_pickup_zones=observed.get("unknown_pickup_zones", 0),
        unknown_dropoff_zones=observed.get("unknown_dropoff_zones", 0),
    )
