"""Branching, zone enrichment, the zone lookup and SQL over Delta tables: the pure pieces, exact rows.

Expected rows are computed here in plain Python (the csv module for the lookup and rides.csv) or written by hand,
never with the code under test. Inputs use timezone-aware UTC datetimes (session time zone UTC).
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import time
from decimal import Decimal
from pathlib import Path

import pytest

from streaming_pipeline.errors import ConfigurationError, QueryError
from streaming_pipeline.silver.taxi_zones import read_taxi_zones, taxi_zones_csv_path
from streaming_pipeline.silver.transformations import enrich_rides_with_zones, high_amount_rides, low_amount_rides
from streaming_pipeline.sql import format_rows, register_tables, run_sql

UTC = dt.UTC
PACKAGED_LOOKUP = Path(__file__).resolve().parents[1] / "streaming_pipeline" / "data" / "taxi_zone_lookup.csv"
RIDE_SCHEMA = "kafka_offset BIGINT, vendor_id INT, pu_location_id INT, do_location_id INT, total_amount DOUBLE"
ZONE_COLUMNS = ["kafka_offset", "pu_borough", "pu_zone", "do_borough", "do_zone"]


def _lookup_by_csv_module() -> dict[int, tuple[str, str, str]]:
    """{location id: (borough, zone, service_zone)}, by position: the TLC header's letter case varies."""
    with PACKAGED_LOOKUP.open(newline="") as handle:
        reader = csv.reader(handle)
        next(reader)
        return {int(row[0]): (row[1], row[2], row[3]) for row in reader}


@pytest.fixture()
def no_zones_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAXI_ZONES_CSV", raising=False)


@pytest.fixture()
def zones(spark, no_zones_override):  # type: ignore[no-untyped-def]
    return read_taxi_zones(spark, taxi_zones_csv_path())


def _sorted_rows(frame, columns: list[str]) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted((tuple(row) for row in frame.select(*columns).collect()), key=repr)


# --------------------------------------------------------------------------------------------------- branching


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


# --------------------------------------------------------------------------------------------------- zone lookup


def test_read_taxi_zones_gives_the_265_tlc_zones_with_exact_columns(zones) -> None:
    assert zones.dtypes == [
        ("location_id", "int"),
        ("borough", "string"),
        ("zone", "string"),
        ("service_zone", "string"),
    ]
    rows = [tuple(row) for row in zones.collect()]
    expected = _lookup_by_csv_module()
    assert len(rows) == 265 == len(expected)
    assert {row[0]: row[1:] for row in rows} == expected
    assert (1, "EWR", "Newark Airport", "EWR") in rows


def test_the_default_lookup_is_the_one_shipped_with_the_package(no_zones_override) -> None:
    assert Path(taxi_zones_csv_path()) == PACKAGED_LOOKUP
    shared = PACKAGED_LOOKUP.parents[3] / "shared" / "data" / "taxi_zone_lookup.csv"
    if shared.is_file():
        assert PACKAGED_LOOKUP.read_bytes() == shared.read_bytes()


