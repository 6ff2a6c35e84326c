"""Unit tests of `silver.transformations` on small static DataFrames (and one stream): the ride/pickup join, the
amount branches and the zone enrichment, exact rows.

Every expected row is written by hand or computed in plain Python here (the csv module for the zone lookup and
rides.csv), never with the code under test. Inputs use timezone-aware UTC datetimes; Spark (session time zone
UTC) returns naive UTC datetimes.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import pytest

from streaming_pipeline.lakehouse.silver.transformations import (
    enrich_rides_with_zones,
    high_amount_rides,
    low_amount_rides,
    ride_pickup_joins,
)
from streaming_pipeline_tests.dataframe_helpers import assert_exact, at
from streaming_pipeline_tests.lakehouse.silver.zone_helpers import lookup_by_csv_module

TEN_MIN = dt.timedelta(minutes=10)
RIDE_SCHEMA = "kafka_offset BIGINT, vendor_id INT, pu_location_id INT, do_location_id INT, total_amount DOUBLE"
ZONE_COLUMNS = ["kafka_offset", "pu_borough", "pu_zone", "do_borough", "do_zone"]


@pytest.fixture()
def zones(spark):  # type: ignore[no-untyped-def]
    """The taxi_zones table's columns the enrichment reads, with the shipped lookup's zones."""
    rows = [(k, *v) for k, v in lookup_by_csv_module().items()]
    return spark.createDataFrame(rows, "location_id int, borough string, zone string, service_zone string")


def _sorted_rows(frame, columns: list[str]) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted((tuple(row) for row in frame.select(*columns).collect()), key=repr)


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


# ---------------------------------------------------------------- branching


def test_threshold_boundary_40_is_high_39_99_is_low_null_is_neither(spark) -> None:
    amounts = [40.00, 39.99, None, 120.5, 0.0, 40.01, -5.0, None]
    rides = spark.createDataFrame([(n, 1, 1, 2, amount) for n, amount in enumerate(amounts)], RIDE_SCHEMA)

    high = high_amount_rides(rides, 40.0)
    low = low_amount_rides(rides, 40.0)

    assert high.columns == rides.columns and low.columns == rides.columns
    assert high.schema == rides.schema and low.schema == rides.schema
    high_offsets = sorted(row.kafka_offset for row in high.collect())
    low_offsets = sorted(row.kafka_offset for row in low.collect())
    assert high_offsets == [0, 3, 5]
    assert low_offsets == [1, 4, 6]
    non_null = [n for n, amount in enumerate(amounts) if amount is not None]
    assert sorted(high_offsets + low_offsets) == non_null  # each non-null ride exactly once, nulls in neither


def test_branches_keep_whole_rows(spark) -> None:
    rides = spark.createDataFrame([(0, 2, 161, 236, 52.8), (1, 1, 138, 75, 12.3)], RIDE_SCHEMA)
    assert [tuple(r) for r in high_amount_rides(rides, 40).collect()] == [(0, 2, 161, 236, 52.8)]
    assert [tuple(r) for r in low_amount_rides(rides, 40).collect()] == [(1, 1, 138, 75, 12.3)]


# ---------------------------------------------------------------- enrichment


def test_an_unknown_zone_id_keeps_its_ride_with_null_zone_columns(spark, zones) -> None:
    rides = spark.createDataFrame([(0, 1, 1, 999, 10.0), (1, 2, 999, 265, 20.0), (2, 2, None, 132, 30.0)], RIDE_SCHEMA)
    enriched = enrich_rides_with_zones(rides, zones)

    assert enriched.columns == rides.columns + ["pu_borough", "pu_zone", "do_borough", "do_zone"]
    assert _sorted_rows(enriched, ZONE_COLUMNS) == [
        (0, "EWR", "Newark Airport", None, None),
        (1, None, None, "Unknown", "NA"),
        (2, None, None, "Queens", "JFK Airport"),
    ]


def test_enrichment_equals_a_csv_module_join_of_rides_csv_and_the_lookup(spark, zones, rides_csv: Path) -> None:
    with rides_csv.open(newline="") as handle:
        sample = [
            (n, int(r["VendorID"]), int(r["PULocationID"]), int(r["DOLocationID"]), float(r["total_amount"]))
            for n, r in enumerate(csv.DictReader(handle))
        ][:40]
    lookup = lookup_by_csv_module()
    unknown = (None, None, None)
    expected = sorted(
        ((n, *lookup.get(pu, unknown)[:2], *lookup.get(do, unknown)[:2]) for n, _, pu, do, _ in sample), key=repr
    )

    enriched = enrich_rides_with_zones(spark.createDataFrame(sample, RIDE_SCHEMA), zones)

    assert _sorted_rows(enriched, ZONE_COLUMNS) == expected
    assert enriched.count() == len(sample) == 40  # every ride exactly once
    ride_columns = ["kafka_offset", "vendor_id", "pu_location_id", "do_location_id", "total_amount"]
    assert _sorted_rows(enriched, ride_columns) == sorted(sample, key=repr)


def test_a_duplicated_zone_id_does_not_duplicate_rides(spark) -> None:
    zones = spark.createDataFrame(
        [(7, "Queens", "Astoria", "Boro Zone"), (7, "Queens", "Astoria", "Boro Zone")],
        "location_id INT, borough STRING, zone STRING, service_zone STRING",
    )
    rides = spark.createDataFrame([(0, 1, 7, 7, 10.0)], RIDE_SCHEMA)
    assert _sorted_rows(enrich_rides_with_zones(rides, zones), ZONE_COLUMNS) == [
        (0, "Queens", "Astoria", "Queens", "Astoria")
    ]


def test_enrichment_runs_as_a_stream_static_join(spark, zones, tmp_path: Path) -> None:
    source, sink = str(tmp_path / "raw_rides"), str(tmp_path / "rides_enriched")
    rides = [(0, 1, 138, 999, 27.8), (1, 2, 161, 236, 52.8)]
    spark.createDataFrame(rides, RIDE_SCHEMA).write.format("delta").save(source)

    stream = enrich_rides_with_zones(spark.readStream.format("delta").load(source), zones)
    query = (
        stream.writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(sink)
    )
    query.awaitTermination()

    lookup = lookup_by_csv_module()
    assert _sorted_rows(spark.read.format("delta").load(sink), ZONE_COLUMNS) == [
        (0, *lookup[138][:2], None, None),
        (1, *lookup[161][:2], *lookup[236][:2]),
    ]
