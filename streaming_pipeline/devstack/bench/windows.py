"""`streaming-pipeline bench windows`: what a windows run (stream + reconcile) of a few new rides costs as the
history in raw_rides grows."""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming_pipeline.devstack.bench.common import (
    bench_stack,
    bench_stage,
    machine_description,
    print_rows,
    say,
    write_json,
)
from streaming_pipeline.devstack.errors import BenchError
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.lakehouse.tables import RAW_RIDES, RIDES_TOPIC


@dataclass
class WindowsResult:
    """A windows run (stream + reconcile) with `new_rides` new rides, after each history size."""

    new_rides: int
    machine: str
    engine: str = "Spark Connect server, local[*]"
    runs: int = 0
    history_rides: list[int] = field(default_factory=list)
    seconds_p50: dict[str, float] = field(default_factory=dict)  # history -> median seconds of a windows run
    stream_seconds_p50: dict[str, float] = field(default_factory=dict)
    reconcile_seconds_p50: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    late_rides_found: dict[str, int] = field(default_factory=dict)
    ratio: float = 0.0  # largest history / smallest, medians


_RIDE_BATCH = 50_000  # rides per raw_rides commit, like a bronze micro-batch


def _raw_rides_frames(spark: Any, rides: list[dict[str, Any]], first_offset: int) -> Any:
    """`rides` as rows of raw_rides (the Kafka columns made up: topic rides, two partitions, schema id 1)."""
    import pandas as pd

    frame = pd.DataFrame(rides)
    offsets = range(first_offset, first_offset + len(rides))
    frame["kafka_topic"] = RIDES_TOPIC
    frame["kafka_partition"] = [o % 2 for o in offsets]
    frame["kafka_offset"] = [o // 2 for o in offsets]
    frame["kafka_timestamp"] = frame["pickup_datetime"]
    frame["schema_id"] = 1
    for column in ("pickup_datetime", "dropoff_datetime", "kafka_timestamp"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    ints = (
        "vendor_id",
        "passenger_count",
        "rate_code_id",
        "pu_location_id",
        "do_location_id",
        "payment_type",
        "kafka_partition",
        "schema_id",
    )
    typed = spark.createDataFrame(frame)
    return typed.select(*[typed[c].cast("int").alias(c) if c in ints else typed[c] for c in typed.columns])


def _append_rides(spark: Any, path: str, rides: list[dict[str, Any]], first_offset: int) -> None:
    for start in range(0, len(rides), _RIDE_BATCH):
        chunk = rides[start : start + _RIDE_BATCH]
        _raw_rides_frames(spark, chunk, first_offset + start).write.format("delta").mode("append").save(path)


def run_windows_bench(
    histories: tuple[int, ...], new_rides: int, runs: int, json_path: Path | None, stack_dir: Path | None = None
) -> WindowsResult:
    """Per history size, a lakehouse whose raw_rides gets that many synthetic rides (commits of 50,000, written
    straight as Delta) and one untimed windows run. Then, `runs` rounds: in each, every lakehouse in turn gets
    `new_rides` more rides (1% of them an hour late) and a timed windows run (stream + reconcile). The rounds
    interleave the history sizes, so that neither profits more from a warmer engine. The figure is the ratio of
    the medians, largest history over smallest.

    Args:
        histories: the history sizes, in rides already in raw_rides (`--history`).
        new_rides: new rides per timed run (`--new-rides`).
        runs: timed runs per history size (`--runs`).
        json_path: where to write every figure as JSON (`--json`); None for none.
        stack_dir: the embedded stack to measure on (`--stack-dir`); None for a private one.

    Returns:
        The timings per history size and their ratio.
    """
    from streaming_pipeline.devstack.project import project_streaming_table
    from streaming_pipeline.lakehouse.engine.spark import connect_session
    from streaming_pipeline.lakehouse.engine.streams import run_available_now
    from streaming_pipeline.lakehouse.gold.window_reconcile import reconcile_ride_windows
    from streaming_pipeline.resources import LakehouseResource

    result = WindowsResult(new_rides=new_rides, machine=machine_description(), runs=runs, history_rides=list(histories))
    options = SyntheticOptions(seed=7, late_fraction=0.01)
    # The table's declaration with its parameters' defaults; its query streamed, then reconciled, each timed.
    windows = project_streaming_table("ride_window_aggregates")
    defaults = windows.parameter_defaults()
    window = defaults["window_duration"]

    def stream_ride_windows(lakehouse: LakehouseResource) -> None:
        query = windows.table_query().query(spark, lakehouse, defaults)
        run_available_now(query.name, query.start_writer)

    with tempfile.TemporaryDirectory(prefix="bench-windows-") as tmp, bench_stack(Path(tmp), stack_dir) as stack:
        assert stack.spark_remote
        spark = connect_session(stack.spark_remote)
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        lakehouses, rides = {}, {}
        for history in histories:
            lakehouses[history] = LakehouseResource(root=str(Path(tmp) / f"lakehouse-{history}"))
            rides[history] = list(synthetic_rides(history + runs * new_rides, options))
            say(f"history {history:,}: writing raw_rides, then one untimed windows run over it")
            with bench_stage(f"history {history:,}: writing raw_rides, untimed windows run"):
                _append_rides(spark, lakehouses[history].table_path(RAW_RIDES.name), rides[history][:history], 0)
                stream_ride_windows(lakehouses[history])
                reconcile_ride_windows(spark, lakehouses[history], window_duration=window)
        totals: dict[int, list[float]] = {h: [] for h in histories}
        streams: dict[int, list[float]] = {h: [] for h in histories}
        reconciles: dict[int, list[float]] = {h: [] for h in histories}
        late = {h: 0 for h in histories}
        for run in range(runs):
            for history in histories:
                lakehouse, start = lakehouses[history], history + run * new_rides
                with bench_stage(f"run {run + 1}/{runs}, history {history:,}"):
                    _append_rides(
                        spark, lakehouse.table_path(RAW_RIDES.name), rides[history][start : start + new_rides], start
                    )
                    began = time.monotonic()
                    stream_ride_windows(lakehouse)
                    streamed = time.monotonic()
                    reconcile = reconcile_ride_windows(spark, lakehouse, window_duration=window)
                    ended = time.monotonic()
                if reconcile.full or reconcile.new_rides != new_rides:
                    raise BenchError(
                        f"the reconcile read {reconcile.new_rides} new rides (full: {reconcile.full}), "
                        f"expected {new_rides}"
                    )
                late[history] += reconcile.late_rides_found
                totals[history].append(round(ended - began, 3))
                streams[history].append(streamed - began)
                reconciles[history].append(ended - streamed)
                say(
                    f"run {run + 1}/{runs}, history {history:,}: {ended - began:.2f} s "
                    f"(stream {streamed - began:.2f} s, reconcile {ended - streamed:.2f} s)"
                )
        for history in histories:
            key = str(history)
            result.seconds[key] = totals[history]
            result.seconds_p50[key] = round(statistics.median(totals[history]), 3)
            result.stream_seconds_p50[key] = round(statistics.median(streams[history]), 3)
            result.reconcile_seconds_p50[key] = round(statistics.median(reconciles[history]), 3)
            result.late_rides_found[key] = late[history]
        spark.stop()
    smallest, largest = str(min(histories)), str(max(histories))
    result.ratio = round(result.seconds_p50[largest] / result.seconds_p50[smallest], 3)
    rows = [("new rides per run", f"{new_rides:,} (about 1% an hour late)"), ("timed runs per history", str(runs))]
    for history in histories:
        key = str(history)
        rows.append(
            (
                f"windows run after {history:,} rides, p50 (s)",
                f"{result.seconds_p50[key]:.2f} (stream {result.stream_seconds_p50[key]:.2f}, "
                f"reconcile {result.reconcile_seconds_p50[key]:.2f})",
            )
        )
    rows += [
        (f"ratio {int(largest):,} / {int(smallest):,}", f"{result.ratio:.2f}"),
        ("engine", result.engine),
        ("machine", result.machine),
    ]
    print_rows(rows, [])
    write_json(json_path, result)
    return result
