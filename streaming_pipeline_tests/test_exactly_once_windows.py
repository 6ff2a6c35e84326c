"""Windows exactly once in the hard cases: a bronze commit racing the windows run, late rides, re-runs.

In-process Spark and Delta, no Kafka: rides are appended to raw_rides as Delta commits, as bronze does. Window
10 minutes, watermark delay 15 minutes (the defaults). Every expected row below is worked out by hand from the
rides of the test: a window [s, s + 10 min) is final once the latest on-time pickup minus 15 minutes reaches its
end; a ride that arrives for a window that is final already is late.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import pytest
from pyspark.sql import functions as F

from streaming_pipeline.definitions import defs
from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.engine.streams import StreamRunReport, run_once
from streaming_pipeline.lakehouse.gold.window_reconcile import RECONCILE_WRITER, WindowReconcile, reconcile_ride_windows
from streaming_pipeline.lakehouse.late_rows import LateRows, late_rows_of
from streaming_pipeline.lakehouse.settings import normalize_interval
from streaming_pipeline.resources.lakehouse import LakehouseResource
from streaming_pipeline_tests.project_tables import declared, default_config, stream_ride_windows, windows_query

#: The windows' and the join's parameters, as the assets pass them by default.
pytestmark = pytest.mark.slow

WINDOWS = {"window_duration": "600 seconds", "watermark_delay": "900 seconds"}
JOIN = {"join_max_gap": "600 seconds", "watermark_delay": "900 seconds"}

RIDES_DDL = (
    "vendor_id int, pickup_datetime timestamp, dropoff_datetime timestamp, do_location_id int, total_amount double, "
    "kafka_partition int, kafka_offset long"
)
UTC = dt.UTC


@dataclass
class WindowsRun:
    """What one triggered run of the windows did: its micro-batches, then its reconcile (the query's after_run)."""

    report: StreamRunReport
    reconcile: WindowReconcile


def update_ride_window_aggregates(spark, lakehouse, **windows: str) -> WindowsRun:
    """One triggered run of the windows, as the asset does it: the query run once, then its reconcile."""
    run = run_once(windows_query(spark, lakehouse, **windows))
    return WindowsRun(run.report, run.after_stop)


def update_ride_pickup_joins(spark, lakehouse, *, run_id: str | None = None, **join: str) -> LateRows:
    """One triggered run of the join, as the asset does it: its declaration's query run once, its late rows
    recorded."""
    query = declared("ride_pickup_joins").table_query()
    return late_rows_of(run_once(query.query(spark, lakehouse, join, run_id=run_id)))


def at(hour: int, minute: int) -> dt.datetime:
    return dt.datetime(2024, 3, 10, hour, minute, tzinfo=UTC)


def epoch(hour: int, minute: int) -> int:
    return int(at(hour, minute).timestamp())


@pytest.fixture()
def lakehouse(tmp_path) -> LakehouseResource:
    # The assets' defaults, as these tests pass them to the streams.
    for config, values in (
        (default_config("ride_window_aggregates"), WINDOWS),
        (default_config("ride_pickup_joins"), JOIN),
    ):
        assert {field: normalize_interval(getattr(config, field), name=field) for field in values} == values
    return LakehouseResource(root=str(tmp_path / "lakehouse"))


class Bronze:
    """Appends rides to raw_rides, one Delta commit per call, as a bronze micro-batch does. Each ride drops off at
    zone 10, five minutes after its pickup."""

    def __init__(self, spark, lakehouse: LakehouseResource) -> None:
        self.spark, self.path, self.offset = spark, lakehouse.table_path("raw_rides"), 0

    def append(self, *rides: tuple[int, dt.datetime, float]) -> int:
        rows = []
        for vendor, pickup, amount in rides:
            rows.append((vendor, pickup, pickup + dt.timedelta(minutes=5), 10, amount, 0, self.offset))
            self.offset += 1
        self.spark.createDataFrame(rows, RIDES_DDL).coalesce(1).write.format("delta").mode("append").save(self.path)
        version = latest_version(self.path)
        assert version is not None
        return version


def windows(spark, lakehouse: LakehouseResource) -> dict[tuple[int, int], tuple]:
    """{(window start as epoch seconds, vendor): (trip_count, total_amount_sum, late_trip_count, is_final)}."""
    frame = (
        spark.read.format("delta")
        .load(lakehouse.table_path("ride_window_aggregates"))
        .select(
            F.unix_seconds("window_start").alias("start"),
            F.unix_seconds("window_end").alias("end"),
            "vendor_id",
            "trip_count",
            "total_amount_sum",
            "late_trip_count",
            "is_final",
        )
    )
    rows = frame.collect()
    assert all(r.end == r.start + 600 for r in rows)
    keyed = {(r.start, r.vendor_id): (r.trip_count, r.total_amount_sum, r.late_trip_count, r.is_final) for r in rows}
    assert len(keyed) == len(rows), "a (window_start, vendor_id) appears twice"
    return keyed


def reconciled_versions(spark, lakehouse: LakehouseResource) -> list[int]:
    """The raw_rides versions the reconcile commits of the windows table recorded, oldest first."""
    path = lakehouse.table_path("ride_window_aggregates")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "userMetadata").collect()
    markers = [json.loads(c.userMetadata) for c in sorted(history, key=lambda c: c.version) if c.userMetadata]
    return [m["raw_rides_version"] for m in markers if m.get("writer") == RECONCILE_WRITER]


