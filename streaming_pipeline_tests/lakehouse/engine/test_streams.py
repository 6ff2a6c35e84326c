"""Unit tests of `engine.streams`: what a stream run reports from Spark's progress, and which failed starts it tries
again."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from streaming_pipeline.lakehouse.engine import streams
from streaming_pipeline.lakehouse.engine.streams import (
    MAX_WORKER_START_RETRIES,
    WORKER_START_RETRY_SECONDS,
    StreamRunReport,
    remove_unfinished_log_writes,
    run_available_now,
)


def test_observed_metrics_are_summed_over_batches_in_both_progress_shapes() -> None:
    """In-process progress JSON has {metric: value}; Spark Connect's has {values, schema}."""
    report = StreamRunReport("q")
    schema = {"type": "struct", "fields": [{"name": "unknown_pickup_zones"}, {"name": "unknown_dropoff_zones"}]}
    report.add({"numInputRows": 5, "observedMetrics": {"enrichment": {"values": [2, 0], "schema": schema}}})
    report.add(
        {"numInputRows": 7, "observedMetrics": {"enrichment": {"unknown_pickup_zones": 1, "unknown_dropoff_zones": 3}}}
    )
    assert report.observed_metrics("enrichment") == {"unknown_pickup_zones": 3, "unknown_dropoff_zones": 3}
    assert report.observed_metrics("other") == {}
    assert (report.input_rows, report.batches) == (12, 2)


class _DrainedQuery:
    """A query that has drained at once and reported nothing (what an availableNow run on an empty source does)."""

    isActive = False
    recentProgress: list[Any] = []

    def awaitTermination(self, timeout: float) -> bool:
        return True


