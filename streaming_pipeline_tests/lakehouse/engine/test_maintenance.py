"""Table maintenance (`engine.maintenance`): OPTIMIZE compacts without changing a row, VACUUM deletes only what no
version within the retention needs, a missing table or a short retention is refused before anything is done, and
maintenance beside a running stream (on the object store) loses and duplicates nothing."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streaming_pipeline.lakehouse.engine.delta_log import commits, latest_version
from streaming_pipeline.lakehouse.engine.delta_tables import append_once
from streaming_pipeline.lakehouse.engine.maintenance import (
    MIN_VACUUM_RETENTION_HOURS,
    MaintenanceResult,
    maintain_table,
)
from streaming_pipeline.lakehouse.errors import ConfigurationError, MaintenanceError

pytestmark = pytest.mark.integration

DDL = "id BIGINT, label STRING"


class NoSpark:
    """A stand-in session that fails the test on any use: proof that nothing reached Spark."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Spark was used ({name}) although nothing should have been done")


def _files(path: Path) -> dict[str, float]:
    """Every file under the table's directory (its log included), with its modification time."""
    return {str(p.relative_to(path)): p.stat().st_mtime for p in path.rglob("*") if p.is_file()}


def _orphan(path: Path, hours_old: float) -> Path:
    """A data file no commit references (what a failed write leaves), last modified `hours_old` hours ago."""
    orphan = path / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    orphan.write_bytes(b"left by a failed write")
    then = time.time() - hours_old * 3600
    os.utime(orphan, (then, then))
    return orphan


def _rows(spark: Any, path: Path | str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row) for row in spark.read.format("delta").load(str(path)).collect())


def _detail(spark: Any, path: Path) -> dict[str, Any]:
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0].asDict()


