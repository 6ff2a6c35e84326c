"""Unit tests of `engine.streams`: what a stream run reports from Spark's progress, and which failed starts it tries
again."""

from __future__ import annotations

from typing import Any

import pytest

from streaming_pipeline.engine.streams import (
    MAX_WORKER_START_RETRIES,
    WORKER_START_RETRY_SECONDS,
    StreamRunReport,
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
