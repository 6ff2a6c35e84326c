"""Row counts, previews, filtered counts, duplicate keys and sums read with delta-rs agree with Spark's own
answers, on tables written by Spark: appends, a MERGE, an overwrite, a schema that grew, nulls, timestamps and
binary cells, on the local disk and on the object store; a table delta-rs cannot count exactly (deletion vectors,
column mapping, a store other than S3) is counted by Spark."""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.engine.table_snapshot import first_rows, row_count

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


def test_a_table_on_the_object_store_is_read_there_with_delta_rs_and_other_stores_are_left_to_spark(
    spark: Any, session_object_store: Any
) -> None:
    from streaming_pipeline.lakehouse.engine.delta_tables import count_rows
    from streaming_pipeline.lakehouse.engine.row_filters import not_null
    from streaming_pipeline.lakehouse.engine.table_snapshot import column_sums, matching_rows

    path = f"{session_object_store.lakehouse_dir}/snapshot-{uuid.uuid4().hex[:8]}/table"
    rows = [(i, f"n{i}" if i % 3 else None, datetime(2026, 1, 1, 0, i % 60), bytes([i % 256])) for i in range(25)]
    spark.createDataFrame(rows[:12], DDL).write.format("delta").save(path)
    spark.createDataFrame(rows[12:], DDL).repartition(2).write.format("delta").mode("append").save(path)

    assert latest_version(path) == 1
    assert row_count(path, 1) == spark.read.format("delta").load(path).count() == 25
    assert row_count(path, 0) == 12
    named = sum(1 for row in rows if row[1] is not None)
    assert matching_rows(path, 1, not_null("name")) == count_rows(spark, path, not_null("name")) == named
    assert column_sums(path, 1, ["id"]) == {"id": sum(range(25))}
    preview = first_rows(path, 1, 10, ["id"])
    assert preview is not None and list(preview["id"]) == list(range(10))
    assert list(preview["at"]) == [datetime(2026, 1, 1, 0, i) for i in range(10)]  # naive UTC, as Spark gives it

    assert row_count("abfss://lake@account.dfs.core.windows.net/raw_rides", 0) is None
    assert first_rows("gs://bucket/lakehouse/raw_rides", 0, 10) is None


KAFKA_DDL = "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, total_amount DOUBLE"


def _kafka_rows() -> list[tuple]:
    """Two topics, three partitions, a null amount every fifth row, and two coordinates written twice."""
    rows = [("rides" if i % 4 else "pickups", i % 3, i // 3, None if i % 5 == 0 else float(i)) for i in range(60)]
    return [*rows, rows[7], rows[7], rows[30]]


@pytest.mark.parametrize("feature", [None, "deletion-vectors", "column-mapping"])
def test_filtered_counts_duplicate_keys_and_sums_agree_with_spark(
    spark: Any, tmp_path: Path, feature: str | None
) -> None:
    from pyspark.sql import functions as F

    from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows, sum_columns
    from streaming_pipeline.lakehouse.engine.row_filters import all_of, equal_to, kafka_offsets_below, not_null
    from streaming_pipeline.lakehouse.engine.table_snapshot import column_sums, duplicate_keys, matching_rows

    path = str(tmp_path / "table")
    rows = _kafka_rows()
    writer = spark.createDataFrame(rows[:30], KAFKA_DDL).write.format("delta")
    if feature == "deletion-vectors":
        writer = writer.option("delta.enableDeletionVectors", "true")
    if feature == "column-mapping":  # the files name the columns otherwise: Spark answers
        writer = writer.option("delta.columnMapping.mode", "name")
    writer.save(path)
    spark.createDataFrame(rows[30:], KAFKA_DDL).repartition(2).write.format("delta").mode("append").save(path)
    if feature == "deletion-vectors":  # a deletion vector: delta-rs cannot count exactly, Spark answers
        spark.sql(f"DELETE FROM delta.`{path}` WHERE kafka_offset = 0")
        rows = [r for r in rows if r[2] != 0]

    settled = {0: 10, 1: 4}  # partition 2 is not settled at all
    below = all_of(equal_to("kafka_topic", "rides"), kafka_offsets_below(settled))
    expected_below = sum(1 for t, p, o, _ in rows if t == "rides" and p in settled and o < settled[p])
    expected_amounts = sum(1 for r in rows if r[3] is not None)
    keys = [(t, p, o) for t, p, o, _ in rows]
    expected_duplicates = sum(1 for k in set(keys) if keys.count(k) > 1)
    assert expected_duplicates == 2 and 0 < expected_below < len(rows)

    version = latest_version(path)
    assert version is not None
    frame = spark.read.format("delta").load(path)
    assert frame.where(below.spark()).count() == expected_below  # the two forms of the filter say the same
    assert count_rows(spark, path, below) == expected_below
    assert count_rows(spark, path, not_null("total_amount")) == expected_amounts
    assert count_rows(spark, path, kafka_offsets_below({})) == 0
    assert count_rows(spark, path) == len(rows)
    assert count_rows(spark, path, version=0) == 30
    key = ["kafka_topic", "kafka_partition", "kafka_offset"]
    assert count_duplicate_keys(spark, path, key) == expected_duplicates
    assert count_duplicate_keys(spark, path, key, version=0) == 0
    offsets = sum_columns(spark, path, ["kafka_offset", "kafka_partition"])
    assert offsets == {"kafka_offset": sum(r[2] for r in rows), "kafka_partition": sum(r[1] for r in rows)}
    assert offsets["kafka_offset"] == frame.agg(F.sum("kafka_offset")).collect()[0][0]

    snapshot_answers = (
        matching_rows(path, version, below),
        duplicate_keys(path, version, key),
        column_sums(path, version, ["kafka_offset"]),
    )
    if feature is not None:
        assert snapshot_answers == (None, None, None)
    else:
        assert snapshot_answers == (expected_below, expected_duplicates, {"kafka_offset": offsets["kafka_offset"]})


def test_no_table_counts_nothing(spark: Any, tmp_path: Path) -> None:
    from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows, sum_columns

    missing = str(tmp_path / "missing")
    assert count_rows(spark, missing) == count_rows(spark, missing, version=-1) == 0
    assert count_duplicate_keys(spark, missing, ["id"]) == 0
    assert sum_columns(spark, missing, ["id"]) == {"id": 0}
