"""Branching, stream-table enrichment and SQL over the lakehouse: exact rows, computed independently."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from streaming_pipeline.errors import ConfigurationError, QueryError
from streaming_pipeline.sql import format_rows, run_sql
from streaming_pipeline.taxi_zones import read_taxi_zones, taxi_zones_csv_path
from streaming_pipeline.transformations import enrich_rides_with_zones, high_amount_rides, low_amount_rides

REPO_ROOT = Path(__file__).resolve().parents[1]
LOOKUP = REPO_ROOT / "streaming_pipeline" / "data" / "taxi_zone_lookup.csv"


def _lookup() -> dict[int, tuple[str, str, str]]:
    """The packaged lookup read with the csv module: {location id: (borough, zone, service_zone)}."""
    with LOOKUP.open(newline="") as handle:
        return {int(r["locationid"]): (r["borough"], r["zone"], r["service_zone"]) for r in csv.DictReader(handle)}


def _rides(spark, amounts: list[float | None]):  # type: ignore[no-untyped-def]
    rows = [(i, 2, amount, 161, 236) for i, amount in enumerate(amounts)]
    return spark.createDataFrame(
        rows, "kafka_offset BIGINT, vendor_id INT, total_amount DOUBLE, pu_location_id INT, do_location_id INT"
    )


# ----------------------------------------------------------------------------------------------- branching


def test_threshold_boundary_exactly_40_goes_high_39_99_goes_low_null_goes_to_neither(spark) -> None:
    rides = _rides(spark, [40.00, 39.99, None, 120.5, 0.0, 40.01])
    high = sorted(tuple(r) for r in high_amount_rides(rides, 40.0).select("kafka_offset", "total_amount").collect())
    low = sorted(tuple(r) for r in low_amount_rides(rides, 40.0).select("kafka_offset", "total_amount").collect())
    assert high == [(0, 40.0), (3, 120.5), (5, 40.01)]
    assert low == [(1, 39.99), (4, 0.0)]
    # Together they hold each non-null ride exactly once; the null one is in neither.
    assert sorted(o for o, _ in high + low) == [0, 1, 3, 4, 5]
    assert high_amount_rides(rides, 40.0).columns == rides.columns == low_amount_rides(rides, 40.0).columns


# ----------------------------------------------------------------------------------------------- enrichment


def test_read_taxi_zones_gives_the_265_zones_with_exact_columns(spark) -> None:
    zones = read_taxi_zones(spark, taxi_zones_csv_path())
    assert zones.columns == ["location_id", "borough", "zone", "service_zone"]
    rows = {r.location_id: (r.borough, r.zone, r.service_zone) for r in zones.collect()}
    assert rows == _lookup() and len(rows) == 265
    assert rows[1] == ("EWR", "Newark Airport", "EWR")


def test_taxi_zones_csv_override_and_a_missing_file(tmp_path: Path, spark) -> None:
    own = tmp_path / "zones.csv"
    own.write_text('LocationID,Borough,Zone,service_zone\n7,"Queens","Astoria","Boro Zone"\n')
    assert taxi_zones_csv_path(str(own)) == str(own.resolve())
    assert [tuple(r) for r in read_taxi_zones(spark, taxi_zones_csv_path(str(own))).collect()] == [
        (7, "Queens", "Astoria", "Boro Zone")
    ]
    with pytest.raises(ConfigurationError, match=r"TAXI_ZONES_CSV='.*nowhere\.csv': no such file"):
        taxi_zones_csv_path(str(tmp_path / "nowhere.csv"))


def test_an_unknown_zone_id_keeps_its_ride_with_null_zone_columns(spark) -> None:
    rides = spark.createDataFrame(
        [(1, 1, 999), (2, 999, 265)], "kafka_offset BIGINT, pu_location_id INT, do_location_id INT"
    )
    zones = read_taxi_zones(spark, taxi_zones_csv_path())
    got = sorted(tuple(r) for r in enrich_rides_with_zones(rides, zones).select(
        "kafka_offset", "pu_borough", "pu_zone", "do_borough", "do_zone").collect())
    assert got == [(1, "EWR", "Newark Airport", None, None), (2, None, None, "Unknown", "NA")]


def test_enrichment_equals_a_plain_csv_join_of_the_lookup(spark, rides_csv: Path) -> None:
    lookup = _lookup()
    with rides_csv.open(newline="") as handle:
        rides = [(n, int(r["PULocationID"]), int(r["DOLocationID"])) for n, r in enumerate(csv.DictReader(handle))]
    expected = sorted(
        (n, lookup.get(pu, (None, None))[0], lookup.get(pu, (None, None))[1],
         lookup.get(do, (None, None))[0], lookup.get(do, (None, None))[1])
        for n, pu, do in rides
    )
    frame = spark.createDataFrame(rides, "kafka_offset BIGINT, pu_location_id INT, do_location_id INT")
    enriched = enrich_rides_with_zones(frame, read_taxi_zones(spark, taxi_zones_csv_path()))
    got = sorted(tuple(r) for r in enriched.select("kafka_offset", "pu_borough", "pu_zone", "do_borough", "do_zone")
                 .collect())
    assert got == expected and len(got) == 266  # every ride once


# ----------------------------------------------------------------------------------------------- SQL


@pytest.fixture(scope="module")
def small_lakehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("sql-lakehouse")
    counts = spark.createDataFrame([(1, 87), (2, 179)], "vendor_id INT, trip_count BIGINT")
    counts.write.format("delta").save(str(root / "vendor_counts"))
    windows = spark.createDataFrame(
        [(datetime(2020, 7, 1, 0, 0), 1, 3798.04, 2), (datetime(2020, 7, 1, 0, 10), 2, 12.5, 0)],
        "window_start TIMESTAMP, vendor_id INT, total_amount_sum DOUBLE, late_trip_count BIGINT",
    )
    windows.write.format("delta").save(str(root / "ride_window_aggregates"))
    return {name: str(root / name) for name in ("vendor_counts", "ride_window_aggregates", "raw_rides")}


def test_sql_output_in_each_format(spark, small_lakehouse: dict[str, str]) -> None:
    columns, rows = run_sql(spark, small_lakehouse, "SELECT vendor_id, trip_count FROM vendor_counts ORDER BY vendor_id")
    assert (columns, rows) == (["vendor_id", "trip_count"], [(1, 87), (2, 179)])
    assert format_rows(columns, rows, "table") == (
        "vendor_id  trip_count\n"
        "---------  ----------\n"
        "1          87\n"
        "2          179\n"
        "(2 rows)\n"
    )
    assert format_rows(columns, rows, "csv") == "vendor_id,trip_count\n1,87\n2,179\n"
    assert format_rows(columns, rows, "json") == '{"vendor_id": 1, "trip_count": 87}\n{"vendor_id": 2, "trip_count": 179}\n'

    columns, rows = run_sql(spark, small_lakehouse, "SELECT * FROM ride_window_aggregates ORDER BY window_start")
    lines = format_rows(columns, rows, "json").splitlines()
    assert [json.loads(line) for line in lines] == [
        {"window_start": "2020-07-01T00:00:00", "vendor_id": 1, "total_amount_sum": 3798.04, "late_trip_count": 2},
        {"window_start": "2020-07-01T00:10:00", "vendor_id": 2, "total_amount_sum": 12.5, "late_trip_count": 0},
    ]
    assert format_rows(columns, rows, "csv").splitlines()[1] == "2020-07-01 00:00:00,1,3798.04,2"


def test_a_bad_query_is_one_clear_line(spark, small_lakehouse: dict[str, str]) -> None:
    with pytest.raises(QueryError) as caught:
        run_sql(spark, small_lakehouse, "SELECT nope FROM vendor_counts")
    message = str(caught.value)
    assert "\n" not in message and "nope" in message and message.startswith("the query failed: ")
    with pytest.raises(QueryError, match="raw_rides"):  # not materialized: no such view
        run_sql(spark, small_lakehouse, "SELECT * FROM raw_rides")


@pytest.mark.integration
def test_sql_command_prints_json_rows_and_fails_in_one_line(small_lakehouse: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    env["LAKEHOUSE_DIR"] = str(Path(small_lakehouse["vendor_counts"]).parent)
    command = [sys.executable, "-m", "streaming_pipeline.cli", "sql"]
    ok = subprocess.run([*command, "SELECT * FROM vendor_counts ORDER BY vendor_id", "--format", "json"],
                        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert ok.stdout == '{"vendor_id": 1, "trip_count": 87}\n{"vendor_id": 2, "trip_count": 179}\n'
    bad = subprocess.run([*command, "SELEC 1"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert bad.returncode == 1 and bad.stdout == ""
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "PARSE_SYNTAX_ERROR" in errors[0], bad.stderr[-3000:]
    assert "Traceback" not in bad.stderr