class _Writer:
    """A DataStreamWriter whose start() fails with the given errors, in order, then starts a drained query."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.starts = 0

    def queryName(self, name: str) -> _Writer:
        return self

    def trigger(self, **kwargs: Any) -> _Writer:
        return self

    def start(self) -> _DrainedQuery:
        self.starts += 1
        if self.errors:
            raise self.errors.pop(0)
        return _DrainedQuery()


class _Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def info(self, msg: str, /) -> None:
        pass

    def warning(self, msg: str, /) -> None:
        self.warnings.append(msg)


# Spark 4.2's text when a new Python worker misses its 10 s (PythonWorkerFactory), as the Connect client shows it.
WORKER_TIMEOUT = "[INTERNAL_ERROR] Python worker failed to connect back. SQLSTATE: XX000"


def test_a_start_whose_python_worker_did_not_connect_back_is_tried_again() -> None:
    writer, log, pauses = _Writer([RuntimeError(WORKER_TIMEOUT)] * 2), _Log(), []
    report = run_available_now("raw_rides", lambda: writer, log=log, sleep=pauses.append)  # type: ignore[arg-type]
    assert writer.starts == 3 and report.batches == 0
    assert pauses == [WORKER_START_RETRY_SECONDS] * 2
    assert [w.split(":")[0] for w in log.warnings] == ["raw_rides", "raw_rides"]
    assert "(2 of 2)" in log.warnings[-1] and "did not connect back" in log.warnings[-1]


def test_a_worker_that_keeps_missing_the_start_fails_the_run_with_sparks_error() -> None:
    writer = _Writer([RuntimeError(WORKER_TIMEOUT)] * (MAX_WORKER_START_RETRIES + 1))
    with pytest.raises(RuntimeError, match="failed to connect back"):
        run_available_now("raw_rides", lambda: writer, log=_Log(), sleep=lambda _: None)  # type: ignore[arg-type]
    assert writer.starts == MAX_WORKER_START_RETRIES + 1


def test_other_start_errors_are_not_retried() -> None:
    writer, log = _Writer([RuntimeError("[DELTA_TABLE_NOT_FOUND] no table")]), _Log()
    with pytest.raises(RuntimeError, match="DELTA_TABLE_NOT_FOUND"):
        run_available_now("raw_rides", lambda: writer, log=log, sleep=lambda _: None)  # type: ignore[arg-type]
    assert writer.starts == 1 and log.warnings == []


def _not_empty(location: str) -> str:
    """Spark 4's refusal to start at batch 0, as a killed run's leftover makes it (seen in the kill tests)."""
    return (
        f"[STREAM_FAILED] Query [id = 44ee39c0] terminated with exception: [STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY] "
        f"The checkpoint location {location} should be empty on batch 0\nPlease either use a new checkpoint "
        "location, or delete the existing data in the checkpoint location. SQLSTATE: 42K03"
    )


@pytest.mark.parametrize("store", ["file", "s3a"])
def test_only_the_unfinished_writes_of_a_killed_run_are_removed_from_an_offsets_log(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the local disk, and on an object store (fsspec's in-memory file system standing in for the S3 client)."""
    if store == "file":
        file_system: Any = LocalFileSystem()
        log_dir, location = str(tmp_path / "offsets"), f"file:{tmp_path}/offsets"
    else:
        file_system = MemoryFileSystem()
        monkeypatch.setattr(streams, "s3_filesystem", lambda: file_system)
        log_dir, location = f"bucket-{uuid.uuid4().hex[:8]}/lakehouse/_checkpoints/t/offsets", "s3a://"
        location += log_dir
    file_system.makedirs(log_dir, exist_ok=True)
    leftover = ".0.1520a768-3722-4c4d-bf57-b56664f99c7d.tmp"
    file_system.touch(f"{log_dir}/{leftover}")
    assert remove_unfinished_log_writes("[DELTA_TABLE_NOT_FOUND] no table") == []
    assert remove_unfinished_log_writes(_not_empty(location.replace(f"{store}:", "abfss:"))) == []
    assert file_system.exists(f"{log_dir}/{leftover}")
    # A log with a batch in it is not a leftover: Spark's error stands.
    file_system.pipe(f"{log_dir}/0", b"v1\n")
    assert remove_unfinished_log_writes(_not_empty(location)) == []
    assert file_system.exists(f"{log_dir}/{leftover}")
    file_system.rm_file(f"{log_dir}/0")
    assert remove_unfinished_log_writes(_not_empty(location)) == [f"{location}/{leftover}"]
    assert file_system.ls(log_dir, detail=False) == []


def test_a_query_whose_checkpoint_a_run_killed_at_batch_0_left_behind_starts_and_writes_every_row(
    spark: Any, tmp_path: Path
) -> None:
    """The checkpoint as a run killed while it wrote batch 0's offsets leaves it: the query starts at batch 0 and
    writes every row once."""
    source, sink, checkpoint = (str(tmp_path / name) for name in ("source", "sink", "checkpoint"))
    spark.range(7).write.format("delta").save(source)
    spark.readStream.format("delta").load(source).writeStream.format("delta").option(
        "checkpointLocation", checkpoint
    ).trigger(availableNow=True).start(sink).awaitTermination()
    # Keep what the killed run had written before batch 0's offsets: the checkpoint's metadata and its source dir.
    for name in ("offsets", "commits"):
        for file in (tmp_path / "checkpoint" / name).iterdir():
            file.unlink()
    (tmp_path / "checkpoint" / "offsets" / f".0.{uuid.uuid4()}.tmp").touch()
    shutil.rmtree(sink)
    log = _Log()

    def writer() -> Any:
        return (
            spark.readStream.format("delta")
            .load(source)
            .writeStream.format("delta")
            .option("checkpointLocation", checkpoint)
            .option("path", sink)
        )

    report = run_available_now("leftover", writer, log=log)
    assert sorted(r.id for r in spark.read.format("delta").load(sink).collect()) == list(range(7))
    assert report.input_rows == 7
    assert len(log.warnings) == 1 and "unfinished write of a killed run" in log.warnings[0]
