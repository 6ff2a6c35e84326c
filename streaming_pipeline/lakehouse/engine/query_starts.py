"""One streaming query start at a time on this machine (`one_query_start_at_a_time`).

Spark Connect starts a foreachBatch query's Python worker while it starts the query, and gives the worker a fixed
10 s to connect back (`PythonWorkerFactory`). The worker's imports take 1.4 s of CPU on an idle 2-core machine. When
two or three runs start queries within seconds of each other under load (a sensor run's bronze step, the pickups'
run, an automation run), their workers starve each other beside the busy engine and miss those 10 s together
(docs/performance.md). So every query start of the pipeline holds an exclusive file lock (`filelock`) while
`start()` runs: the processes of one machine start their queries one after another, a few seconds each. The
operating system frees the lock of a process that dies. A start waits for the lock at most
QUERY_START_LOCK_WAIT_SECONDS, then goes ahead without it, with a warning.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

if TYPE_CHECKING:
    from streaming_pipeline.lakehouse.engine.run_log import Log

QUERY_START_LOCK_WAIT_SECONDS = 60.0
# Waits shorter than this are not worth a line in the run's log.
REPORTED_WAIT_SECONDS = 1.0


def query_start_lock_path() -> Path:
    """The lock every query start of this user on this machine shares."""
    return Path(tempfile.gettempdir()) / f"streaming-pipeline-query-start-{os.getuid()}.lock"


@contextmanager
def one_query_start_at_a_time(
    query_name: str,
    log: Log,
    *,
    lock_path: Path | None = None,
    wait_seconds: float = QUERY_START_LOCK_WAIT_SECONDS,
) -> Iterator[None]:
    """Hold the machine's query-start lock for the body (a query's `start()`)."""
    lock = FileLock(lock_path or query_start_lock_path())
    waiting_since = time.monotonic()
    try:
        lock.acquire(timeout=wait_seconds)
        acquired = True
    except Timeout:
        acquired = False
    if not acquired:
        log.warning(
            f"{query_name}: another query's start held the lock {lock.lock_file} for {wait_seconds:g} s; "
            "starting without it"
        )
        yield
        return
    try:
        waited = time.monotonic() - waiting_since
        if waited >= REPORTED_WAIT_SECONDS:
            log.info(f"{query_name}: waited {waited:.1f} s for another query's start on this machine")
        yield
    finally:
        lock.release()
