"""engine.continuous without an engine: queries that start when their sources exist, progress reported once,
restarts with back-off, schema-change restarts, the pause for `after_stop`, and stop."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from streaming_pipeline.lakehouse.engine.continuous import ContinuousQueries
from streaming_pipeline.lakehouse.engine.streams import StreamQuery, StreamRunReport
from streaming_pipeline.lakehouse.errors import BrokerUnavailableError, BronzeStateError, StreamingRunError


@dataclass
class FakeProgress:
    batchId: int  # noqa: N815 (pyspark's names)
    timestamp: str
    numInputRows: int  # noqa: N815
    ran_batch: bool = True

    @property
    def json(self) -> str:
        duration = {"triggerExecution": 5, **({"addBatch": 3} if self.ran_batch else {})}
        return json.dumps({"batchId": self.batchId, "timestamp": self.timestamp, "durationMs": duration})


@dataclass
class FakeQuery:
    id: str
    recentProgress: list[FakeProgress] = field(default_factory=list)  # noqa: N815
    active: bool = True
    error: str | None = None
    stops: int = 0
    status: dict[str, Any] = field(
        default_factory=lambda: {"message": "Initializing sources", "isDataAvailable": False, "isTriggerActive": True}
    )

    @property
    def lastProgress(self) -> FakeProgress | None:  # noqa: N802
        return self.recentProgress[-1] if self.recentProgress else None

    @property
    def isActive(self) -> bool:  # noqa: N802
        raise AssertionError("a poll asks the engine which queries are active, once for the set, not each query")

    def exception(self) -> Any:
        return Exception(self.error) if self.error else None

    def stop(self) -> None:
        self.stops += 1
        self.active = False

    def fail(self, error: str) -> None:
        self.active, self.error = False, error


class FakeWriter:
    """What `start_writer()` returns: records the trigger and starts a FakeQuery (or raises `start_error`)."""

    def __init__(self, engine: FakeEngine, name: str) -> None:
        self.engine, self.name = engine, name

    def queryName(self, name: str) -> FakeWriter:  # noqa: N802
        assert name == self.name
        return self

    def trigger(self, *, processingTime: str) -> FakeWriter:  # noqa: N803
        self.engine.triggers.append(processingTime)
        return self

    def start(self) -> FakeQuery:
        if isinstance(self.engine.start_error, Exception):
            raise self.engine.start_error
        if self.engine.start_error:
            raise RuntimeError(self.engine.start_error)
        query = FakeQuery(f"{self.name}-{len(self.engine.started)}")
        self.engine.started.append(query)
        return query


@dataclass
class FakeEngine:
    started: list[FakeQuery] = field(default_factory=list)
    triggers: list[str] = field(default_factory=list)
    start_error: str | Exception | None = None
    existing: set[str] = field(default_factory=set)
    now: float = 0.0
    after_stops: int = 0
    reports: list[StreamRunReport] = field(default_factory=list)
    active_calls: int = 0

    def active_ids(self) -> set[str]:
        """What the session's `spark.streams.active` answers: the ids of its active queries."""
        self.active_calls += 1
        return {query.id for query in self.started if query.active}

    def query(self, name: str, *, sources: tuple[str, ...] = (), pauses: bool = False) -> StreamQuery:
        return StreamQuery(
            name,
            lambda: FakeWriter(self, name),  # type: ignore[arg-type, return-value]
            tables=(name,),
            source_paths=sources,
            on_progress=self.reports.append,
            after_stop=self._after_stop if pauses else None,
        )

    def _after_stop(self) -> None:
        self.after_stops += 1


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, /) -> None:
        self.lines.append(msg)

    def warning(self, msg: str, /) -> None:
        self.lines.append(f"WARNING {msg}")


def _runner(engine: FakeEngine, *queries: StreamQuery, log: Log | None = None) -> ContinuousQueries:
    return ContinuousQueries(
        queries,
        trigger_interval="500 milliseconds",
        pause_every_seconds=60,
        log=log or Log(),
        active_ids=engine.active_ids,
        exists=lambda path: path in engine.existing,
        clock=lambda: engine.now,
        retry_backoff_seconds=5,
        max_backoff_seconds=20,
        max_failures=3,
        progress_every_seconds=0,  # progress read at every poll (the interval has a test of its own)
    )


