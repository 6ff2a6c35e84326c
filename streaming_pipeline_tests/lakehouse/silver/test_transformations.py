"""Unit tests of `silver.transformations` on small static DataFrames: the ride/pickup join, exact rows.

Every expected row is written by hand or computed in plain Python here, never with the code under test. Inputs use
timezone-aware UTC datetimes; Spark (session time zone UTC) returns naive UTC datetimes.
"""

from __future__ import annotations

import datetime as dt

import pytest

from streaming_pipeline.lakehouse.silver.transformations import ride_pickup_joins
from streaming_pipeline_tests.dataframe_helpers import assert_exact, at

TEN_MIN = dt.timedelta(minutes=10)


# ---------------------------------------------------------------- ride_pickup_joins

JOIN_RIDES_DDL = (
    "vendor_id int, pickup_datetime timestamp, dropoff_datetime timestamp, pu_location_id int, "
    "do_location_id int, total_amount double, kafka_partition int, kafka_offset long"
)
JOIN_PICKUPS_DDL = "pu_location_id int, pickup_datetime timestamp, kafka_partition int, kafka_offset long"
JOIN_OUT_DDL = "vendor_id int, location_id int, pickup_datetime timestamp, dropoff_datetime timestamp"
JOIN_OUT_KAFKA_DDL = (
    f"{JOIN_OUT_DDL}, ride_kafka_partition int, ride_kafka_offset long, "
    "pickup_kafka_partition int, pickup_kafka_offset long"
)

DROP = at(12, 0, 0)
JOIN_RIDES = [
    # vendor, pickup, dropoff, pu_location, do_location, total, partition, offset
    (1, at(11, 40), DROP, 7, 100, 20.0, 0, 10),
    (2, at(11, 55), at(12, 5), 100, 7, 9.0, 1, 3),
    (None, at(12, 1), at(12, 20), 300, 100, 5.0, 0, 11),
]
JOIN_PICKUPS = [
    # pu_location, pickup time, partition, offset
    (100, DROP - dt.timedelta(minutes=10), 0, 1),  # exactly 10 min before ride 1: joins
    (100, DROP - dt.timedelta(minutes=10, seconds=1), 0, 2),  # 10 min 1 s before: no
    (100, DROP + dt.timedelta(minutes=10), 1, 1),  # exactly 10 min after ride 1: joins (and ride 3: 10 min before)
    (100, DROP + dt.timedelta(minutes=10, seconds=1), 1, 2),  # 10:01 after ride 1: no; 9:59 before ride 3: joins
    (100, DROP, 0, 3),  # same instant as ride 1's dropoff
    (7, DROP, 2, 1),  # zone 7 = ride 1's pickup zone: no match for ride 1; ride 2 drops off at 7, 5 min later
    (101, DROP, 2, 2),  # no ride drops off at 101
    (300, at(12, 1), 2, 3),  # ride 3 picked up at 300 but dropped off at 100: no match
]


def test_pickup_join_bound_is_inclusive_before_and_after_dropoff(spark):
    rides = spark.createDataFrame([JOIN_RIDES[0]], JOIN_RIDES_DDL)
    pickups = spark.createDataFrame(JOIN_PICKUPS[:5], JOIN_PICKUPS_DDL)
    assert_exact(
        spark,
        ride_pickup_joins(rides, pickups, "600 seconds"),
        [
            (1, 100, at(11, 50, 0), DROP, 0, 10, 0, 1),
            (1, 100, at(12, 10, 0), DROP, 0, 10, 1, 1),
            (1, 100, DROP, DROP, 0, 10, 0, 3),
        ],
        JOIN_OUT_KAFKA_DDL,
    )


@pytest.mark.parametrize("max_gap", ["600 seconds", "10 minutes"])
def test_pickup_join_matches_dropoff_location_one_row_per_pair(spark, max_gap):
    rides = spark.createDataFrame(JOIN_RIDES, JOIN_RIDES_DDL)
    pickups = spark.createDataFrame(JOIN_PICKUPS, JOIN_PICKUPS_DDL)
    expected_rows = [
        (vendor, location, p_time, d_time, r_part, r_off, p_part, p_off)
        for vendor, _, d_time, _, do_location, _, r_part, r_off in JOIN_RIDES
        for location, p_time, p_part, p_off in JOIN_PICKUPS
        if do_location == location and abs(p_time - d_time) <= TEN_MIN
    ]
    assert len(expected_rows) == 6  # by hand: ride 1 -> 3 pickups, ride 2 -> 1, ride 3 (null vendor) -> 2
    actual = ride_pickup_joins(rides, pickups, max_gap)
    assert actual.columns == [
        "vendor_id",
        "location_id",
        "pickup_datetime",
        "dropoff_datetime",
        "ride_kafka_partition",
        "ride_kafka_offset",
        "pickup_kafka_partition",
        "pickup_kafka_offset",
    ]
    assert_exact(spark, actual, expected_rows, JOIN_OUT_KAFKA_DDL)


def test_pickup_join_ride_matching_two_pickups_gives_two_rows_without_kafka_columns(spark):
    rides = spark.createDataFrame(
        [(3, at(9, 0), at(9, 30), 50, 60, 1.0)],
        "vendor_id int, pickup_datetime timestamp, dropoff_datetime timestamp, pu_location_id int, "
        "do_location_id int, total_amount double",
    )
    pickups = spark.createDataFrame(
        [(60, at(9, 25)), (60, at(9, 25)), (60, at(9, 41)), (50, at(9, 30))],
        "pu_location_id int, pickup_datetime timestamp",
    )
    actual = ride_pickup_joins(rides, pickups, "600 seconds")
    assert actual.columns == ["vendor_id", "location_id", "pickup_datetime", "dropoff_datetime"]
    assert_exact(spark, actual, [(3, 60, at(9, 25), at(9, 30)), (3, 60, at(9, 25), at(9, 30))], JOIN_OUT_DDL)
