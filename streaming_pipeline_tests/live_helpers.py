"""Helpers of the tests that run the live path through a real `dagster dev`: bounded waits that show the
dagster dev log when they give up, and reads of the Delta tables with the test session's in-process Spark."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

WAIT_SECONDS = 300


def log_tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until(what: str, condition: Callable[[], bool], *, log: Path, seconds: float = WAIT_SECONDS) -> None:
    """Poll ``condition`` every second; fail the test (with the end of ``log``) after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds:.0f} s: {what}\n--- dagster dev log:\n{log_tail(log)}")
        time.sleep(1)


def delta_count(spark: Any, path: Path) -> int:
    """Rows in the Delta table at ``path``; 0 while it does not exist yet."""
    from pyspark.errors import AnalysisException

    try:
        return int(spark.read.format("delta").load(str(path)).count())
    except AnalysisException:
        return 0


def delta_vendor_counts(spark: Any, path: Path) -> dict[int, int]:
    """vendor_id -> trip_count of the vendor_counts table at ``path``; {} while it does not exist yet."""
    from pyspark.errors import AnalysisException

    try:
        rows = spark.read.format("delta").load(str(path)).collect()
    except AnalysisException:
        return {}
    return {int(r.vendor_id): int(r.trip_count) for r in rows}


def expected_vendor_counts(rides: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for ride in rides:
        counts[ride["vendor_id"]] = counts.get(ride["vendor_id"], 0) + 1
    return counts


_ENGINE_CATALOG = """
import json, sys
from streaming_pipeline.lakehouse.engine.catalog import registered_location
from streaming_pipeline.lakehouse.engine.spark import open_remote_session

spark = open_remote_session(sys.argv[1])
names = {}
for layer in ("bronze", "silver", "gold"):
    if spark.catalog.databaseExists(layer):
        for table in spark.catalog.listTables(layer):
            names[f"{layer}.{table.name}"] = registered_location(spark, f"{layer}.{table.name}")
answers = [[list(row) for row in spark.sql(query).collect()] for query in sys.argv[2:]]
print(json.dumps({"names": names, "answers": answers}))
"""


def engine_catalog(remote: str, *queries: str) -> tuple[dict[str, str | None], list[list[list[Any]]]]:
    """(every `layer.table` in the catalog of the engine at `remote` -> its location, the rows of each query), read
    by a Spark Connect session of a process of its own (pytest's process stays a classic driver), which registers
    nothing itself: what it finds, the runs registered."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _ENGINE_CATALOG, remote, *queries], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return found["names"], found["answers"]