# ----------------------------------------------------------------------------------------------------- (a)


def test_a_bronze_commit_between_the_stream_and_the_reconcile_is_neither_late_nor_a_window_yet(spark, lakehouse):
    bronze = Bronze(spark, lakehouse)
    bronze.append((1, at(8, 1), 10.0), (1, at(8, 5), 2.5), (2, at(8, 12), 7.0), (1, at(8, 31), 4.0))
    first = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    # latest pickup 08:31 -> watermark 08:16: only [08:00, 08:10) is final
    assert windows(spark, lakehouse) == {
        (epoch(8, 0), 1): (2, 12.5, 0, True),
        (epoch(8, 10), 2): (1, 7.0, 0, False),
        (epoch(8, 30), 1): (1, 4.0, 0, False),
    }
    assert (first.reconcile.full, first.reconcile.raw_rides_version) == (True, 0)

    consumed = bronze.append((2, at(8, 33), 3.0), (1, at(8, 44), 5.0), (2, at(8, 50), 6.0))
    stream_ride_windows(spark, lakehouse, **WINDOWS)
    # A bronze run commits while the windows run is between its stream and its reconcile: on-time rides in a
    # new window of vendor 1, in the window (08:50, 2) the stream has counted once, and at 09:05.
    raced = bronze.append((1, at(8, 52), 1.0), (2, at(8, 55), 2.0), (1, at(9, 5), 3.0))
    assert raced == consumed + 1
    reconcile = reconcile_ride_windows(spark, lakehouse, window_duration=WINDOWS["window_duration"])

    # Reconciled at the version the stream consumed: the racing rides are neither late nor windows yet.
    # Latest pickup 08:50 -> watermark 08:35: windows ending by then are final.
    assert (reconcile.raw_rides_version, reconcile.full, reconcile.new_rides, reconcile.late_rides_found) == (
        consumed,
        False,
        3,
        0,
    )
    assert windows(spark, lakehouse) == {
        (epoch(8, 0), 1): (2, 12.5, 0, True),
        (epoch(8, 10), 2): (1, 7.0, 0, True),
        (epoch(8, 30), 1): (1, 4.0, 0, False),
        (epoch(8, 30), 2): (1, 3.0, 0, False),
        (epoch(8, 40), 1): (1, 5.0, 0, False),
        (epoch(8, 50), 2): (1, 6.0, 0, False),
    }

    # The next run takes the racing rides on time. Latest pickup 09:05 -> watermark 08:50.
    second = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    assert (second.reconcile.raw_rides_version, second.reconcile.new_rides, second.reconcile.late_rides_found) == (
        raced,
        3,
        0,
    )
    assert windows(spark, lakehouse) == {
        (epoch(8, 0), 1): (2, 12.5, 0, True),
        (epoch(8, 10), 2): (1, 7.0, 0, True),
        (epoch(8, 30), 1): (1, 4.0, 0, True),
        (epoch(8, 30), 2): (1, 3.0, 0, True),
        (epoch(8, 40), 1): (1, 5.0, 0, True),
        (epoch(8, 50), 1): (1, 1.0, 0, False),
        (epoch(8, 50), 2): (2, 8.0, 0, False),
        (epoch(9, 0), 1): (1, 3.0, 0, False),
    }
    assert reconciled_versions(spark, lakehouse) == [0, consumed, raced]


