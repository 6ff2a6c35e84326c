"""Helpers of the layers' transformation tests (bronze/, silver/, gold/): timestamps and exact DataFrame comparison.

Inputs use timezone-aware UTC datetimes; Spark (session time zone UTC) returns naive UTC datetimes.
"""

from __future__ import annotations

import datetime as dt

UTC = dt.UTC


def at(hour: int, minute: int, second: int = 0, micro: int = 0) -> dt.datetime:
    """An aware UTC datetime on 2024-03-10."""
    return dt.datetime(2024, 3, 10, hour, minute, second, micro, tzinfo=UTC)


def naive(value: dt.datetime | None) -> dt.datetime | None:
    """What Spark returns for an aware datetime: naive, in the session time zone (UTC)."""
    return None if value is None else value.astimezone(UTC).replace(tzinfo=None)


def _plain(value):
    if isinstance(value, dt.datetime):
        return naive(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _sort_key(row) -> tuple:
    # None sorts first; every other value compares with values of its own column
    return tuple((value is not None, value if value is not None else 0) for value in row)


def assert_exact(spark, actual, expected_rows, ddl: str) -> list[tuple]:
    """`actual` has exactly the columns and types of `ddl` and, in any order, exactly `expected_rows`
    (no float tolerance; aware datetimes in `expected_rows` are compared as naive UTC). Returns the rows.

    (pyspark.testing.assertDataFrameEqual imports pyspark.pandas, which fails with the installed pandas.)
    """
    expected_schema = spark.createDataFrame([], ddl).schema
    assert [(f.name, f.dataType) for f in actual.schema] == [(f.name, f.dataType) for f in expected_schema]
    got = sorted((tuple(_plain(v) for v in r) for r in actual.collect()), key=_sort_key)
    want = sorted((tuple(_plain(v) for v in r) for r in expected_rows), key=_sort_key)
    assert got == want
    return got