def test_a_query_is_caught_up_while_it_waits_for_data_and_not_while_it_has_or_processes_any() -> None:
    engine = FakeEngine(existing={"/lake/bronze"})
    runner = _runner(engine, engine.query("bronze"), engine.query("gold", sources=("/lake/bronze",)))
    assert runner.caught_up() == set()  # not started yet
    runner.poll()
    bronze, gold = engine.started
    waiting = {"message": "Waiting for data to arrive", "isDataAvailable": False, "isTriggerActive": False}
    assert runner.caught_up() == set()  # both still in their first trigger
    bronze.status = dict(waiting)
    gold.status = {**waiting, "isDataAvailable": True}  # data found at its last trigger, its batch not done
    assert runner.caught_up() == {"bronze"}
    gold.status = dict(waiting)
    assert runner.caught_up() == {"bronze", "gold"}
    gold.fail("boom")
    runner.poll()  # failed: not running, so not caught up
    assert runner.caught_up() == {"bronze"}


def test_a_query_starts_once_its_sources_exist_and_each_micro_batch_is_reported_once() -> None:
    engine, log = FakeEngine(), Log()
    runner = _runner(engine, engine.query("bronze"), engine.query("gold", sources=("/lake/bronze",)), log=log)
    runner.poll()
    assert runner.running() == ["bronze"] and engine.triggers == ["500 milliseconds"]
    assert "gold: waiting for /lake/bronze to exist" in log.lines
    runner.poll()
    assert log.lines.count("gold: waiting for /lake/bronze to exist") == 1  # said once, not at every poll
    engine.existing.add("/lake/bronze")
    runner.poll()
    assert runner.running() == ["bronze", "gold"]

    bronze = engine.started[0]
    bronze.recentProgress = [FakeProgress(0, "t0", 10), FakeProgress(1, "t1", 0, ran_batch=False)]
    runner.poll()
    # An idle query reports under the id of its next batch; that batch, when it runs, is a new progress.
    bronze.recentProgress.append(FakeProgress(1, "t2", 7))
    runner.poll()
    runner.poll()
    reports = runner.take_reports()
    assert (reports["bronze"].batches, reports["bronze"].input_rows) == (2, 17)
    assert (reports["gold"].batches, reports["gold"].input_rows) == (0, 0)
    assert [(r.query_name, r.input_rows) for r in engine.reports] == [("bronze", 17)]  # on_progress, with news only
    runner.poll()
    assert runner.take_reports()["bronze"].batches == 0  # nothing twice


class CountedReads(list[FakeProgress]):
    """A progress list that counts how often it was read whole."""

    reads = 0

    def __iter__(self) -> Iterator[FakeProgress]:
        self.reads += 1
        return super().__iter__()


def test_a_poll_asks_the_engine_once_which_queries_are_active_and_restarts_the_one_that_is_not() -> None:
    engine = FakeEngine(existing={"/lake/bronze"})
    runner = _runner(
        engine, engine.query("bronze"), engine.query("silver"), engine.query("gold", sources=("/lake/silver",))
    )
    runner.poll()  # nothing started yet: nothing to ask
    assert engine.active_calls == 0 and runner.running() == ["bronze", "silver"]
    runner.poll()
    runner.poll()
    assert engine.active_calls == 2  # one call per poll for the whole set
    engine.started[1].fail("boom")
    runner.poll()
    assert engine.active_calls == 3 and runner.running() == ["bronze"]
    engine.now = 5.0
    runner.poll()  # after its back-off
    assert runner.running() == ["bronze", "silver"] and engine.started[2].id == "silver-2"
    assert engine.active_calls == 4