def test_a_reconcile_left_undone_by_a_crashed_run_is_done_by_the_next_run(spark, lakehouse):
    bronze = Bronze(spark, lakehouse)
    bronze.append((1, at(8, 1), 1.0), (1, at(9, 0), 1.0))
    update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    version = bronze.append((1, at(8, 2), 1.0), (2, at(8, 3), 1.0), (1, at(9, 1), 1.0))  # two late, one on time
    stream_ride_windows(spark, lakehouse, **WINDOWS)  # the run dies here, before its reconcile

    # Nothing new for the stream; the reconcile catches up with what the stream consumed.
    rerun = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    assert rerun.report.input_rows == 0
    assert (rerun.reconcile.raw_rides_version, rerun.reconcile.new_rides, rerun.reconcile.late_rides_found) == (
        version,
        3,
        2,
    )
    # watermark 09:01 - 15 min = 08:46
    assert windows(spark, lakehouse) == {
        (epoch(8, 0), 1): (1, 1.0, 1, True),
        (epoch(8, 0), 2): (0, 0.0, 1, True),
        (epoch(9, 0), 1): (2, 2.0, 0, False),
    }


# ----------------------------------------------------------------------------------------------------- (b)


def test_late_rides_are_counted_exactly_whether_spark_still_counts_them_or_drops_them(spark, lakehouse):
    bronze = Bronze(spark, lakehouse)
    bronze.append((1, at(8, 1), 10.0), (1, at(8, 5), 2.5), (2, at(8, 12), 7.0), (1, at(8, 31), 4.0), (2, at(9, 0), 1.5))
    update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    # latest pickup 09:00 -> watermark 08:45: every window but [09:00, 09:10) is final
    assert windows(spark, lakehouse) == {
        (epoch(8, 0), 1): (2, 12.5, 0, True),
        (epoch(8, 10), 2): (1, 7.0, 0, True),
        (epoch(8, 30), 1): (1, 4.0, 0, True),
        (epoch(9, 0), 2): (1, 1.5, 0, False),
    }

    # Two late rides for the final window (08:00, 1), one for a window that never had a ride and ended before
    # the watermark (08:20, 2), and two on time: 08:44 opens (08:40, 1), which ends after 08:45; 09:02 joins
    # (09:00, 2). Spark's late-event watermark lags one micro-batch, so it still counts the late ones in its
    # state; the table does not take them on time.
    bronze.append(
        (1, at(8, 7), 90.0), (1, at(8, 3), 90.0), (2, at(8, 22), 90.0), (1, at(8, 44), 5.0), (2, at(9, 2), 2.0)
    )
    second = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    assert (second.reconcile.full, second.reconcile.new_rides, second.reconcile.late_rides_found) == (False, 5, 3)
    # latest on-time pickup 09:02 -> watermark 08:47
    expected = {
        (epoch(8, 0), 1): (2, 12.5, 2, True),
        (epoch(8, 10), 2): (1, 7.0, 0, True),
        (epoch(8, 20), 2): (0, 0.0, 1, True),
        (epoch(8, 30), 1): (1, 4.0, 0, True),
        (epoch(8, 40), 1): (1, 5.0, 0, False),
        (epoch(9, 0), 2): (2, 3.5, 0, False),
    }
    assert windows(spark, lakehouse) == expected

    # One more late ride for (08:00, 1): by now Spark's late-event watermark (08:45) drops it.
    bronze.append((1, at(8, 9), 90.0))
    third = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    assert third.report.rows_dropped_by_watermark() == 1
    assert (third.reconcile.new_rides, third.reconcile.late_rides_found) == (1, 1)
    expected[(epoch(8, 0), 1)] = (2, 12.5, 3, True)
    assert windows(spark, lakehouse) == expected
    # every ride of raw_rides is counted once: on time or late
    rides = spark.read.format("delta").load(lakehouse.table_path("raw_rides")).count()
    assert rides == 11 == sum(trips + late for trips, _, late, _ in expected.values())


# ----------------------------------------------------------------------------------------------------- (c)


def test_rerunning_with_no_new_ride_changes_nothing(spark, lakehouse):
    bronze = Bronze(spark, lakehouse)
    bronze.append((1, at(8, 1), 10.0), (2, at(9, 0), 1.5))
    update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    bronze.append((1, at(8, 2), 3.0), (2, at(9, 1), 2.0))  # one late, one on time
    update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    path = lakehouse.table_path("ride_window_aggregates")
    version, rows = latest_version(path), windows(spark, lakehouse)
    assert rows == {(epoch(8, 0), 1): (1, 10.0, 1, True), (epoch(9, 0), 2): (2, 3.5, 0, False)}

    for _ in range(2):
        again = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
        assert (again.report.input_rows, again.reconcile.windows) == (0, 0)
        assert latest_version(path) == version
        assert windows(spark, lakehouse) == rows


