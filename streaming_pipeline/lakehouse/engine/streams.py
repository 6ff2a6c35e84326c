"""The pipeline's streaming queries as values (`StreamQuery`), run once with trigger(availableNow=True) and logged
(`run_available_now`, the triggered mode) or kept running by `engine.continuous`; a Delta table read as a stream."""

from __future__ import annotations

import json
import logging
import posixpath
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from streaming_pipeline.lakehouse.engine.interrupts import interrupts_held
from streaming_pipeline.lakehouse.engine.object_store import bucket_and_key, is_object_store, s3_filesystem
from streaming_pipeline.lakehouse.engine.query_starts import one_query_start_at_a_time
from streaming_pipeline.lakehouse.engine.run_log import (
    Log as Log,  # re-exported: the streams' modules import it from here
)
from streaming_pipeline.lakehouse.errors import StreamingRunError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streaming_pipeline.lakehouse.connections import Lakehouse

_LOG = logging.getLogger(__name__)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_epoch_micros(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def delta_stream(spark: SparkSession, lakehouse: Lakehouse, table: str) -> DataFrame:
    """The lakehouse table `table` as a streaming source, at most `max_files_per_trigger` files per micro-batch."""
    return (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", lakehouse.max_files_per_trigger)
        .load(lakehouse.table_path(table))
    )


@dataclass(frozen=True)
class StreamQuery:
    """One streaming query of the pipeline, ready to start with any trigger.

    `name` is Spark's queryName (and names the checkpoint's Dagster pool); `start_writer` builds the writer (source,
    transformation, sink and checkpoint) afresh for each start; `tables` are the Delta tables it writes;
    `source_paths` are the Delta tables it reads, which must exist before it can start. Kept running
    (`engine.continuous`), the query calls `on_progress` with what its micro-batches reported since the previous
    call, and is stopped now and then for `after_stop`: work that needs the query at rest (`run_once`, a triggered
    run, calls both at the end of the run)."""

    name: str
    start_writer: Callable[[], DataStreamWriter]
    tables: tuple[str, ...]
    source_paths: tuple[str, ...] = ()
    on_progress: Callable[[StreamRunReport], object] | None = None
    after_stop: Callable[[], object] | None = None


# Delta asks to restart a stream whose source table changed schema (e.g. a v2 column was added).
RESTART_MARKERS = ("DELTA_SCHEMA_CHANGED", "Detected schema change", "DELTA_STREAMING_METADATA_EVOLUTION")
MAX_SCHEMA_RESTARTS = 3
# Spark gives the Python process of a foreachBatch handler a fixed 10 s to connect back to the engine when its query
# starts (`PythonWorkerFactory`); on a busy machine it can miss that, and the query does not start. Nothing was
# read or written, so the start is tried again, at most MAX_WORKER_START_RETRIES times, after a pause: the worker
# that missed goes on importing and trying for up to 15 s more (pyspark's SPARK_AUTH_SOCKET_TIMEOUT), and a new one
# started beside it at once would make the busy machine busier. Cheaper than failing the step: a new run's process
# costs more than a new worker.
WORKER_START_MARKERS = ("Python worker failed to connect back", "waiting for the Python worker to connect back")
MAX_WORKER_START_RETRIES = 2
WORKER_START_RETRY_SECONDS = 10.0
# Spark 4 refuses to start a query at batch 0 while its checkpoint's offsets log holds any file, even the empty
# temporary file (`.0.<uuid>.tmp`) that a process killed while writing batch 0's offsets leaves before its rename.
# Spark never reads such a file; once it is removed, the query starts at batch 0 as it should.
UNFINISHED_WRITE_MARKER = "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"
_NOT_EMPTY_LOCATION = re.compile(r"checkpoint location (\S+) should be empty on batch 0")
_UNFINISHED_WRITE = re.compile(r"\.{1,2}\d+\.[0-9a-f-]+\.tmp(\.crc)?")


def remove_unfinished_log_writes(message: str) -> list[str]:
    """When `message` is Spark's refusal to start a query at batch 0 because its checkpoint's offsets log (on the
    local file system or an object store) is not empty, and that log holds nothing but the temporary files of a
    killed write, remove them and return their locations; else remove nothing and return []."""
    if UNFINISHED_WRITE_MARKER not in message:
        return []
    match = _NOT_EMPTY_LOCATION.search(message)
    if match is None:
        return []
    location = match.group(1).rstrip("/")
    reached = _log_file_system(location)
    if reached is None:
        return []
    file_system, log_dir = reached
    try:
        names = sorted(posixpath.basename(path) for path in file_system.ls(log_dir, detail=False))
    except FileNotFoundError:
        return []
    if not names or not all(_UNFINISHED_WRITE.fullmatch(name) for name in names):
        return []
    for name in names:
        file_system.rm_file(f"{log_dir}/{name}")
    return [f"{location}/{name}" for name in names]


def _log_file_system(location: str) -> tuple[Any, str] | None:
    """fsspec's file system of a checkpoint log at `location` (`file:` or an object store's URI) and the log's path
    in it; None for another scheme."""
    if urlparse(location).scheme == "file":
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem(), urlparse(location).path
    if is_object_store(location):
        bucket, key = bucket_and_key(location)
        return s3_filesystem(), f"{bucket}/{key}"
    return None


@dataclass
class StreamRunReport:
    """What one availableNow run did, from Spark's progress reports."""

    query_name: str
    batches: int = 0
    input_rows: int = 0
    progresses: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    start_seconds: float = 0.0  # in the query's start() calls: planning, and a foreachBatch query's Python worker

    def add(self, progress: dict[str, Any]) -> None:
        progress["observedMetrics"] = {
            name: _named_metrics(row) for name, row in (progress.get("observedMetrics") or {}).items()
        }
        self.progresses.append(progress)
        self.input_rows += int(progress.get("numInputRows") or 0)
        self.batches += 1

    def source_offsets(self) -> list[dict[str, Any]]:
        """Per source: description, start offset of the first batch, end offset of the last batch."""
        if not self.progresses:
            return []
        first, last = self.progresses[0], self.progresses[-1]
        offsets = []
        for start_source, end_source in zip(first.get("sources", []), last.get("sources", []), strict=False):
            offsets.append(
                {
                    "description": end_source.get("description"),
                    "start": _as_json(start_source.get("startOffset")),
                    "end": _as_json(end_source.get("endOffset")),
                }
            )
        return offsets

    def trigger_seconds(self) -> float:
        """Time Spark spent executing micro-batches (the rest of a run is overhead)."""
        return sum(float(p.get("durationMs", {}).get("triggerExecution", 0)) for p in self.progresses) / 1000

    def observed_metrics(self, name: str) -> dict[str, int]:
        """The sums over this run's micro-batches of the metrics `DataFrame.observe(name, ...)` reported."""
        totals: dict[str, int] = {}
        for progress in self.progresses:
            for key, value in (progress.get("observedMetrics") or {}).get(name, {}).items():
                totals[key] = totals.get(key, 0) + int(value or 0)
        return totals

    def rows_dropped_by_watermark(self) -> int:
        return sum(
            int(op.get("numRowsDroppedByWatermark") or 0)
            for progress in self.progresses
            for op in progress.get("stateOperators", [])
        )


def _as_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def run_available_now(
    query_name: str,
    start_writer: Callable[[], DataStreamWriter],
    *,
    log: Log | None = None,
    poll_seconds: float = 2.0,
    sleep: Callable[[float], object] = time.sleep,
) -> StreamRunReport:
    """Start the query built by `start_writer()` with availableNow, wait until it has drained, report.

    A Delta source whose schema changed makes Spark stop and ask for a restart: the query is started again (the
    checkpoint resumes where it stopped), at most MAX_SCHEMA_RESTARTS times. A checkpoint that a killed run left
    with an unfinished write of batch 0's offsets is cleared of it, and the query started again, once. A start whose
    foreachBatch worker did not connect back in time is tried again, at most MAX_WORKER_START_RETRIES times. Each
    start holds the machine's query-start lock (`engine.query_starts`).
    """
    # Imported here, not at the top: the assets import this module, and the sensors and checks load without Spark's
    # client (streaming_pipeline_tests/test_import_weight.py).
    from pyspark.errors import StreamingQueryException

    log = log or _LOG
    report = StreamRunReport(query_name=query_name)
    worker_retries = 0
    removed_unfinished_write = False
    while True:
        try:
            writer = start_writer().queryName(query_name).trigger(availableNow=True)
            with one_query_start_at_a_time(query_name, log):
                starting = time.monotonic()
                try:
                    query = writer.start()
                finally:
                    report.start_seconds += time.monotonic() - starting
        except Exception as exc:
            if not is_worker_start_timeout(str(exc)) or worker_retries >= MAX_WORKER_START_RETRIES:
                raise
            worker_retries += 1
            log.warning(
                f"{query_name}: the query's Python worker did not connect back to the engine within Spark's 10 s "
                f"(a busy machine); starting it again in {WORKER_START_RETRY_SECONDS:.0f} s "
                f"({worker_retries} of {MAX_WORKER_START_RETRIES})"
            )
            sleep(WORKER_START_RETRY_SECONDS)
            continue
        seen: set[int] = set()
        try:
            while True:
                with interrupts_held():  # a termination lands between two calls to the engine, never inside one
                    # pyspark annotates timeout as int, but takes seconds as int or float (int(timeout * 1000))
                    finished = query.awaitTermination(poll_seconds)  # type: ignore[arg-type]
                    _collect(query, report, seen, log)
                if finished:
                    return report
        except StreamingQueryException as exc:
            with interrupts_held():
                _collect(query, report, seen, log)
            message = str(exc)
            if any(marker in message for marker in RESTART_MARKERS) and report.restarts < MAX_SCHEMA_RESTARTS:
                report.restarts += 1
                log.info(f"{query_name}: source schema changed, restarting the query ({report.restarts})")
                continue
            removed = [] if removed_unfinished_write else remove_unfinished_log_writes(message)
            if removed:
                removed_unfinished_write = True
                log.warning(
                    f"{query_name}: removed the unfinished write of a killed run ({', '.join(removed)}); "
                    "starting the query again at batch 0"
                )
                continue
            raise StreamingRunError(f"streaming query {query_name!r} failed: {root_cause(message)}") from exc
        finally:
            with interrupts_held():
                if query.isActive:
                    query.stop()


@dataclass
class QueryRun:
    """What one availableNow run of a StreamQuery did: its report, and what its hooks returned."""

    report: StreamRunReport
    progress: Any = None  # what `on_progress` returned for the run's micro-batches
    after_stop: Any = None  # what `after_stop` returned


def run_once(query: StreamQuery, *, log: Log | None = None) -> QueryRun:
    """One availableNow run of `query`, as a triggered run does it: the run, then its `on_progress` with every
    micro-batch of the run, then its `after_stop` (the query is at rest once the run has drained).

    Args:
        query: The query, as the step's query factory built it.
        log: Where to report the micro-batches (the streams' logger when None).

    Returns:
        The run's report and what its hooks returned.
    """
    report = run_available_now(query.name, query.start_writer, log=log)
    progress = query.on_progress(report) if query.on_progress is not None else None
    after_stop = query.after_stop() if query.after_stop is not None else None
    return QueryRun(report, progress, after_stop)


def is_worker_start_timeout(message: str) -> bool:
    """True for Spark's error when a new Python worker did not connect back to the engine in time."""
    return any(marker in message for marker in WORKER_START_MARKERS)


def _named_metrics(row: Any) -> dict[str, Any]:
    """{metric: value} of one observation: a plain object in-process, {values, schema} over Spark Connect."""
    if isinstance(row, dict) and set(row) == {"values", "schema"}:
        names = [field["name"] for field in row["schema"]["fields"]]
        return dict(zip(names, row["values"], strict=True))
    return dict(row)


_EXCEPTION_LINE = re.compile(r"^\s*([\w.]*(?:Error|Exception)): (.+)$")


def root_cause(message: str) -> str:
    """The most telling line of a Spark streaming failure.

    An error raised in a foreachBatch handler reaches us wrapped in Spark's STREAM_FAILED text, with
    the Python traceback inside; prefer this project's own exception line, then the last exception
    line of the traceback, then Spark's first line.
    """
    lines = message.splitlines()
    found = [m.group(1).rsplit(".", 1)[-1] + ": " + m.group(2) for line in lines if (m := _EXCEPTION_LINE.match(line))]
    ours = [line for line in lines if "streaming_pipeline.lakehouse.errors." in line and _EXCEPTION_LINE.match(line)]
    if ours:
        match = _EXCEPTION_LINE.match(ours[-1])
        assert match is not None
        return f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)}"
    return found[-1] if found else (lines[0] if lines else "unknown error")


def _collect(query: Any, report: StreamRunReport, seen: set[int], log: Log) -> None:
    for progress in query.recentProgress:
        data = json.loads(progress.json)
        # Over Spark Connect the JSON lacks the derived figures; the progress object has them.
        data["numInputRows"] = int(progress.numInputRows or 0)
        data["processedRowsPerSecond"] = float(progress.processedRowsPerSecond or 0.0)

        batch_id = int(data.get("batchId", -1))
        if batch_id in seen:
            continue
        seen.add(batch_id)
        if int(data.get("numInputRows") or 0) == 0 and not data.get("stateOperators"):
            continue
        report.add(data)
        rate = data.get("processedRowsPerSecond") or 0
        log.info(
            f"{report.query_name}: micro-batch {batch_id}: {data.get('numInputRows', 0)} rows "
            f"({float(rate):,.0f} rows/s)"
        )