def test_the_whole_progress_list_is_read_only_when_the_last_progress_is_new() -> None:
    engine = FakeEngine()
    runner = _runner(engine, engine.query("bronze"))
    runner.poll()
    bronze = engine.started[0]
    progress = CountedReads([FakeProgress(0, "t0", 10), FakeProgress(1, "t1", 4)])
    bronze.recentProgress = progress
    runner.poll()
    assert progress.reads == 1
    runner.poll()
    runner.poll()
    assert progress.reads == 1  # the last progress was seen: nothing new, the list is not fetched
    progress.append(FakeProgress(2, "t2", 3))
    runner.poll()
    assert progress.reads == 2
    report = runner.take_reports()["bronze"]
    assert (report.batches, report.input_rows) == (3, 17)


def test_a_failed_query_is_restarted_after_a_back_off_and_too_many_failures_in_a_row_fail_the_set() -> None:
    engine, log = FakeEngine(), Log()
    runner = _runner(engine, engine.query("bronze"), engine.query("gold"), log=log)
    runner.poll()
    engine.started[0].fail("org.apache.kafka.common.errors.TimeoutException: broker away")
    runner.poll()
    assert runner.running() == ["gold"]
    assert any("bronze: failed (1 in a row), restarting in 5 s" in line for line in log.lines)
    engine.now = 4.9
    runner.poll()
    assert runner.running() == ["gold"]
    engine.now = 5.0
    runner.poll()
    assert runner.running() == ["bronze", "gold"] and len(engine.started) == 3

    engine.started[-1].fail("TimeoutException: still away")
    runner.poll()
    assert any("bronze: failed (2 in a row), restarting in 10 s" in line for line in log.lines)
    engine.now = 15.0
    runner.poll()
    engine.started[-1].fail("TimeoutException: away for good")
    with pytest.raises(StreamingRunError, match=r"'bronze' failed 3 times in a row.*away for good"):
        runner.poll()
    gold = engine.started[1]
    assert gold.stops == 1 and runner.running() == []  # the others were stopped


def test_progress_resets_the_failures_and_a_schema_change_restarts_at_once() -> None:
    engine = FakeEngine()
    runner = _runner(engine, engine.query("silver"))
    runner.poll()
    engine.started[0].fail("boom")
    runner.poll()
    engine.now = 5.0
    runner.poll()
    engine.started[-1].recentProgress = [FakeProgress(3, "t3", 4)]
    runner.poll()
    engine.started[-1].fail("[DELTA_SCHEMA_CHANGED] Detected schema change in the source")
    runner.poll()
    assert runner.running() == []
    runner.poll()  # no back-off for a schema change
    assert runner.running() == ["silver"] and len(engine.started) == 3
    engine.started[-1].fail("boom again")
    runner.poll()
    assert runner.running() == [] and engine.now == 5.0
    engine.now = 10.0  # 5 s: the first failure in a row again, since the query made progress in between
    runner.poll()
    assert runner.running() == ["silver"]


def test_a_failed_start_counts_as_a_failure() -> None:
    engine, log = FakeEngine(start_error="AnalysisException: path does not exist"), Log()
    runner = _runner(engine, engine.query("bronze"), log=log)
    runner.poll()
    assert runner.running() == []
    assert any("bronze: failed (1 in a row)" in line and "path does not exist" in line for line in log.lines)


def test_a_start_that_finds_the_broker_away_is_retried_after_a_back_off_until_the_broker_is_back() -> None:
    engine, log = FakeEngine(), Log()
    engine.start_error = BrokerUnavailableError("Kafka at 127.0.0.1:9092 did not answer within 10 s")
    runner = _runner(engine, engine.query("bronze"), log=log)
    runner.poll()  # the start fails (the set does not): tried again 5 s from now
    engine.now = 4.0
    runner.poll()
    assert runner.running() == [] and engine.started == []
    engine.now = 5.0
    runner.poll()  # still away: 10 s from now
    engine.start_error = None
    engine.now = 14.0
    runner.poll()
    assert runner.running() == []
    engine.now = 15.0
    runner.poll()
    assert runner.running() == ["bronze"] and len(engine.started) == 1
    assert [line for line in log.lines if line.startswith("WARNING")] == [
        "WARNING bronze: failed (1 in a row), restarting in 5 s: Kafka at 127.0.0.1:9092 did not answer within 10 s",
        "WARNING bronze: failed (2 in a row), restarting in 10 s: Kafka at 127.0.0.1:9092 did not answer within 10 s",
    ]