def test_a_run_that_can_find_no_late_ride_and_closes_no_window_skips_the_reconcile(spark, lakehouse):
    bronze = Bronze(spark, lakehouse)
    first_version = bronze.append((1, at(8, 1), 10.0), (2, at(9, 0), 1.5))
    first = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    assert first.reconcile.full and reconciled_versions(spark, lakehouse) == [first_version]

    # 09:03 falls in [09:00, 09:10), which ends after the watermark (09:03 - 15 min = 08:48): it cannot be late,
    # and no window that is not final has ended by 08:48. Nothing to write: no reconcile commit.
    bronze.append((2, at(9, 3), 2.0))
    skipped = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    assert skipped.reconcile.reason.startswith("skipped: ") and skipped.reconcile.windows == 0
    assert reconciled_versions(spark, lakehouse) == [first_version]
    assert windows(spark, lakehouse) == {(epoch(8, 0), 1): (1, 10.0, 0, True), (epoch(9, 0), 2): (2, 3.5, 0, False)}
    assert f"no ride of the 1 file(s) added after raw_rides version {first_version} " in skipped.reconcile.reason

    # A late ride for the final (08:00, 1), and 09:30 moves the watermark to 09:15, closing (09:00, 2): the
    # reconcile runs over every file since the last one it made, the skipped run's too.
    third_version = bronze.append((1, at(8, 5), 3.0), (1, at(9, 30), 4.0))
    third = update_ride_window_aggregates(spark, lakehouse, **WINDOWS)
    assert (third.reconcile.full, third.reconcile.new_rides, third.reconcile.late_rides_found) == (False, 3, 1)
    assert reconciled_versions(spark, lakehouse) == [first_version, third_version]
    expected = {
        (epoch(8, 0), 1): (1, 10.0, 1, True),
        (epoch(9, 0), 2): (2, 3.5, 0, True),
        (epoch(9, 30), 1): (1, 4.0, 0, False),
    }
    assert windows(spark, lakehouse) == expected
    rides = spark.read.format("delta").load(lakehouse.table_path("raw_rides")).count()
    assert rides == 5 == sum(trips + late for trips, _, late, _ in expected.values())


# ------------------------------------------------------------------------- joins: rows the watermark drops


JOIN_RIDES_DDL = "vendor_id int, do_location_id int, dropoff_datetime timestamp, kafka_partition int, kafka_offset long"
PICKUPS_DDL = "pu_location_id int, pickup_datetime timestamp, kafka_partition int, kafka_offset long"


def test_pickups_behind_the_join_watermark_are_counted_in_join_late_rows(spark, lakehouse):
    from streaming_pipeline.lakehouse.sql import run_sql

    rides_path, pickups_path = lakehouse.table_path("raw_rides"), lakehouse.table_path("raw_pickup_locations")

    def pickups(*rows: tuple[int, dt.datetime, int]) -> None:
        frame = spark.createDataFrame([(loc, time, 0, offset) for loc, time, offset in rows], PICKUPS_DDL)
        frame.coalesce(1).write.format("delta").mode("append").save(pickups_path)

    # Rides drop off at zone 10 at 08:00 and at zone 20 at 09:00. Join gap 10 minutes, watermark delay 15.
    spark.createDataFrame([(1, 10, at(8, 0), 0, 0), (2, 20, at(9, 0), 0, 1)], JOIN_RIDES_DDL).write.format(
        "delta"
    ).save(rides_path)
    pickups((10, at(8, 5), 0), (20, at(9, 2), 1))
    first = update_ride_pickup_joins(spark, lakehouse, **JOIN, run_id="run-1")
    # After this micro-batch the watermark is min(09:00, 09:02) - 15 min = 08:45.
    pickups((10, at(8, 1), 2), (20, at(9, 5), 3))
    # Spark drops a row at or before the watermark of the previous micro-batch. That of batch 0 was the epoch
    # (nothing seen before it), so 08:01 still joins the 08:00 ride, older than 08:45 though it is.
    second = update_ride_pickup_joins(spark, lakehouse, **JOIN, run_id="run-2")
    # Batch 2 drops what is at or before 08:45 (batch 1's watermark): 08:02, 08:45 and 08:44, by hand 3 pickups.
    pickups((10, at(8, 2), 4), (10, at(8, 45), 5), (30, at(8, 44), 6), (20, at(9, 6), 7))
    third = update_ride_pickup_joins(spark, lakehouse, **JOIN, run_id="run-3")

    assert [r.rows_dropped_by_watermark for r in (first, second, third)] == [0, 0, 3]
    joined = spark.read.format("delta").load(lakehouse.table_path("ride_pickup_joins"))
    assert sorted((r.vendor_id, r.pickup_kafka_offset) for r in joined.collect()) == [
        (1, 0),
        (1, 2),
        (2, 1),
        (2, 3),
        (2, 7),
    ]

    late = (
        spark.read.format("delta")
        .load(lakehouse.table_path("join_late_rows"))
        .select(
            "batch_id",
            "input_rows",
            "rows_dropped_by_watermark",
            F.unix_seconds("watermark").alias("watermark"),
            "run_id",
        )
    )
    # One row per micro-batch that dropped rows; it appeared with the first.
    assert sorted(tuple(r) for r in late.collect()) == [(2, 4, 3, epoch(8, 45), "run-3")]
    assert (first.batches_recorded, second.batches_recorded, third.batches_recorded) == (0, 0, 1)
    assert third.watermark == at(8, 45)
    # A re-run with nothing new records nothing.
    assert update_ride_pickup_joins(spark, lakehouse, **JOIN).batches_recorded == 0
    assert late.count() == 1
    # What `streaming-pipeline sql` answers: the table is an asset of the definitions.
    names = [key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()]
    columns, rows = run_sql(
        spark,
        {name: lakehouse.table_path(name) for name in names},
        "SELECT sum(rows_dropped_by_watermark) FROM join_late_rows",
    )
    assert rows == [(3,)]


