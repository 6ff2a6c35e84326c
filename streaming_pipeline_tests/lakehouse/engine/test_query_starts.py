"""One query start at a time on a machine: a start waits while another process holds the lock, goes ahead without it
(with a warning) after its bound, and gets it at once when the holder died or its own start failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming_pipeline.lakehouse.engine.query_starts import one_query_start_at_a_time, query_start_lock_path

# Holds the lock at argv[1], says so on stdout, holds it for argv[2] seconds (or until killed), then prints the
# wall-clock time just before it releases the lock.
HOLDER = """
import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
print(time.time(), flush=True)
lock.release()
"""


class _Log:
    def __init__(self) -> None:
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, msg: str, /) -> None:
        self.infos.append(msg)

    def warning(self, msg: str, /) -> None:
        self.warnings.append(msg)


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    return tmp_path / "query-start.lock"


@pytest.fixture
def holder(lock_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process that holds the lock for 3 s; killed after the test."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_path), "3"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    yield process
    process.kill()
    process.wait(timeout=10)


def test_a_start_waits_while_another_process_holds_the_lock_and_says_how_long(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    log = _Log()
    started = time.monotonic()
    with one_query_start_at_a_time("raw_rides", log, lock_path=lock_path, wait_seconds=30):
        waited = time.monotonic() - started
        acquired_at = time.time()
    assert holder.stdout is not None
    about_to_release_at = float(holder.stdout.readline())
    assert acquired_at >= about_to_release_at  # the body ran only after the holder let go
    assert 1.0 <= waited < 30
    assert len(log.infos) == 1 and log.warnings == []
    assert log.infos[0].startswith("raw_rides: waited ") and log.infos[0].endswith(
        " s for another query's start on this machine"
    )


def test_a_start_goes_ahead_without_the_lock_after_its_bound_with_a_warning(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    log = _Log()
    with one_query_start_at_a_time("vendor_counts", log, lock_path=lock_path, wait_seconds=0.3):
        ran_at = time.time()
    assert holder.stdout is not None
    assert ran_at < float(holder.stdout.readline())  # the body ran while the other process still held the lock
    assert log.warnings == [
        f"vendor_counts: another query's start held the lock {lock_path} for 0.3 s; starting without it"
    ]


def test_the_lock_of_a_process_that_died_and_of_a_start_that_failed_is_free_at_once(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    log = _Log()
    with pytest.raises(RuntimeError, match="the start failed"):
        with one_query_start_at_a_time("raw_rides", log, lock_path=lock_path, wait_seconds=0.5):
            raise RuntimeError("the start failed")
    started = time.monotonic()
    with one_query_start_at_a_time("raw_rides", log, lock_path=lock_path, wait_seconds=0.5):
        assert time.monotonic() - started < 0.5
    assert log.infos == [] and log.warnings == []


def test_every_start_of_a_user_on_a_machine_shares_one_lock_file() -> None:
    assert query_start_lock_path() == Path(tempfile.gettempdir()) / f"streaming-pipeline-query-start-{os.getuid()}.lock"