def test_a_bronze_table_that_disagrees_with_its_checkpoint_fails_the_set_at_once() -> None:
    engine = FakeEngine()
    runner = _runner(engine, engine.query("gold"), engine.query("bronze"))
    runner.poll()
    assert runner.running() == ["gold", "bronze"]
    engine.started[1].fail("stopped")
    runner.poll()  # a failure like any other: restarted 5 s from now
    engine.start_error = BronzeStateError("raw_rides: the checkpoint was reset; run `streaming-pipeline replay`")
    engine.now = 5.0
    with pytest.raises(BronzeStateError, match="streaming-pipeline replay"):
        runner.poll()  # no more back-off and no ten tries: a replay, not time, makes them agree
    assert engine.started[0].stops == 1 and runner.running() == []


def test_a_query_with_after_stop_is_paused_for_it_only_when_due_and_after_progress() -> None:
    engine = FakeEngine()
    runner = _runner(engine, engine.query("windows", pauses=True))
    runner.poll()
    engine.now = 100.0
    runner.poll()
    assert engine.after_stops == 0  # due, but no micro-batch since it started
    engine.started[0].recentProgress = [FakeProgress(0, "t0", 5)]
    runner.poll()
    assert engine.after_stops == 1 and engine.started[0].stops == 1
    assert runner.running() == ["windows"] and len(engine.started) == 2  # started again at once
    assert runner.take_reports()["windows"].input_rows == 5  # what it did before the pause is kept
    engine.started[1].recentProgress = [FakeProgress(1, "t1", 2)]
    engine.now = 130.0
    runner.poll()
    assert engine.after_stops == 1  # 30 s after the previous pause: not due yet
    engine.now = 160.0
    runner.poll()
    assert engine.after_stops == 2


def test_stop_stops_every_started_query_and_ends_the_set() -> None:
    engine = FakeEngine()
    runner = _runner(engine, engine.query("a"), engine.query("b", sources=("/missing",)))
    runner.poll()
    runner.stop()
    assert [q.stops for q in engine.started] == [1]
    with pytest.raises(StreamingRunError, match="stopped"):
        runner.poll()


def test_a_poll_reads_progress_only_every_progress_interval_and_a_report_always_has_the_latest() -> None:
    engine = FakeEngine()
    runner = ContinuousQueries(
        [engine.query("bronze"), engine.query("gold")],
        trigger_interval="500 milliseconds",
        pause_every_seconds=60,
        log=Log(),
        active_ids=engine.active_ids,
        clock=lambda: engine.now,
        progress_every_seconds=10,
    )
    runner.poll()
    bronze, gold = engine.started
    bronze.recentProgress = progress = CountedReads([FakeProgress(0, "t0", 10)])
    engine.now = 5.0
    runner.poll()
    assert progress.reads == 0  # only which queries are active was asked
    engine.now = 10.0
    runner.poll()
    assert progress.reads == 1
    progress.append(FakeProgress(1, "t1", 4))
    engine.now = 12.0
    runner.poll()
    assert progress.reads == 1
    assert runner.take_reports()["bronze"].input_rows == 14  # read when reported, not 8 s later
    gold.recentProgress = [FakeProgress(0, "t0", 3)]
    gold.fail("boom")
    runner.poll()  # failed between two reads of its progress: what it did is kept
    assert runner.running() == ["bronze"] and runner.take_reports()["gold"].input_rows == 3


def test_a_session_that_is_gone_fails_the_set_at_once_instead_of_retrying() -> None:
    engine, log = FakeEngine(), Log()
    runner = _runner(engine, engine.query("bronze"), engine.query("gold"), log=log)
    runner.poll()
    engine.started[0].fail("stopped")  # the engine died: the query is no longer active
    runner.poll()
    engine.now = 5.0
    engine.start_error = "[NO_ACTIVE_SESSION] No active Spark session found."
    with pytest.raises(StreamingRunError, match=r"'bronze' cannot start again: its Spark Connect session is gone"):
        runner.poll()  # its restart finds no session: no back-off, no ten tries
    assert engine.started[1].stops == 1 and runner.running() == []