@pytest.mark.slow
def test_many_small_appends_are_compacted_and_every_row_stays_exactly_once(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "small_appends"
    written: Counter[tuple[Any, ...]] = Counter()
    for batch in range(12):  # 12 appends of 2 files each: below the 50 small files auto compaction waits for
        rows = [(batch * 10 + i, f"b{batch}") for i in range(6)] + [(0, "same row in every batch")]
        spark.createDataFrame(rows, DDL).repartition(2).write.format("delta").mode("append").save(str(path))
        written.update(rows)
    before = _detail(spark, path)
    old_orphan, new_orphan = _orphan(path, hours_old=200), _orphan(path, hours_old=1)

    result = maintain_table(spark, str(path), vacuum_retention_hours=300)

    after = _detail(spark, path)
    assert _rows(spark, path) == written
    assert (result.files_before, result.bytes_before) == (before["numFiles"], before["sizeInBytes"])
    assert result.files_before == 24 and result.files_after == after["numFiles"] == 1
    assert result.bytes_after == after["sizeInBytes"] < result.bytes_before
    # One OPTIMIZE commit, and no VACUUM START/END commits: VACUUM adds no commit to the log.
    assert (result.version_before, result.version_after) == (11, 12)
    assert [c.operation for c in commits(str(path), after=11) or []] == ["OPTIMIZE"]
    assert result.checkpoint_version == 10 and result.checkpoint_lag == 2  # Delta's own, every 10 versions
    assert not result.checkpoint_overdue and result.checkpoint_interval == 10
    # 300 hours kept, as asked (Delta would keep its 168 and ignore RETAIN): the 200-hour-old orphan stays.
    assert result.vacuumed_files == 0 and old_orphan.exists() and new_orphan.exists()
    assert (result.vacuum_retention_hours, result.seconds > 0) == (300, True)
    assert "24 -> 1 file(s)" in result.summary() and "version 11 -> 12" in result.summary()

    again = maintain_table(spark, str(path))  # the default and minimum: 168 hours

    # VACUUM deleted the old file no version references, and kept the fresh one (a write may be under way).
    assert again.vacuumed_files == 1 and not old_orphan.exists() and new_orphan.exists()
    assert again.vacuum_retention_hours == MIN_VACUUM_RETENTION_HOURS
    assert (again.files_before, again.files_after) == (1, 1)
    assert again.version_after == again.version_before == 12  # nothing to compact: nothing committed
    # The files OPTIMIZE replaced are still there: versions within the retention stay readable.
    old_version = spark.read.format("delta").option("versionAsOf", 11).load(str(path))
    assert Counter(tuple(row) for row in old_version.collect()) == written
    assert _rows(spark, path) == written


@pytest.mark.parametrize(
    ("version", "checkpoint", "interval", "overdue"),
    [(9, None, 10, False), (10, None, 10, True), (19, 10, 10, False), (21, 10, 10, True), (21, 20, 5, False)],
)
def test_a_checkpoint_is_overdue_once_a_multiple_of_the_interval_passed_without_one(
    version: int, checkpoint: int | None, interval: int, overdue: bool
) -> None:
    result = MaintenanceResult("t", 1, 1, 1, 1, version, version, 0, 168.0, checkpoint, 0.1, interval)
    assert result.checkpoint_overdue is overdue
    assert ("a checkpoint failed?" in result.summary()) is overdue


def test_a_missing_table_is_an_error_naming_its_path_and_nothing_is_made(tmp_path: Path) -> None:
    path = tmp_path / "no_such_table"
    with pytest.raises(MaintenanceError, match=f"no Delta table at {path}"):
        maintain_table(NoSpark(), str(path))  # type: ignore[arg-type]
    assert not path.exists()


def test_a_retention_below_the_minimum_is_refused_before_anything_is_done(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    path = tmp_path / "table"
    for batch in range(3):
        write_deltalake(str(path), pa.table({"id": [batch, batch + 10]}), mode="append")
    _orphan(path, hours_old=200)
    files = _files(path)

    with pytest.raises(ConfigurationError, match="24 hours is below the safe minimum of 168 hours"):
        maintain_table(NoSpark(), str(path), vacuum_retention_hours=24)  # type: ignore[arg-type]
    assert _files(path) == files and latest_version(str(path)) == 2


def test_a_retention_below_the_tables_own_is_refused_before_optimize(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "keeps_30_days"
    for batch in range(3):
        spark.createDataFrame([(batch, "x")], DDL).write.format("delta").mode("append").save(str(path))
    thirty_days = "'delta.deletedFileRetentionDuration' = 'interval 30 days'"
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({thirty_days})")
    _orphan(path, hours_old=200)
    files, version = _files(path), latest_version(str(path))

    with pytest.raises(ConfigurationError, match=r"delta.deletedFileRetentionDuration \('interval 30 days', 720 hours"):
        maintain_table(spark, str(path), vacuum_retention_hours=200)
    assert _files(path) == files and latest_version(str(path)) == version


@pytest.mark.slow
def test_optimize_and_vacuum_beside_a_running_stream_lose_and_duplicate_nothing(
    spark: Any, session_object_store: Any
) -> None:
    """A producer appends to a source table while a stream copies it, batch by batch and exactly once
    (`append_once`), into a target; the target, the source and the target again are optimized and vacuumed
    meanwhile. The stream reads the source's compaction as no new data, and its appends never conflict with the
    compaction of its target (auto compaction is on too). The tables and the checkpoint are on the session's object
    store: OPTIMIZE rewrites its objects there and VACUUM lists them."""
    lakehouse = f"{session_object_store.lakehouse_dir}/maintenance-{uuid.uuid4().hex[:8]}"
    source, target = f"{lakehouse}/source", f"{lakehouse}/target"
    produced: Counter[tuple[Any, ...]] = Counter()
    spark.createDataFrame([(-1, "first")], DDL).write.format("delta").save(source)
    produced[(-1, "first")] += 1
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        batch = 0
        try:
            while not stop.is_set():
                rows = [(batch * 4 + i, f"p{batch}") for i in range(4)]
                spark.createDataFrame(rows, DDL).repartition(2).write.format("delta").mode("append").save(source)
                produced.update(rows)
                batch += 1
                stop.wait(0.5)  # a steady trickle the stream keeps up with
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    def copy(frame: Any, batch_id: int) -> None:
        append_once(frame, target, "copy:test", batch_id, "attempt")

    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 4)
        .load(source)
        .writeStream.foreachBatch(copy)
        .option("checkpointLocation", f"{lakehouse}/_checkpoints/target")
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        try:
            for path in (target, source, target):
                _wait_for_a_commit(target, after=latest_version(target))  # the stream wrote since the last pass
                maintain_table(spark, path)
                assert query.isActive, query.exception()
            _wait_for_a_commit(target, after=latest_version(target))  # and it keeps going
        finally:
            stop.set()
            producer.join(timeout=60)
        assert not errors, errors
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None

    assert _rows(spark, target) == produced
    assert _rows(spark, source) == produced
    for path in (target, source):
        history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
        assert {row["operation"] for row in history} <= {"WRITE", "OPTIMIZE"}
        assert any(r["operation"] == "OPTIMIZE" and r["operationParameters"]["auto"] == "false" for r in history)


def _wait_for_a_commit(path: str, *, after: int | None, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while latest_version(path) in (None, after):  # versions only grow
        if time.monotonic() > deadline:
            raise AssertionError(f"no commit to {path} after version {after} in {timeout:g} s")
        time.sleep(0.2)