def test_the_assets_report_late_rides_and_rows_dropped_by_the_join_watermark(spark, lakehouse):
    import dagster as dg

    from streaming_pipeline.defs.gold.ride_window_aggregates import windows_count_each_ride_once
    from streaming_pipeline.resources import SparkResource
    from streaming_pipeline_tests.conftest import SPARK_TEST_CONF
    from streaming_pipeline_tests.pipeline_assets import pipeline_asset

    ride_window_aggregates = pipeline_asset("ride_window_aggregates")
    ride_pickup_joins = pipeline_asset("ride_pickup_joins")
    resources = {"spark": SparkResource(stop_on_teardown=False, conf=SPARK_TEST_CONF), "lakehouse": lakehouse}
    bronze = Bronze(spark, lakehouse)
    pickups_path = lakehouse.table_path("raw_pickup_locations")

    def materialize() -> dict[str, dict]:
        result = dg.materialize(
            [ride_window_aggregates, ride_pickup_joins, windows_count_each_ride_once], resources=resources
        )
        assert result.success
        [check] = result.get_asset_check_evaluations()
        assert check.passed, check.metadata
        return {
            e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()
        }

    offsets = iter(range(1000))

    def pickups(*rows: tuple[int, dt.datetime]) -> None:
        frame = spark.createDataFrame([(loc, time, 1, next(offsets)) for loc, time in rows], PICKUPS_DDL)
        frame.write.format("delta").mode("append").save(pickups_path)

    bronze.append((1, at(9, 0), 1.0))  # windows: watermark 08:45
    pickups((10, at(9, 10)))  # joins the ride (dropoff 09:05); join watermark min(09:05, 09:10) - 15 min = 08:50
    first = materialize()
    assert first["join_late_rows"]["rows_dropped_by_watermark"] == 0
    assert first["join_late_rows"]["dagster/row_count"] == 0  # created empty by the first join run
    assert first["ride_window_aggregates"]["reconciled_raw_rides_version"] == "0"

    bronze.append((1, at(8, 1), 1.0))  # late for the windows: [08:00, 08:10) ended before 08:45
    pickups((10, at(8, 0)))  # behind the join's watermark, but Spark compares with batch 0's (the epoch): kept
    second = materialize()
    assert second["ride_window_aggregates"]["late_rides_found_this_run"] == 1
    assert second["ride_window_aggregates"]["late_rides_total"] == 1
    assert second["ride_pickup_joins"]["rows_dropped_by_watermark"] == 0
    pickups((10, at(8, 1)))  # at or before batch 1's watermark, 08:50: dropped
    third = materialize()
    assert third["ride_pickup_joins"]["rows_dropped_by_watermark"] == 1
    assert third["join_late_rows"]["rows_dropped_by_watermark_total"] == 1
    assert third["ride_window_aggregates"]["reconcile"] == "no ride since the previous reconcile"
