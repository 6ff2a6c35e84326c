"""This project's silver and gold tables declared as streaming tables (`defs/<layer>/<table>/defs.yaml`): each one's
query run on rows the test gives (`table_query().rows_for`), as a user unit-tests a table of their own. Every
expected row is written by hand."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.components import KafkaDeltaSource
from streaming_pipeline.components.streamed_table import declared_tables, streamed_tables
from streaming_pipeline.devstack.project import project_defs_folder
from streaming_pipeline.lakehouse.tables import RIDE_COLUMNS
from streaming_pipeline_tests.dataframe_helpers import assert_exact, at
from streaming_pipeline_tests.lakehouse.silver.zone_helpers import lookup_by_csv_module
from streaming_pipeline_tests.project_tables import declared

TEN_MIN = dt.timedelta(minutes=10)
RIDE_SCHEMA = "kafka_offset BIGINT, vendor_id INT, pu_location_id INT, do_location_id INT, total_amount DOUBLE"
ZONE_COLUMNS = ["kafka_offset", "pu_borough", "pu_zone", "do_borough", "do_zone"]


def test_vendor_counts_counts_rides_per_vendor_including_the_null_vendor(spark):
    query = declared("vendor_counts").table_query()
    rides = spark.createDataFrame(
        [(1, 10.0), (2, 5.0), (1, 3.0), (None, 1.0), (1, 2.0), (None, 4.0), (7, 0.0)],
        "vendor_id int, total_amount double",
    )
    counted = query.rows_for(spark, {"raw_rides": rides})
    assert_exact(spark, counted, [(1, 3), (2, 1), (None, 2), (7, 1)], "vendor_id int, trip_count long")
    no_rides = spark.createDataFrame([], "vendor_id int, total_amount double")
    assert_exact(spark, query.rows_for(spark, {"raw_rides": no_rides}), [], "vendor_id int, trip_count long")


@pytest.fixture()
def zones(spark):  # type: ignore[no-untyped-def]
    """The taxi_zones table's columns, with the shipped lookup's zones."""
    rows = [(k, *v) for k, v in lookup_by_csv_module().items()]
    return spark.createDataFrame(rows, "location_id int, borough string, zone string, service_zone string")


def _sorted_rows(frame, columns: list[str]) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted((tuple(row) for row in frame.select(*columns).collect()), key=repr)


def test_rides_enriched_keeps_a_ride_with_an_unknown_zone_id_with_null_zone_columns(spark, zones) -> None:
    rides = spark.createDataFrame([(0, 1, 1, 999, 10.0), (1, 2, 999, 265, 20.0), (2, 2, None, 132, 30.0)], RIDE_SCHEMA)
    enriched = declared("rides_enriched").table_query().rows_for(spark, {"raw_rides": rides, "taxi_zones": zones})

    assert enriched.columns == rides.columns + ["pu_borough", "pu_zone", "do_borough", "do_zone"]
    assert _sorted_rows(enriched, ZONE_COLUMNS) == [
        (0, "EWR", "Newark Airport", None, None),
        (1, None, None, "Unknown", "NA"),
        (2, None, None, "Queens", "JFK Airport"),
    ]


def test_rides_enriched_equals_a_csv_module_join_of_rides_csv_and_the_lookup(spark, zones, rides_csv: Path) -> None:
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

    rides = spark.createDataFrame(sample, RIDE_SCHEMA)
    enriched = declared("rides_enriched").table_query().rows_for(spark, {"raw_rides": rides, "taxi_zones": zones})

    assert _sorted_rows(enriched, ZONE_COLUMNS) == expected
    assert enriched.count() == len(sample) == 40  # every ride exactly once
    ride_columns = ["kafka_offset", "vendor_id", "pu_location_id", "do_location_id", "total_amount"]
    assert _sorted_rows(enriched, ride_columns) == sorted(sample, key=repr)


def test_rides_enriched_columns_passed_through_from_raw_rides_keep_their_descriptions() -> None:
    tree = dg.ComponentTree.for_project(project_defs_folder())
    sources = [c.source for c in tree.get_all_components(of_type=KafkaDeltaSource)]
    described = {
        c.name: c.description for c in declared_tables(sources, streamed_tables(tree))["rides_enriched"].columns
    }
    assert {c.name: described[c.name] for c in RIDE_COLUMNS} == {c.name: c.description for c in RIDE_COLUMNS}
    assert described["pu_zone"] == "Pickup zone name; null for an unknown id."  # its own, from its declaration


def test_the_amount_branches_put_40_and_above_high_below_low_and_a_null_amount_in_neither(spark) -> None:
    amounts = [40.00, 39.99, None, 120.5, 0.0, 40.01, -5.0, None]
    rides = spark.createDataFrame([(n, 1, 1, 2, amount) for n, amount in enumerate(amounts)], RIDE_SCHEMA)
    threshold = {"high_amount_threshold": 40.0}

    high = declared("high_amount_rides").table_query().rows_for(spark, {"raw_rides": rides}, threshold)
    low = declared("low_amount_rides").table_query().rows_for(spark, {"raw_rides": rides}, threshold)

    assert high.schema == rides.schema and low.schema == rides.schema  # whole rows
    assert sorted(tuple(row) for row in high.collect()) == [
        (0, 1, 1, 2, 40.0),
        (3, 1, 1, 2, 120.5),
        (5, 1, 1, 2, 40.01),
    ]
    assert sorted(tuple(row) for row in low.collect()) == [(1, 1, 1, 2, 39.99), (4, 1, 1, 2, 0.0), (6, 1, 1, 2, -5.0)]
    low_at_100 = (
        declared("low_amount_rides")
        .table_query()
        .rows_for(spark, {"raw_rides": rides}, {"high_amount_threshold": 100.0})
    )
    assert sorted(row.kafka_offset for row in low_at_100.collect()) == [0, 1, 4, 5, 6]


# ---------------------------------------------------------------- ride_pickup_joins

JOIN_RIDES_DDL = (
    "vendor_id int, pickup_datetime timestamp, dropoff_datetime timestamp, pu_location_id int, "
    "do_location_id int, total_amount double, kafka_partition int, kafka_offset long"
)
JOIN_PICKUPS_DDL = "pu_location_id int, pickup_datetime timestamp, kafka_partition int, kafka_offset long"
JOIN_OUT_KAFKA_DDL = (
    "vendor_id int, location_id int, pickup_datetime timestamp, dropoff_datetime timestamp, "
    "ride_kafka_partition int, ride_kafka_offset long, pickup_kafka_partition int, pickup_kafka_offset long"
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


def _joined(spark, rides, pickups, max_gap: str = "10 minutes"):  # type: ignore[no-untyped-def]
    """The declaration's join on given rows, with the watermark delay's default."""
    query = declared("ride_pickup_joins").table_query()
    given = {"raw_rides": rides, "raw_pickup_locations": pickups}
    return query.rows_for(spark, given, {"join_max_gap": max_gap, "watermark_delay": "15 minutes"})


def test_ride_pickup_joins_bound_is_inclusive_before_and_after_dropoff(spark):
    rides = spark.createDataFrame([JOIN_RIDES[0]], JOIN_RIDES_DDL)
    pickups = spark.createDataFrame(JOIN_PICKUPS[:5], JOIN_PICKUPS_DDL)
    assert_exact(
        spark,
        _joined(spark, rides, pickups),
        [
            (1, 100, at(11, 50, 0), DROP, 0, 10, 0, 1),
            (1, 100, at(12, 10, 0), DROP, 0, 10, 1, 1),
            (1, 100, DROP, DROP, 0, 10, 0, 3),
        ],
        JOIN_OUT_KAFKA_DDL,
    )


@pytest.mark.parametrize("max_gap", ["600 seconds", "10 minutes"])
def test_ride_pickup_joins_matches_dropoff_location_one_row_per_pair(spark, max_gap):
    rides = spark.createDataFrame(JOIN_RIDES, JOIN_RIDES_DDL)
    pickups = spark.createDataFrame(JOIN_PICKUPS, JOIN_PICKUPS_DDL)
    expected_rows = [
        (vendor, location, p_time, d_time, r_part, r_off, p_part, p_off)
        for vendor, _, d_time, _, do_location, _, r_part, r_off in JOIN_RIDES
        for location, p_time, p_part, p_off in JOIN_PICKUPS
        if do_location == location and abs(p_time - d_time) <= TEN_MIN
    ]
    assert len(expected_rows) == 6  # by hand: ride 1 -> 3 pickups, ride 2 -> 1, ride 3 (null vendor) -> 2
    actual = _joined(spark, rides, pickups, max_gap)
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


def test_ride_pickup_joins_gives_a_row_per_pickup_record_a_ride_matches(spark):
    rides = spark.createDataFrame([(3, at(9, 0), at(9, 30), 50, 60, 1.0, 0, 5)], JOIN_RIDES_DDL)
    # two records of one pickup (their own offsets), one too late, one at another zone
    pickups = spark.createDataFrame(
        [(60, at(9, 25), 0, 1), (60, at(9, 25), 0, 2), (60, at(9, 41), 0, 3), (50, at(9, 30), 0, 4)],
        JOIN_PICKUPS_DDL,
    )
    assert_exact(
        spark,
        _joined(spark, rides, pickups),
        [(3, 60, at(9, 25), at(9, 30), 0, 5, 0, 1), (3, 60, at(9, 25), at(9, 30), 0, 5, 0, 2)],
        JOIN_OUT_KAFKA_DDL,
    )
