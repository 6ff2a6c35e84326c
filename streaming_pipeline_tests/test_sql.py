"""`sql`: SQL over the lakehouse's Delta tables and the answer's formats, exact output; and the command as a user
types it, over the session's materialized lakehouse (JSON rows on stdout, a bad query as one `error:` line).

Expected output is written by hand or counted from what the lakehouse was given, never with the code under test.
Inputs use timezone-aware UTC datetimes (session time zone UTC).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from collections import Counter
from decimal import Decimal

import pytest

from streaming_pipeline.lakehouse.engine.catalog import register, registered_location, unregister
from streaming_pipeline.lakehouse.errors import QueryError
from streaming_pipeline.lakehouse.sql import format_rows, register_tables, run_sql
from streaming_pipeline_tests.cli_helpers import environment_without
from streaming_pipeline_tests.kafka_helpers import REPO_ROOT

UTC = dt.UTC


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


def test_tables_are_queried_by_catalog_name_and_a_name_follows_its_table_to_another_path(
    spark, lakehouse: dict[str, str], tmp_path
) -> None:
    names = {"vendor_counts": "gold.vendor_counts", "raw_rides": "bronze.raw_rides"}
    assert register_tables(spark, lakehouse, names)[0] == "vendor_counts"
    assert run_sql(spark, lakehouse, "SELECT * FROM gold.vendor_counts ORDER BY vendor_id", names)[1] == [
        (1, 87),
        (2, 179),
    ]
    assert not spark.catalog.tableExists("bronze.raw_rides")  # never materialized: no name for it
    assert registered_location(spark, "gold.vendor_counts") == "file:" + lakehouse["vendor_counts"]
    assert not register(spark, "gold.vendor_counts", lakehouse["vendor_counts"])  # registered once

    moved = str(tmp_path / "vendor_counts")
    spark.createDataFrame([(3, 5)], "vendor_id INT, trip_count BIGINT").write.format("delta").save(moved)
    try:
        assert register(spark, "gold.vendor_counts", moved)
        assert run_sql(spark, {}, "SELECT * FROM gold.vendor_counts")[1] == [(3, 5)]
    finally:
        unregister(spark, "gold.vendor_counts")
    assert not spark.catalog.tableExists("gold.vendor_counts")
    assert spark.read.format("delta").load(moved).count() == 1  # dropping the name deleted no file


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


@pytest.mark.integration
@pytest.mark.slow
def test_sql_command_prints_json_rows_and_fails_in_one_line(materialized_lakehouse, session_stack) -> None:
    """Over the session's materialized lakehouse: the rows on the session's engine (SPARK_REMOTE, as `stack env`
    exports it), counted here from the rides the lakehouse was given; the bad query with an in-process Spark (no
    SPARK_REMOTE), whose driver would log the parse error a second time if the command let it."""
    local = environment_without(("SPARK_",))
    local["LAKEHOUSE_DIR"] = str(materialized_lakehouse.lakehouse)
    env = {**local, "SPARK_REMOTE": str(session_stack.up(engine=True).spark_remote)}
    counts = Counter(int(v) for v in materialized_lakehouse.rides["vendor_id"])
    command = [sys.executable, "-m", "streaming_pipeline.devstack.cli", "sql"]
    ok = subprocess.run(
        [*command, "SELECT vendor_id, trip_count FROM gold.vendor_counts ORDER BY vendor_id", "--format", "json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert ok.stdout == "".join(
        f'{{"vendor_id": {vendor}, "trip_count": {count}}}\n' for vendor, count in sorted(counts.items())
    )
    assert "BetaWarning" not in ok.stderr, ok.stderr[-3000:]
    bad = subprocess.run(
        [*command, "SELEC 1"], cwd=REPO_ROOT, env=local, capture_output=True, text=True, timeout=300, check=False
    )
    assert bad.returncode == 1 and bad.stdout == ""
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "PARSE_SYNTAX_ERROR" in errors[0], bad.stderr[-3000:]
    assert "Traceback" not in bad.stderr and "SQLQueryContextLogger" not in bad.stderr
