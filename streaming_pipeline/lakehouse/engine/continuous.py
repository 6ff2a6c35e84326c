"""The continuous mode's engine: keep a set of streaming queries running with a processing-time trigger.

`ContinuousQueries` starts each query once the Delta tables it reads exist, gathers its progress, restarts it
after a failure (at once when a source table's schema changed, else after a back-off that doubles up to a
minute; a start that fails, the broker away say, is a failure too; the whole set fails at once when the session
is gone or a bronze table disagrees with its checkpoint), stops it now and then for the work that needs it
at rest (`StreamQuery.after_stop`), and stops every query when asked. The queries are the same as those of an
availableNow run, with the same checkpoints and handlers, so a table written by either mode is exactly once.

It never sleeps and owns no thread: its owner calls `poll()` every second or two and `take_reports()` when it
wants to say what happened. A poll asks the engine once which queries are active (`active_ids`, the session's
`spark.streams.active`: one call for the set, where each query's `isActive` is a call of its own); the progress is
read every `progress_every_seconds` (and before a query stops, fails or is reported) from its `recentProgress`,
where Spark keeps the last 100 micro-batches. Each question is a call to the engine, and an idle pipeline should
cost next to nothing. Nothing here imports Dagster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streaming_pipeline.lakehouse.engine.delta_tables import table_exists
from streaming_pipeline.lakehouse.engine.query_starts import one_query_start_at_a_time
from streaming_pipeline.lakehouse.engine.streams import (
    MAX_SCHEMA_RESTARTS,
    RESTART_MARKERS,
    Log,
    StreamQuery,
    StreamRunReport,
    remove_unfinished_log_writes,
    root_cause,
)
from streaming_pipeline.lakehouse.errors import BronzeStateError, CredentialsError, StreamingRunError

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

RETRY_BACKOFF_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 60.0
#: Consecutive failures of one query (schema restarts aside) after which the whole set fails: the run fails, and
#: whoever keeps the run alive starts it again (a broker away for a minute costs a few failures, not ten).
MAX_CONSECUTIVE_FAILURES = 10
#: What Spark Connect says when the session the queries run in is gone (the server died or restarted, or expired
#: the session): no query can start in it again, so the whole set fails at once, and whoever keeps the run alive
#: starts it again with a new session. Retried instead, each query would fail MAX_CONSECUTIVE_FAILURES times, with
#: back-off, minutes of a run that can do nothing.
SESSION_GONE_MARKERS = ("NO_ACTIVE_SESSION", "INVALID_HANDLE.SESSION_CLOSED", "INVALID_HANDLE.SESSION_CHANGED")
#: How often a poll reads the queries' progress: well within the 100 micro-batches Spark keeps (50 s at 500 ms).
PROGRESS_EVERY_SECONDS = 10.0


@dataclass
class _Running:
    """One query of the set: where it stands and what it reported since the last `take_reports`."""

    spec: StreamQuery
    query: StreamingQuery | None = None
    seen: set[str] = field(default_factory=set)
    report: StreamRunReport | None = None
    failures: int = 0
    schema_restarts: int = 0
    retry_at: float = 0.0
    paused_at: float = 0.0
    batches_since_pause: int = 0
    waiting_logged: bool = False
    held: bool = False

    def __post_init__(self) -> None:
        self.report = StreamRunReport(self.spec.name)


class ContinuousQueries:
    """Keeps `queries` running with `trigger(processingTime=trigger_interval)` (or the query's own interval in
    `intervals`) until `stop()`. `active_ids` answers which queries of the session are active, by query id, in one
    call to the engine.

    A query with an `after_stop` is stopped for it at most every `pause_every_seconds`, and only when it has
    processed a micro-batch since. A query that failed `max_failures` times in a row raises StreamingRunError from
    `poll()`, after every query was stopped.
    """

    def __init__(
        self,
        queries: Sequence[StreamQuery],
        *,
        trigger_interval: str,
        pause_every_seconds: float,
        log: Log,
        active_ids: Callable[[], set[str]],
        intervals: dict[str, str] | None = None,
        exists: Callable[[str], bool] = table_exists,
        clock: Callable[[], float] = time.monotonic,
        retry_backoff_seconds: float = RETRY_BACKOFF_SECONDS,
        max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
        max_failures: int = MAX_CONSECUTIVE_FAILURES,
        progress_every_seconds: float = PROGRESS_EVERY_SECONDS,
    ) -> None:
        self._queries = [_Running(q) for q in queries]
        self._active_ids = active_ids
        self._trigger_interval = trigger_interval
        self._intervals = intervals or {}
        self._pause_every = pause_every_seconds
        self._log = log
        self._exists = exists
        self._clock = clock
        self._backoff = (retry_backoff_seconds, max_backoff_seconds)
        self._max_failures = max_failures
        self._progress_every = progress_every_seconds
        self._next_progress = 0.0
        self._stopped = False

    @property
    def names(self) -> list[str]:
        return [r.spec.name for r in self._queries]

    def running(self) -> list[str]:
        """The queries started and not failed."""
        return [r.spec.name for r in self._queries if r.query is not None]

    def poll(self) -> None:
        """Start what can start, gather progress, restart what failed, pause what is due for its `after_stop`."""
        if self._stopped:
            raise StreamingRunError("the continuous queries were stopped")
        progress_due = self._clock() >= self._next_progress
        if progress_due:
            self._next_progress = self._clock() + self._progress_every
        active = self._active_ids() if any(r.query is not None for r in self._queries) else set()
        for running in self._queries:
            if running.held:
                continue
            if running.query is None:
                self._start_when_ready(running)
            elif str(running.query.id) not in active:
                self._collect(running)  # what it did before it failed
                self._failed(running)
            else:
                if progress_due:
                    self._collect(running)
                if self._pause_due(running):
                    self._pause(running)

    def caught_up(self) -> set[str]:
        """The queries running and waiting for data: none available at their last trigger, and none being processed.
        (A query held, failed or waiting for its sources is not caught up.)"""
        caught_up = set()
        for running in self._queries:
            if running.query is None:
                continue
            try:
                status = running.query.status
            except Exception:  # the engine is away: the next poll() restarts what failed
                continue
            if not status.get("isDataAvailable", True) and not status.get("isTriggerActive", True):
                caught_up.add(running.spec.name)
        return caught_up

    def take_reports(self) -> dict[str, StreamRunReport]:
        """Per query, what its micro-batches reported since the previous call; its `on_progress` is called first."""
        reports = {}
        for running in self._queries:
            if running.query is not None:
                self._collect(running)
            report = running.report
            assert report is not None
            running.report = StreamRunReport(running.spec.name)
            if report.batches and running.spec.on_progress is not None:
                running.spec.on_progress(report)
            reports[running.spec.name] = report
        return reports

    def hold(self, name: str) -> None:
        """Stop query `name` and keep it stopped until `resume(name)` (its checkpoint is lent to someone else)."""
        running = self._by_name(name)
        running.held = True
        if running.query is not None:
            self._collect(running)
            running.query.stop()
            running.query = None

    def resume(self, name: str) -> None:
        """Let query `name` start again at the next `poll()`."""
        running = self._by_name(name)
        running.held = False

    def _by_name(self, name: str) -> _Running:
        for running in self._queries:
            if running.spec.name == name:
                return running
        raise KeyError(name)

    def stop(self) -> None:
        """Stop every query (each finishes or abandons its current micro-batch; its checkpoint says which)."""
        self._stopped = True
        errors = []
        for running in self._queries:
            if running.query is None:
                continue
            try:
                self._collect(running)
                running.query.stop()
            except Exception as exc:  # the engine may be gone: stop the others all the same
                errors.append(f"{running.spec.name}: {exc}")
            running.query = None
        if errors:
            self._log.warning(f"stopping the continuous queries: {'; '.join(errors)}")

    # ---------------------------------------------------------------------------------------------- internals

    def _start_when_ready(self, running: _Running) -> None:
        now = self._clock()
        if now < running.retry_at:
            return
        missing = [p for p in running.spec.source_paths if not self._exists(p)]
        if missing:
            if not running.waiting_logged:
                self._log.info(f"{running.spec.name}: waiting for {', '.join(missing)} to exist")
                running.waiting_logged = True
            return
        try:
            running.query = self._start(running.spec)
        except (BronzeStateError, CredentialsError):
            # A bronze table, its checkpoint and its topic disagree, or Kafka refuses the client's credentials:
            # waiting does not mend either (a replay does, or new settings), so the set fails at once with the
            # error that says so.
            self.stop()
            raise
        except Exception as exc:
            self._count_failure(running, root_cause(str(exc)))
            return
        running.seen.clear()
        running.paused_at = now
        running.batches_since_pause = 0
        self._log.info(
            f"{running.spec.name}: streaming (trigger every {self._interval(running.spec)}, query id "
            f"{running.query.id})"
        )

    def _interval(self, spec: StreamQuery) -> str:
        return self._intervals.get(spec.name, self._trigger_interval)

    def _start(self, spec: StreamQuery) -> StreamingQuery:
        writer = spec.start_writer().queryName(spec.name).trigger(processingTime=self._interval(spec))
        with one_query_start_at_a_time(spec.name, self._log):
            return writer.start()

    def _collect(self, running: _Running) -> None:
        assert running.query is not None and running.report is not None
        # The last progress first (one small answer): only when it is new is the whole list read (up to 100
        # progress objects, which an idle set polled every second would otherwise fetch and parse for nothing).
        last = running.query.lastProgress
        if last is None or f"{last.batchId}@{last.timestamp}" in running.seen:
            return
        for progress in running.query.recentProgress:
            # An idle query reports every 10 s under the id of its next micro-batch: the timestamp tells them apart,
            # and only a progress that ran a micro-batch (it has addBatch) is one.
            key = f"{progress.batchId}@{progress.timestamp}"
            if key in running.seen:
                continue
            running.seen.add(key)
            data = json.loads(progress.json)
            if "addBatch" not in (data.get("durationMs") or {}):
                continue
            data["numInputRows"] = rows = int(progress.numInputRows or 0)
            running.report.add(data)
            if rows:
                running.batches_since_pause += 1
                # A query that processes rows is healthy again: its failures no longer count as a row.
                running.failures = running.schema_restarts = 0
        if len(running.seen) > 1000:  # Spark keeps the last 100: what is older will not come back
            running.seen = {key for key in running.seen if key in self._recent_keys(running)}

    @staticmethod
    def _recent_keys(running: _Running) -> set[str]:
        assert running.query is not None
        return {f"{p.batchId}@{p.timestamp}" for p in running.query.recentProgress}

    def _failed(self, running: _Running) -> None:
        assert running.query is not None
        exception = running.query.exception()
        running.query = None
        message = str(exception) if exception is not None else "stopped without an error"
        if any(marker in message for marker in RESTART_MARKERS) and running.schema_restarts < MAX_SCHEMA_RESTARTS:
            running.schema_restarts += 1
            self._log.info(f"{running.spec.name}: a source table's schema changed, restarting the query")
            return
        removed = remove_unfinished_log_writes(message)
        if removed:
            self._log.warning(
                f"{running.spec.name}: removed the unfinished write of a killed run ({', '.join(removed)}); "
                "restarting the query at batch 0"
            )
            return
        self._count_failure(running, root_cause(message))

    def _count_failure(self, running: _Running, cause: str) -> None:
        if any(marker in cause for marker in SESSION_GONE_MARKERS):
            self.stop()
            raise StreamingRunError(
                f"streaming query {running.spec.name!r} cannot start again: its Spark Connect session is gone (the "
                f"engine restarted?); the last error: {cause}"
            )
        running.failures += 1
        if running.failures >= self._max_failures:
            self.stop()
            raise StreamingRunError(
                f"streaming query {running.spec.name!r} failed {running.failures} times in a row; the last time: "
                f"{cause}"
            )
        base, most = self._backoff
        delay = min(base * 2 ** (running.failures - 1), most)
        running.retry_at = self._clock() + delay
        self._log.warning(
            f"{running.spec.name}: failed ({running.failures} in a row), restarting in {delay:.0f} s: {cause}"
        )

    def _pause_due(self, running: _Running) -> bool:
        return (
            running.spec.after_stop is not None
            and running.batches_since_pause > 0
            and self._clock() - running.paused_at >= self._pause_every
        )

    def _pause(self, running: _Running) -> None:
        assert running.query is not None and running.spec.after_stop is not None
        running.query.stop()
        self._collect(running)
        running.query = None
        running.spec.after_stop()
        self._start_when_ready(running)
