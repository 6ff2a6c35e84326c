"""Row counts and previews read with delta-rs agree with Spark's own answers, on tables written by Spark:
appends, a MERGE, an overwrite, a schema that grew, nulls, timestamps and binary cells."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from streaming_pipeline.engine.delta_log import latest_version
from streaming_pipeline.engine.table_snapshot import first_rows, row_count

pytestmark = pytest.mark.integration

DDL = "id INT, name STRING, at TIMESTAMP, payload BINARY"


def _spark_rows(spark: Any, path: Path, order: list[str], version: int) -> list[tuple]:
    frame = spark.read.format("delta").option("versionAsOf", version).load(str(path))
    return [tuple(row) for row in frame.orderBy(*order).limit(10).collect()]


def _snapshot_rows(path: Path, order: list[str], version: int) -> list[tuple]:
    frame = first_rows(str(path), version, 10, order)
    assert frame is not None
    return [
        tuple(None if value is None or value != value else value for value in row)  # NaN (pandas' null) -> None
        for row in frame.astype(object).itertuples(index=False)
    ]


def test_row_count_and_first_rows_agree_with_spark_through_appends_merge_overwrite_and_a_new_column(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "table"
    rows = [(i, f"n{i}" if i % 3 else None, datetime(2026, 1, 1, 0, i % 60), bytes([i % 256])) for i in range(25)]
    spark.createDataFrame(rows[:12], DDL).write.format("delta").save(str(path))
    spark.createDataFrame(rows[12:], DDL).repartition(3).write.format("delta").mode("append").save(str(path))
    spark.sql(
        f"MERGE INTO delta.`{path}` t USING (SELECT 3 AS id, 'merged' AS name) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET t.name = s.name"
    )
    spark.createDataFrame([(100, "extra", None, None, 7.5)], DDL + ", score DOUBLE").write.format("delta").mode(
        "append"
    ).option("mergeSchema", "true").save(str(path))

    version = latest_version(str(path))
    assert version == 3
    assert row_count(str(path), version) == spark.read.format("delta").load(str(path)).count() == 26
    for order in (["id"], ["name", "id"]):
        snapshot = _snapshot_rows(path, order, version)
        assert snapshot == _spark_rows(spark, path, order, version)
        assert len(snapshot) == 10

    # An earlier version, as it was.
    assert row_count(str(path), 0) == 12
    assert _snapshot_rows(path, ["id"], 0) == _spark_rows(spark, path, ["id"], 0)

    spark.createDataFrame(rows[:2], DDL).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
        str(path)
    )
    assert row_count(str(path), 4) == 2
    unordered = first_rows(str(path), 4, 10)
    assert unordered is not None and sorted(unordered["id"]) == [0, 1]


def test_an_object_store_uri_is_left_to_spark(tmp_path: Path) -> None:
    assert row_count("s3a://bucket/lakehouse/raw_rides", 0) is None
    assert first_rows("s3a://bucket/lakehouse/raw_rides", 0, 10) is None
