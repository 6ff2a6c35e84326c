"""Where the work goes: micro-batch progress from a Spark event log, and the bronze handler's steps from its markers
(the breakdowns of `bench live` and `bench throughput`). Event logs and Delta logs written here by hand, as Spark
and Delta lay them out."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from streaming_pipeline.devstack.bench.common import bronze_handler_steps
from streaming_pipeline.devstack.bench.throughput import SizeFigures, _job_phases
from streaming_pipeline.devstack.engine_events import (
    PROGRESS_EVENT,
    event_log_conf,
    progress_reports,
    query_breakdowns,
)

START = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC).timestamp()


def _progress(name: str, seconds_after_start: float, rows: list[int], **durations: int) -> dict[str, object]:
    when = datetime.fromtimestamp(START + seconds_after_start, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return {
        "id": f"id-{name}",
        "name": name,
        "timestamp": when,
        "batchId": 0,
        "durationMs": durations,
        "sources": [{"description": "source", "numInputRows": n} for n in rows],
    }


def _event_log(directory: Path, progresses: list[dict[str, object]]) -> None:
    """Spark 4's rolling layout: a folder per application, its events in numbered files, plus other events."""
    app = directory / "eventlog_v2_local-1"
    app.mkdir(parents=True)
    (app / "appstatus_local-1.inprogress").write_text("")
    lines = [json.dumps({"Event": "SparkListenerJobStart", "Job ID": 1})]
    lines += [json.dumps({"Event": PROGRESS_EVENT, "progress": p}) for p in progresses[:2]]
    (app / "events_1_local-1").write_text("\n".join(lines) + "\n")
    rest = [json.dumps({"Event": PROGRESS_EVENT, "progress": p}) for p in progresses[2:]]
    # The file being written may end in half a line.
    (app / "events_2_local-1").write_text("\n".join(rest) + '\n{"Event": "' + PROGRESS_EVENT + '", "progr')


def test_event_log_conf_asks_for_plain_json_in_the_folder(tmp_path: Path) -> None:
    conf = event_log_conf(tmp_path / "events")
    assert (tmp_path / "events").is_dir()
    assert conf == {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": (tmp_path / "events").resolve().as_uri(),
        "spark.eventLog.compress": "false",
    }


def test_each_querys_batches_in_the_window_are_summed_per_phase(tmp_path: Path) -> None:
    _event_log(
        tmp_path,
        [
            _progress("raw_rides", -1, [500], addBatch=9000, triggerExecution=9500),  # before the window
            _progress("raw_rides", 1, [300], latestOffset=10, addBatch=1200, walCommit=40, triggerExecution=1300),
            _progress("raw_rides", 5, [200], latestOffset=30, addBatch=800, walCommit=60, triggerExecution=900),
            _progress("vendor_counts", 3, [250, 50], getBatch=20, addBatch=400, triggerExecution=500),
            _progress("vendor_counts", 11, [999], addBatch=1, triggerExecution=1),  # after it
        ],
    )
    reports = progress_reports(tmp_path)
    assert len(reports) == 5
    breakdowns = query_breakdowns(reports, START, START + 10)
    assert list(breakdowns) == ["raw_rides", "vendor_counts"]
    raw, counts = breakdowns["raw_rides"], breakdowns["vendor_counts"]
    assert (raw.micro_batches, raw.input_rows) == (2, 500)
    assert raw.phase_seconds == {
        "latestOffset": 0.04,
        "getBatch": 0.0,
        "queryPlanning": 0.0,
        "addBatch": 2.0,
        "walCommit": 0.1,
        "commitOffsets": 0.0,
        "triggerExecution": 2.2,
    }
    assert raw.seconds_per_batch("addBatch") == pytest.approx(1.0)
    assert (counts.micro_batches, counts.input_rows) == (1, 300)
    assert counts.phase_seconds["getBatch"] == 0.02 and counts.phase_seconds["triggerExecution"] == 0.5


def _delta_commit(log: Path, version: int, marker: dict[str, object] | None) -> None:
    info: dict[str, object] = {"operation": "WRITE", "operationMetrics": {"numOutputRows": "1"}}
    if marker is not None:
        info["userMetadata"] = json.dumps(marker)
    (log / f"{version:020d}.json").write_text(json.dumps({"commitInfo": info}) + "\n")