def test_taxi_zones_csv_overrides_the_lookup(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "zones.csv"
    own.write_text('LocationID,Borough,Zone,service_zone\n7,Queens,Astoria,Boro Zone\n4,Manhattan,"Alphabet City",\n')
    monkeypatch.setenv("TAXI_ZONES_CSV", str(own))

    assert taxi_zones_csv_path() == str(own.resolve())
    assert sorted(tuple(r) for r in read_taxi_zones(spark, taxi_zones_csv_path()).collect()) == [
        (4, "Manhattan", "Alphabet City", None),
        (7, "Queens", "Astoria", "Boro Zone"),
    ]
    assert taxi_zones_csv_path(str(PACKAGED_LOOKUP)) == str(PACKAGED_LOOKUP)  # an explicit path wins


def test_a_missing_taxi_zones_csv_names_the_variable_and_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    missing = tmp_path / "nowhere.csv"
    monkeypatch.setenv("TAXI_ZONES_CSV", str(missing))
    with pytest.raises(ConfigurationError) as caught:
        taxi_zones_csv_path()
    assert "TAXI_ZONES_CSV" in str(caught.value) and str(missing) in str(caught.value)


def test_a_malformed_lookup_row_fails_instead_of_losing_a_zone(spark, tmp_path: Path) -> None:
    bad = tmp_path / "zones.csv"
    bad.write_text("LocationID,Borough,Zone,service_zone\n7,Queens,Astoria,Boro Zone\nseven,Queens,Astoria,Boro Zone\n")
    # The exception's class depends on the session (Py4JJavaError on a classic one); Spark's reason does not.
    with pytest.raises(Exception, match="MALFORMED_RECORD_IN_PARSING"):
        read_taxi_zones(spark, str(bad)).collect()


# --------------------------------------------------------------------------------------------------- enrichment


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
    lookup = _lookup_by_csv_module()
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

    lookup = _lookup_by_csv_module()
    assert _sorted_rows(spark.read.format("delta").load(sink), ZONE_COLUMNS) == [
        (0, *lookup[138][:2], None, None),
        (1, *lookup[161][:2], *lookup[236][:2]),
    ]


# --------------------------------------------------------------------------------------------------- SQL


@pytest.fixture(scope="module")
def lakehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Three small Delta tables, plus raw_rides, which was never materialized."""
    root = tmp_path_factory.mktemp("sql-lakehouse")
    tables = {
        "vendor_counts": ([(1, 87), (2, 179)], "vendor_id INT, trip_count BIGINT"),
        "ride_window_aggregates": (
            [
                (dt.datetime(2020, 7, 1, 0, 0, tzinfo=UTC), 1, 2, Decimal("3798.04"), True),
                (dt.datetime(2020, 7, 1, 0, 10, tzinfo=UTC), 2, 1, Decimal("12.50"), False),
            ],
            "window_start TIMESTAMP, vendor_id INT, trip_count BIGINT, total_amount_sum DECIMAL(12,2), "
            "is_final BOOLEAN",
        ),
        "dead_letter_records": (
            [(7, bytes([0x00, 0x01, 0xAB]), 'bad frame, magic "0x01"', None)],
            "kafka_offset BIGINT, raw_value BINARY, error STRING, raw_key BINARY",
        ),
    }
    for name, (rows, schema) in tables.items():
        spark.createDataFrame(rows, schema).write.format("delta").save(str(root / name))
    return {name: str(root / name) for name in [*tables, "raw_rides"]}


def test_only_materialized_tables_are_registered(spark, lakehouse: dict[str, str]) -> None:
    assert register_tables(spark, lakehouse) == ["vendor_counts", "ride_window_aggregates", "dead_letter_records"]


def test_sql_answers_in_each_format(spark, lakehouse: dict[str, str]) -> None:
    columns, rows = run_sql(spark, lakehouse, "SELECT * FROM ride_window_aggregates ORDER BY window_start")

    assert columns == ["window_start", "vendor_id", "trip_count", "total_amount_sum", "is_final"]
    assert format_rows(columns, rows, "table") == (
        "window_start         vendor_id  trip_count  total_amount_sum  is_final\n"
        "-------------------  ---------  ----------  ----------------  --------\n"
        "2020-07-01 00:00:00  1          2           3798.04           true\n"
        "2020-07-01 00:10:00  2          1           12.50             false\n"
        "(2 rows)\n"
    )
    assert format_rows(columns, rows, "csv") == (
        "window_start,vendor_id,trip_count,total_amount_sum,is_final\r\n"
        "2020-07-01 00:00:00,1,2,3798.04,true\r\n"
        "2020-07-01 00:10:00,2,1,12.50,false\r\n"
    )
    assert format_rows(columns, rows, "json") == (
        '{"window_start": "2020-07-01T00:00:00", "vendor_id": 1, "trip_count": 2, "total_amount_sum": 3798.04, '
        '"is_final": true}\n'
        '{"window_start": "2020-07-01T00:10:00", "vendor_id": 2, "trip_count": 1, "total_amount_sum": 12.50, '
        '"is_final": false}\n'
    )


def test_sql_nulls_quotes_and_bytes(spark, lakehouse: dict[str, str]) -> None:
    query = "SELECT kafka_offset, raw_key, raw_value, error FROM dead_letter_records"
    columns, rows = run_sql(spark, lakehouse, query)

    assert format_rows(columns, rows, "table") == (
        "kafka_offset  raw_key  raw_value  error\n"
        "------------  -------  ---------  -----------------------\n"
        '7             NULL     0001ab     bad frame, magic "0x01"\n'
        "(1 row)\n"
    )
    assert format_rows(columns, rows, "csv") == (
        'kafka_offset,raw_key,raw_value,error\r\n7,,0001ab,"bad frame, magic ""0x01"""\r\n'
    )
    assert format_rows(columns, rows, "json") == (
        '{"kafka_offset": 7, "raw_key": null, "raw_value": "0001ab", "error": "bad frame, magic \\"0x01\\""}\n'
    )


def test_sql_keeps_repeated_column_names_and_an_empty_answer(spark, lakehouse: dict[str, str]) -> None:
    query = "SELECT a.vendor_id, b.vendor_id FROM vendor_counts a JOIN vendor_counts b USING (trip_count) ORDER BY 1"
    columns, rows = run_sql(spark, lakehouse, query)
    assert format_rows(columns, rows, "json") == '{"vendor_id": 1, "vendor_id": 1}\n{"vendor_id": 2, "vendor_id": 2}\n'

    columns, rows = run_sql(spark, lakehouse, "SELECT vendor_id FROM vendor_counts WHERE trip_count > 1000")
    assert format_rows(columns, rows, "table") == "vendor_id\n---------\n(0 rows)\n"
    assert format_rows(columns, rows, "csv") == "vendor_id\r\n"
    assert format_rows(columns, rows, "json") == ""


def test_sql_timestamps_are_utc_whatever_the_local_time_zone(spark, lakehouse: dict[str, str]) -> None:
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        _, rows = run_sql(spark, lakehouse, "SELECT min(window_start) FROM ride_window_aggregates")
    finally:
        if previous is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = previous
        time.tzset()
    assert rows == [(dt.datetime(2020, 7, 1, 0, 0),)]


def test_a_bad_query_is_a_query_error_on_one_line(spark, lakehouse: dict[str, str]) -> None:
    with pytest.raises(QueryError) as caught:
        run_sql(spark, lakehouse, "SELEC vendor_id FROM vendor_counts")
    assert "\n" not in str(caught.value) and "PARSE_SYNTAX_ERROR" in str(caught.value)

    with pytest.raises(QueryError) as caught:
        run_sql(spark, lakehouse, "SELECT nope FROM vendor_counts")
    assert "\n" not in str(caught.value) and "`nope`" in str(caught.value)

    with pytest.raises(QueryError) as caught:  # never materialized: not registered, so Spark cannot find it
        run_sql(spark, lakehouse, "SELECT * FROM raw_rides")
    assert "\n" not in str(caught.value) and "TABLE_OR_VIEW_NOT_FOUND" in str(caught.value)
    assert "`raw_rides`" in str(caught.value)


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="xml"):
        format_rows(["a"], [(1,)], "xml")
