"""Unit tests of `gold.transformations` (ride windows, late counts) on small static DataFrames.

Every expected row is written by hand or computed in plain Python here, never with the code under test.
Inputs use timezone-aware UTC datetimes; Spark (session time zone UTC) returns naive UTC datetimes.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from streaming_pipeline.lakehouse.gold.transformations import ride_window_aggregates, window_late_counts
from streaming_pipeline_tests.dataframe_helpers import assert_exact, at

UTC = dt.UTC
WINDOW_DDL = (
    "window_start timestamp, window_end timestamp, vendor_id int, trip_count long, "
    "total_amount_sum double, max_pickup_datetime timestamp"
)


# ---------------------------------------------------------------- ride_window_aggregates

RIDES_DDL = "vendor_id int, pickup_datetime timestamp, total_amount double"


def test_window_aggregates_split_per_vendor_with_ride_on_boundary_in_later_window(spark):
    rides = spark.createDataFrame(
        [
            (1, at(0, 0, 0), 10.0),
            (1, at(0, 9, 59, 999999), 2.5),
            (1, at(0, 10, 0), 4.0),  # exactly on the boundary: window [00:10, 00:20)
            (2, at(0, 5, 0), 7.25),
            (2, at(0, 19, 59), 1.0),
            (None, at(0, 15, 0), 3.0),
            (None, at(0, 20, 0), 5.5),  # boundary again: [00:20, 00:30)
        ],
        RIDES_DDL,
    )
    assert_exact(
        spark,
        ride_window_aggregates(rides, "600 seconds"),
        [
            (at(0, 0), at(0, 10), 1, 2, 12.5, at(0, 9, 59, 999999)),
            (at(0, 10), at(0, 20), 1, 1, 4.0, at(0, 10, 0)),
            (at(0, 0), at(0, 10), 2, 1, 7.25, at(0, 5, 0)),
            (at(0, 10), at(0, 20), 2, 1, 1.0, at(0, 19, 59)),
            (at(0, 10), at(0, 20), None, 1, 3.0, at(0, 15, 0)),
            (at(0, 20), at(0, 30), None, 1, 5.5, at(0, 20, 0)),
        ],
        WINDOW_DDL,
    )


def test_window_aggregates_windows_are_aligned_to_the_epoch_not_to_the_hour_or_first_ride(spark):
    duration = 420  # does not divide an hour: epoch-aligned windows start at odd minutes
    pickups = [
        (1, at(6, 3, 17), 1.5),
        (1, at(6, 4, 0), 2.0),
        (1, at(6, 7, 0), 3.0),
        (2, at(6, 3, 17), 4.0),
        (2, at(6, 13, 1, 500000), 8.0),
        (1, at(6, 59, 59), 0.5),
    ]
    groups: dict[tuple, list] = defaultdict(list)
    for vendor, pickup, total in pickups:
        epoch = int(pickup.timestamp())
        start = dt.datetime.fromtimestamp(epoch - epoch % duration, UTC)
        groups[(start, vendor)].append((pickup, total))
    expected_rows = [
        (
            start,
            start + dt.timedelta(seconds=duration),
            vendor,
            len(items),
            sum(t for _, t in items),
            max(p for p, _ in items),
        )
        for (start, vendor), items in groups.items()
    ]
    # none of these windows is aligned to the hour or to the first ride (06:03:17)
    assert all((start - start.replace(minute=0, second=0)).total_seconds() % duration != 0 for start, _ in groups)
    assert all((start - at(6, 3, 17)).total_seconds() % duration != 0 for start, _ in groups)
    actual = ride_window_aggregates(spark.createDataFrame(pickups, RIDES_DDL), f"{duration} seconds")
    assert_exact(spark, actual, expected_rows, WINDOW_DDL)


# ---------------------------------------------------------------- window_late_counts: the windows with late rides

LATE_DDL = "window_start timestamp, window_end timestamp, vendor_id int, late_trip_count long"
TEN_MIN = dt.timedelta(minutes=10)


def late_ride_counts(all_rides, aggregates):
    """The windows of `window_late_counts` that have late rides."""
    late = window_late_counts(all_rides, aggregates).where("late_trip_count > 0")
    return late.select("window_start", "window_end", "vendor_id", "late_trip_count")


def _window_rows(spark, rows):
    """Rows (window start, vendor, trip_count) in the shape of ride_window_aggregates' output."""
    return spark.createDataFrame(
        [(start, start + TEN_MIN, vendor, count, 1.0 * count, start) for start, vendor, count in rows],
        WINDOW_DDL,
    )


def test_late_ride_counts_reports_missing_and_undercounted_windows_null_safely(spark):
    w1, w2, w3, w4 = at(0, 0), at(0, 10), at(0, 20), at(0, 30)
    all_rides = _window_rows(
        spark,
        [
            (w1, 1, 5),  # on time 3 -> 2 late
            (w1, 2, 2),  # on time 2 -> nothing
            (w2, None, 4),  # on time (null vendor) 1 -> 3 late
            (w2, 1, 1),  # on time 1 -> nothing
            (w3, 2, 1),  # missing from aggregates -> 1 late
            (w3, None, 2),  # missing from aggregates -> 2 late
            (w4, None, 3),  # on time (null vendor) 3 -> nothing
        ],
    )
    aggregates = _window_rows(
        spark,
        [(w1, 1, 3), (w1, 2, 2), (w2, None, 1), (w2, 1, 1), (w4, None, 3), (w4, 1, 9)],  # (w4, 1) only here: no row
    )
    actual = late_ride_counts(all_rides, aggregates)
    assert actual.columns == ["window_start", "window_end", "vendor_id", "late_trip_count"]
    assert_exact(
        spark,
        actual,
        [(w1, w1 + TEN_MIN, 1, 2), (w2, w2 + TEN_MIN, None, 3), (w3, w3 + TEN_MIN, 2, 1), (w3, w3 + TEN_MIN, None, 2)],
        LATE_DDL,
    )


def test_late_ride_counts_null_vendor_is_not_matched_with_another_vendor(spark):
    w = at(1, 0)
    all_rides = _window_rows(spark, [(w, None, 2), (w, 1, 2)])
    aggregates = _window_rows(spark, [(w, 1, 2)])  # vendor 1 complete, null vendor absent
    assert_exact(spark, late_ride_counts(all_rides, aggregates), [(w, w + TEN_MIN, None, 2)], LATE_DDL)


def test_late_ride_counts_equal_counts_give_no_rows(spark):
    rows = [(at(0, 0), 1, 3), (at(0, 0), None, 1), (at(0, 10), 2, 4)]
    assert_exact(spark, late_ride_counts(_window_rows(spark, rows), _window_rows(spark, rows)), [], LATE_DDL)


def test_window_late_counts_gives_every_window_asked_for_with_zero_when_nothing_is_late(spark):
    w1, w2 = at(2, 0), at(2, 10)
    # the rides of two windows per vendor, as a reconcile recounts the windows new rides fall in
    all_rides = _window_rows(spark, [(w1, 1, 4), (w1, None, 1), (w2, 2, 3)])
    # the table: (w1, 1) counted 1 on time, (w1, null) all on time, (w2, 2) absent (late only); (w2, 1) not asked
    aggregates = _window_rows(spark, [(w1, 1, 1), (w1, None, 1), (w2, 1, 7)])
    assert_exact(
        spark,
        window_late_counts(all_rides, aggregates),
        [(w1, w1 + TEN_MIN, 1, 3), (w1, w1 + TEN_MIN, None, 0), (w2, w2 + TEN_MIN, 2, 3)],
        LATE_DDL,
    )