def test_the_handlers_steps_are_the_medians_of_its_commits_after_a_version(tmp_path: Path) -> None:
    log = tmp_path / "raw_rides" / "_delta_log"
    log.mkdir(parents=True)
    _delta_commit(log, 0, {"batch_id": 0, "handler_ms": {"checkpoint": 100, "registry": 100}})  # before
    _delta_commit(log, 1, {"batch_id": 1, "handler_ms": {"checkpoint": 1, "committed_check": 4, "registry": 20}})
    _delta_commit(log, 2, None)  # a compaction: no marker
    _delta_commit(log, 3, {"batch_id": 2, "handler_ms": {"checkpoint": 3, "committed_check": 2, "registry": 30}})
    _delta_commit(log, 4, {"batch_id": 3, "handler_ms": {"checkpoint": 2, "committed_check": 9, "registry": 10}})
    steps, batches = bronze_handler_steps(str(tmp_path / "raw_rides"), 0)
    assert batches == 3
    assert steps == {"checkpoint": 2.0, "committed_check": 4.0, "registry": 20.0}
    assert bronze_handler_steps(str(tmp_path / "nothing"), None) == ({}, 0)


def test_the_throughput_bench_splits_each_jobs_runs_into_phases_and_time_outside_the_batches(tmp_path: Path) -> None:
    """`bench`: each round's job is the named query's micro-batches inside that job's window; the medians over the
    rounds per phase, and a run's seconds outside its micro-batches (its total less their triggerExecution)."""
    _event_log(
        tmp_path,
        [
            _progress("plain_spark", 1, [100], addBatch=700, triggerExecution=900),
            _progress("raw_rides", 3, [100], addBatch=1500, triggerExecution=1800),
            _progress("plain_spark", 12, [100], addBatch=500, triggerExecution=600),
            _progress("raw_rides", 14, [60], addBatch=1000, triggerExecution=1100),
            _progress("raw_rides", 15, [40], latestOffset=100, addBatch=800, triggerExecution=1000),
        ],
    )
    reports = progress_reports(tmp_path)
    figures = SizeFigures(rides=100, limit_consume_records_per_s=1000.0)
    windows = {"plain_spark": [(0, 2), (11, 13)], "raw_rides": [(2, 4), (13, 16)]}
    figures.plain_spark_phases = [
        _job_phases(reports, "plain_spark", (START + a, START + b)) for a, b in windows["plain_spark"]
    ]
    figures.ours_phases = [_job_phases(reports, "raw_rides", (START + a, START + b)) for a, b in windows["raw_rides"]]
    figures.plain_spark_seconds, figures.ours_seconds, figures.ours_streaming_seconds = (
        [1.5, 1.0],
        [5.0, 4.1],
        [1.8, 2.1],
    )
    figures.ours_handler_ms = [{"checkpoint": 4, "registry": 30}, {"checkpoint": 6, "registry": 10}]
    figures.summarize()
    assert figures.ours_phases[1]["micro_batches"] == 2 and figures.ours_phases[1]["triggerExecution"] == 2.1
    assert figures.phase_medians["plain_spark"] == {
        "latestOffset": 0.0,
        "getBatch": 0.0,
        "queryPlanning": 0.0,
        "addBatch": 0.6,  # (0.7 + 0.5) / 2
        "walCommit": 0.0,
        "commitOffsets": 0.0,
        "triggerExecution": 0.75,
        "micro_batches": 1.0,
        "outside_batches": 0.5,  # 1.5 - 0.9 and 1.0 - 0.6
    }
    ours = figures.phase_medians["ours"]
    assert (ours["micro_batches"], ours["latestOffset"], ours["addBatch"]) == (1.5, 0.05, 1.65)
    assert ours["outside_batches"] == pytest.approx(2.6)  # 5.0 - 1.8 = 3.2 and 4.1 - 2.1 = 2.0
    assert figures.handler_ms_medians == {"checkpoint": 5.0, "registry": 20.0}
    # A stack without an event log: no phases.
    assert _job_phases([], "raw_rides", (START, START + 20)) == {}
