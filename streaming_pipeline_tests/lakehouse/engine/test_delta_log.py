"""The Delta log read from its newest checkpoint forward: versions, commits and transactions agree with Spark's own
answers on tables Spark wrote, after log cleanup too, and the files read per call do not grow with the history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streaming_pipeline.lakehouse.engine.delta_log import DeltaLog, commits_since, latest_version, transactions
from streaming_pipeline.lakehouse.engine.delta_tables import append_once
from streaming_pipeline_tests.delta_helpers import clean_log

pytestmark = pytest.mark.integration

DDL = "id INT, name STRING"


def _append(spark: Any, path: Path, app_id: str, batch: int) -> None:
    frame = spark.createDataFrame([(batch, f"row {batch}")], DDL)
    assert append_once(frame, str(path), app_id, batch, f"attempt-{batch}")


def _spark_transactions(spark: Any, path: Path) -> dict[str, int]:
    """The newest txnVersion per appId, from every commit Spark's history still lists (before any cleanup)."""
    found: dict[str, int] = {}
    for line_file in sorted((path / "_delta_log").glob("*.json")):
        for line in line_file.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                found[action["txn"]["appId"]] = action["txn"]["version"]
    return found


class _CountingFs:
    """An fsspec filesystem that counts its calls and refuses to list."""

    def __init__(self, fs: Any) -> None:
        self.fs, self.calls = fs, 0

    def ls(self, *_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the Delta log was listed")

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.fs, name)
        if callable(attribute):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                return attribute(*args, **kwargs)

            return counted
        return attribute


def _reads(path: Path) -> tuple[int | None, dict[str, int], int]:
    """(latest version, {appId: version}, filesystem calls), read without listing the log."""
    log = DeltaLog(str(path))
    counting = _CountingFs(log.fs)
    log.fs = counting
    latest = log.latest_version()
    found = {app: txn.version for app, txn in log.transactions(version=latest).items()}
    return latest, found, counting.calls


@pytest.mark.slow
def test_versions_and_transactions_match_spark_and_survive_log_cleanup_at_a_constant_cost(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "table"
    # A checkpoint every 5 commits (Delta's default is 10) keeps the test short; the reader takes any interval.
    spark.sql(f"CREATE TABLE delta.`{path}` ({DDL}) USING DELTA TBLPROPERTIES ('delta.checkpointInterval' = '5')")
    for batch in range(6):  # versions 1..6
        _append(spark, path, "writer-a", batch)
    _append(spark, path, "writer-b", 7)  # version 7
    expected = _spark_transactions(spark, path)
    assert expected == {"writer-a": 5, "writer-b": 7}
    spark_latest = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]["version"]
    early = _reads(path)
    assert early[:2] == (spark_latest, expected) == (7, expected)

    for batch in range(6, 21):  # versions 8..22
        _append(spark, path, "writer-a", batch)
    later = _reads(path)
    assert later[:2] == (22, {"writer-a": 20, "writer-b": 7})
    # Two commits after the newest checkpoint (5, then 20): the same file operations at version 7 and at 22.
    assert later[2] == early[2], (early, later)

    checkpoint = clean_log(path)
    assert checkpoint == 20 and not (path / "_delta_log" / f"{0:020d}.json").exists()
    assert _reads(path)[:2] == (22, {"writer-a": 20, "writer-b": 7})
    assert transactions(str(path))["writer-b"].version == 7, "writer-b committed only before the checkpoint"
    # The commits a run made are still read from their own files; older ones are simply gone.
    assert [b.batch_id for b in commits_since(str(path), 19, "writer-a")] == [18, 19, 20]
    # Spark reads the cleaned table as Delta does after cleanup.
    assert spark.read.format("delta").load(str(path)).count() == 22


def test_a_missing_table_has_no_version_and_no_transactions(tmp_path: Path) -> None:
    assert latest_version(str(tmp_path / "nothing")) is None
    assert transactions(str(tmp_path / "nothing")) == {}
