"""`streaming-pipeline bench`: throughput and memory; `bench --live`: freshness through `dagster dev`.

Both start a private embedded stack (Kafka, registry, the Spark Connect engine) and measure on it, in one run,
so every ratio compares figures taken on the same machine at the same time.
"""

from __future__ import annotations

import itertools
import json
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import dagster as dg

from streaming_pipeline.devstack.producer import produce, rows_from_records
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.errors import BenchError
from streaming_pipeline.progress import Progress, waiting
from streaming_pipeline.schemas import load_schema
from streaming_pipeline.settings import (
    DEFAULT_RIDE_WATERMARK_DELAY,
    DEFAULT_RIDE_WINDOW_DURATION,
    PipelineSettings,
    normalize_interval,
)
from streaming_pipeline.tables import RAW_RIDES, RIDES_TOPIC, VENDOR_COUNTS


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def bench_stage(what: str) -> AbstractContextManager[Progress]:
    """A stage that can take minutes: a running clock on a terminal, a line every few seconds in a log (none when
    it ends sooner)."""
    return waiting(f"[bench] {what}")


def machine_description() -> str:
    import os

    mem_gib = 0.0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_gib = int(line.split()[1]) / 1024 / 1024
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem_gib:.0f} GiB, Python {platform.python_version()}"


def process_memory_bytes(pid: int | None, field: str) -> int:
    """A memory field of a process from /proc/PID/status (VmRSS: resident now, VmHWM: peak); 0 when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text() if pid else ""
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def _peak_rss_mib(pid: int | None) -> float:
    """VmHWM (peak resident set) of a process, from /proc."""
    return process_memory_bytes(pid, "VmHWM") / 2**20


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def print_rows(rows: list[tuple[str, str]], notes: list[str]) -> None:
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for note in notes:
        print(f"note: {note}")


def write_json(path: Path | None, figures: Any) -> None:
    if path is not None:
        path.write_text(json.dumps(asdict(figures), indent=2))
        say(f"wrote {path}")


# ----------------------------------------------------------------------------------------------- throughput


@dataclass
class SizeFigures:
    """Both Spark jobs on the first `rides` records of the topic: one timing per round each, and their medians."""

    rides: int
    limit_consume_records_per_s: float = 0.0
    plain_spark_seconds: list[float] = field(default_factory=list)
    ours_seconds: list[float] = field(default_factory=list)
    ours_streaming_seconds: list[float] = field(default_factory=list)
    plain_spark_rides_per_s: float = 0.0
    ours_rides_per_s: float = 0.0
    overhead_seconds_per_run: float = 0.0
    ratios: dict[str, float] = field(default_factory=dict)

    def summarize(self) -> None:
        plain, ours = statistics.median(self.plain_spark_seconds), statistics.median(self.ours_seconds)
        self.plain_spark_rides_per_s = self.rides / plain
        self.ours_rides_per_s = self.rides / ours
        self.overhead_seconds_per_run = statistics.median(
            max(0.0, total - streaming)
            for total, streaming in zip(self.ours_seconds, self.ours_streaming_seconds, strict=True)
        )
        self.ratios = {
            "ours/plain_spark": round(self.ours_rides_per_s / self.plain_spark_rides_per_s, 3),
            "ours/limit": round(self.ours_rides_per_s / self.limit_consume_records_per_s, 4),
        }


@dataclass
class ThroughputResult:
    sizes: list[int]
    rounds: int
    machine: str
    engine: str = ""
    produce_rides_per_s: float = 0.0
    figures: list[SizeFigures] = field(default_factory=list)
    peak_engine_rss_mib: float = 0.0
    peak_python_rss_mib: float = 0.0


def engine_description(spark: Any) -> str:
    from streaming_pipeline.engine.jars import spark_versions

    return f"Spark {spark.version} Connect server, local[*]; Delta {spark_versions()[1]}"


def _consume_all(bootstrap: str, expected: int) -> float:
    """Seconds for confluent-kafka to read the first `expected` records of the topic, no decoding."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.time()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
        }
    )
    consumer.subscribe([RIDES_TOPIC])
    seen, started = 0, None
    deadline = time.monotonic() + 600
    with Progress(expected, "[bench] consuming", "rec", leave=False, heartbeat=True) as report:
        while seen < expected and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=10000, timeout=1.0)
            for message in batch:
                if message.error() is None:
                    if started is None:
                        started = time.monotonic()
                    seen += 1
            report.update(seen - report.count)
    consumer.close()
    return time.monotonic() - (started or time.monotonic())


def _plain_spark(spark: Any, bootstrap: str, out: Path) -> float:
    """The job a user would write by hand: Kafka -> strip the 5-byte header -> from_avro -> Delta append."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    schema = load_schema("ride_value.avsc")
    started = time.monotonic()
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", RIDES_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .select(from_avro(F.expr("substring(value, 6)"), schema).alias("r"), "topic", "partition", "offset")
        .select("r.*", "topic", "partition", "offset")
        .writeStream.format("delta")
        .option("checkpointLocation", str(out / "_chk"))
        .trigger(availableNow=True)
        .start(str(out / "table"))
    )
    query.awaitTermination()
    return time.monotonic() - started


def _materialize_raw_rides(resources: Mapping[str, Any]) -> tuple[float, int, float]:
    """(seconds, rows written, Spark trigger seconds) of one raw_rides materialization through Dagster."""
    from streaming_pipeline.defs.bronze.sources import bronze_asset
    from streaming_pipeline.devstack.quiet_runs import QUIET_RUN_CONFIG
    from streaming_pipeline.sources import rides

    raw_rides = bronze_asset(rides.SOURCE)
    started = time.monotonic()
    run = dg.materialize([raw_rides], resources=resources, run_config=QUIET_RUN_CONFIG)
    seconds = time.monotonic() - started
    metadata = run.get_asset_materialization_events()[0].materialization.metadata
    rows_written = cast(int, metadata["rows_written"].value)
    streaming_seconds = cast(float, metadata["streaming_seconds"].value)
    return seconds, int(rows_written), float(streaming_seconds)


def run_bench(sizes: list[int], json_path: Path | None, rounds: int = 2) -> ThroughputResult:
    """Throughput at each size in `sizes` (rides), on one topic that grows from size to size: at every size the
    limit, then `rounds` rounds of both jobs from fresh checkpoints, alternating which goes first."""
    from streaming_pipeline.definitions import build_resources
    from streaming_pipeline.devstack.embedded.stack import running_stack
    from streaming_pipeline.engine.spark import connect_session

    sizes = sorted(set(sizes))
    if not sizes or sizes[0] < 1 or rounds < 1:
        raise BenchError("--rides takes positive sizes, and --rounds at least 1")
    result = ThroughputResult(sizes=sizes, rounds=rounds, machine=machine_description())
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp, running_stack(Path(tmp) / "stack") as stack:
        assert stack.spark_remote
        work = Path(tmp)

        def resources_in(lakehouse: str) -> Any:
            return build_resources(PipelineSettings.from_env({**stack.env(), "LAKEHOUSE_DIR": str(work / lakehouse)}))

        resources = resources_in("produce")
        rides = synthetic_rides(sizes[-1], SyntheticOptions(seed=1))
        spark = connect_session(stack.spark_remote)
        result.engine = engine_description(spark)
        produced, produce_seconds = 0, 0.0
        for size in sizes:
            say(f"{size:,} rides: producing {size - produced:,} more synthetic rides")
            started = time.monotonic()
            sent = produce(
                resources["kafka"],
                resources["schema_registry"].get_client(),
                RIDES_TOPIC,
                rows_from_records(itertools.islice(rides, size - produced)),
                total=size - produced,
                acks="1",
            ).sent
            produce_seconds += time.monotonic() - started
            produced += sent
            figures = SizeFigures(rides=size)
            say(f"{size:,} rides: limit, raw consume with confluent-kafka")
            figures.limit_consume_records_per_s = size / max(_consume_all(stack.bootstrap_servers, size), 1e-9)
            if size == sizes[0]:
                say("warm-up: one untimed pass of each job, so that neither measured job pays for JIT")
                with bench_stage("warm-up"):
                    _plain_spark(spark, stack.bootstrap_servers, work / "warmup-plain")
                    _materialize_raw_rides(resources_in("warmup-ours"))
            for round_number in range(1, rounds + 1):
                jobs = ["plain", "ours"] if round_number % 2 else ["ours", "plain"]
                for job in jobs:
                    name = f"{size}-{round_number}-{job}"
                    if job == "plain":
                        say(f"{size:,} rides, round {round_number}: plain Spark, Kafka -> from_avro -> Delta")
                        with bench_stage(f"{size:,} rides, round {round_number}: plain Spark"):
                            seconds = _plain_spark(spark, stack.bootstrap_servers, work / name)
                        figures.plain_spark_seconds.append(seconds)
                        continue
                    say(f"{size:,} rides, round {round_number}: ours, raw_rides through Dagster, fresh checkpoint")
                    with bench_stage(f"{size:,} rides, round {round_number}: ours"):
                        seconds, written, streaming = _materialize_raw_rides(resources_in(name))
                    if written != size:
                        raise BenchError(f"raw_rides wrote {written} rows, expected {size}")
                    figures.ours_seconds.append(seconds)
                    figures.ours_streaming_seconds.append(streaming)
            figures.summarize()
            result.figures.append(figures)
        result.produce_rides_per_s = produced / max(produce_seconds, 1e-9)
        result.peak_engine_rss_mib = _peak_rss_mib(stack.spark_pid)
        result.peak_python_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        spark.stop()
    _print_throughput(result)
    write_json(json_path, result)
    return result


def _print_throughput(result: ThroughputResult) -> None:
    rows = [("engine", result.engine), ("produce (rides/s)", f"{result.produce_rides_per_s:,.0f}")]
    for figures in result.figures:
        at = f"{figures.rides:,} rides"
        rows += [
            (f"{at}: limit, raw consume (records/s)", f"{figures.limit_consume_records_per_s:,.0f}"),
            (f"{at}: plain Spark job (rides/s)", f"{figures.plain_spark_rides_per_s:,.0f}"),
            (f"{at}: ours, raw_rides via Dagster (rides/s)", f"{figures.ours_rides_per_s:,.0f}"),
            (f"{at}: ours / plain Spark", f"{figures.ratios['ours/plain_spark']:.2f}"),
            (f"{at}: ours / limit", f"{figures.ratios['ours/limit']:.3f}"),
            (f"{at}: ours, seconds outside Spark's trigger time", f"{figures.overhead_seconds_per_run:.1f}"),
        ]
    rows += [
        ("peak Spark Connect server RSS (MiB)", f"{result.peak_engine_rss_mib:,.0f}"),
        ("peak Python RSS (MiB)", f"{result.peak_python_rss_mib:,.0f}"),
        ("machine", result.machine),
    ]
    print_rows(rows, [f"medians of {result.rounds} rounds per job, the jobs' order alternating by round"])


# ----------------------------------------------------------------------------------------------- live


@dataclass
class LiveResult:
    probes: int
    machine: str
    first_ride_to_raw_rides_seconds: float = 0.0
    first_ride_to_vendor_counts_seconds: float = 0.0
    raw_rides_p50_seconds: float = 0.0
    raw_rides_p95_seconds: float = 0.0
    vendor_counts_p50_seconds: float = 0.0
    vendor_counts_p95_seconds: float = 0.0
    produce_to_run_requested_p50_seconds: float = 0.0
    run_launch_to_start_p50_seconds: float = 0.0
    run_duration_p50_seconds: float = 0.0
    sensor_runs: int = 0
    peak_engine_rss_mib: float = 0.0
    raw_rides_seconds: list[float] = field(default_factory=list)
    vendor_counts_seconds: list[float] = field(default_factory=list)


class _Tables:
    """How many rides raw_rides holds and vendor_counts counts, 0 while a table does not exist.

    raw_rides is counted from its snapshot's file statistics (delta-rs), which costs the engine nothing, so
    polling it does not slow down the run being measured; vendor_counts is a query.
    """

    def __init__(self, spark: Any, lakehouse: Path) -> None:
        self.spark = spark
        self.lakehouse = lakehouse

    def raw_rides(self) -> int:
        from streaming_pipeline.engine.delta_log import latest_version
        from streaming_pipeline.engine.table_snapshot import row_count

        path = str(self.lakehouse / RAW_RIDES.name)
        version = latest_version(path)
        return 0 if version is None else row_count(path, version) or 0

    def counted_rides(self) -> int:
        from pyspark.errors import AnalysisException

        try:
            frame = self.spark.read.format("delta").load(str(self.lakehouse / VENDOR_COUNTS.name))
            return int(frame.selectExpr("coalesce(sum(trip_count), 0)").collect()[0][0])
        except AnalysisException:
            return 0


def _probe(kafka: Any, registry: Any, tables: _Tables, seed: int, expected: int, timeout: float) -> tuple[float, float]:
    """Produce one ride; seconds until raw_rides has `expected` rows and until vendor_counts counts them."""
    ride = next(synthetic_rides(1, SyntheticOptions(seed=seed)))
    started = time.monotonic()
    produce(kafka, registry, RIDES_TOPIC, rows_from_records([ride]), show_progress=False)
    to_raw = to_gold = None
    deadline = started + timeout
    with bench_stage(f"probe {expected}: waiting for raw_rides and vendor_counts"):
        while to_gold is None:
            if time.monotonic() > deadline:
                raise BenchError(f"ride {expected} did not reach raw_rides/vendor_counts within {timeout:.0f} s")
            if to_raw is None and tables.raw_rides() >= expected:
                to_raw = time.monotonic() - started
            if to_raw is not None and tables.counted_rides() >= expected:
                to_gold = time.monotonic() - started
            time.sleep(0.1 if to_raw is None else 0.5)  # a vendor_counts query is a Spark job: ask twice a second
    assert to_raw is not None
    return to_raw, to_gold


def _wait_until_no_run_in_flight(dagster_home: Path, timeout: float) -> None:
    """Each probe goes onto a quiet pipeline: a ride produced while a run works waits for that run to end first."""
    from streaming_pipeline.live_runs import IN_FLIGHT

    instance = dg.DagsterInstance.from_config(str(dagster_home))
    deadline = time.monotonic() + timeout
    with bench_stage("waiting for the run in flight to end"):
        while instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=1):
            if time.monotonic() > deadline:
                raise BenchError(f"a run was still in flight after {timeout:.0f} s")
            time.sleep(0.5)


def _run_timings(dagster_home: Path, produced_at: list[float]) -> tuple[list[float], list[float], list[float]]:
    """(produce -> the sensor's run request, launch -> RUN_START, RUN_START -> end) in seconds: the first for each
    probe produced at the times `produced_at`, the others for every finished run the offset sensor launched."""
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    records = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/sensor_name": "raw_rides_offset_sensor"}))
    created = sorted(record.create_timestamp.timestamp() for record in records)
    requested = [min(c for c in created if c >= t) - t for t in produced_at if any(c >= t for c in created)]
    launch, duration = [], []
    for record in records:
        if record.start_time and record.end_time:
            launch.append(record.start_time - record.create_timestamp.timestamp())
            duration.append(record.end_time - record.start_time)
    return requested, launch, duration


def run_live_bench(probes: int, json_path: Path | None, gap_seconds: float = 3.0, timeout: float = 300.0) -> LiveResult:
    """Freshness through the real `dagster dev` path: webserver + daemon, the offset sensor, the run it launches."""
    from streaming_pipeline.devstack.embedded.dagster_dev import DagsterDev
    from streaming_pipeline.devstack.embedded.stack import running_stack
    from streaming_pipeline.engine.spark import connect_session
    from streaming_pipeline.registry_client import RegistryClient
    from streaming_pipeline.resources import KafkaResource

    if probes < 2:
        raise BenchError("--probes must be at least 2 (the first probe is reported separately)")
    result = LiveResult(probes=probes, machine=machine_description())
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp, running_stack(Path(tmp) / "stack") as stack:
        assert stack.spark_remote and stack.dagster_home
        kafka = KafkaResource(bootstrap_servers=stack.bootstrap_servers)
        registry = RegistryClient(stack.schema_registry_url)
        kafka.ensure_topic(RIDES_TOPIC)
        lakehouse = Path(tmp) / "lakehouse"
        spark = connect_session(stack.spark_remote)
        tables = _Tables(spark, lakehouse)
        say("starting dagster dev (webserver + daemon)")
        with DagsterDev({**stack.env(), "LAKEHOUSE_DIR": str(lakehouse)}, Path(tmp) / "dagster-dev.log"):
            say("probe 1 (right after dagster dev answers)")
            raw, gold = _probe(kafka, registry, tables, seed=5000, expected=1, timeout=timeout)
            result.first_ride_to_raw_rides_seconds, result.first_ride_to_vendor_counts_seconds = raw, gold
            produced_at = []
            for probe in range(2, probes + 1):
                time.sleep(gap_seconds)
                _wait_until_no_run_in_flight(stack.dagster_home, timeout)
                produced_at.append(time.time())
                raw, gold = _probe(kafka, registry, tables, seed=5000 + probe, expected=probe, timeout=timeout)
                result.raw_rides_seconds.append(round(raw, 2))
                result.vendor_counts_seconds.append(round(gold, 2))
                say(f"probe {probe}/{probes}: raw_rides {raw:.1f} s, vendor_counts {gold:.1f} s")
            requested, launch, duration = _run_timings(stack.dagster_home, produced_at)
        spark.stop()
        result.peak_engine_rss_mib = _peak_rss_mib(stack.spark_pid)
    result.raw_rides_p50_seconds = round(statistics.median(result.raw_rides_seconds), 2)
    result.raw_rides_p95_seconds = round(_percentile(result.raw_rides_seconds, 0.95), 2)
    result.vendor_counts_p50_seconds = round(statistics.median(result.vendor_counts_seconds), 2)
    result.vendor_counts_p95_seconds = round(_percentile(result.vendor_counts_seconds, 0.95), 2)
    result.sensor_runs = len(launch)
    result.produce_to_run_requested_p50_seconds = round(statistics.median(requested), 2) if requested else 0.0
    result.run_launch_to_start_p50_seconds = round(statistics.median(launch), 2) if launch else 0.0
    result.run_duration_p50_seconds = round(statistics.median(duration), 2) if duration else 0.0
    print_rows(
        [
            ("probes", f"{probes} (1 first + {probes - 1} measured)"),
            (
                "first ride -> raw_rides / vendor_counts (s)",
                f"{result.first_ride_to_raw_rides_seconds:.1f} / {result.first_ride_to_vendor_counts_seconds:.1f}",
            ),
            (
                "produce -> raw_rides p50 / p95 (s)",
                f"{result.raw_rides_p50_seconds:.1f} / {result.raw_rides_p95_seconds:.1f}",
            ),
            (
                "produce -> vendor_counts p50 / p95 (s)",
                f"{result.vendor_counts_p50_seconds:.1f} / {result.vendor_counts_p95_seconds:.1f}",
            ),
            ("produce -> the sensor's run request p50 (s)", f"{result.produce_to_run_requested_p50_seconds:.1f}"),
            ("run launch -> RUN_START p50 (s)", f"{result.run_launch_to_start_p50_seconds:.1f}"),
            ("sensor run duration p50 (s)", f"{result.run_duration_p50_seconds:.1f} over {result.sensor_runs} runs"),
            ("peak Spark Connect server RSS (MiB)", f"{result.peak_engine_rss_mib:,.0f}"),
            ("machine", result.machine),
        ],
        [],
    )
    write_json(json_path, result)
    return result


# ----------------------------------------------------------------------------------------------- windows


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


def run_windows_bench(histories: tuple[int, ...], new_rides: int, runs: int, json_path: Path | None) -> WindowsResult:
    """Per history size, a lakehouse whose raw_rides gets that many synthetic rides (commits of 50,000, written
    straight as Delta) and one untimed windows run. Then, `runs` rounds: in each, every lakehouse in turn gets
    `new_rides` more rides (1% of them an hour late) and a timed windows run (stream + reconcile). The rounds
    interleave the history sizes, so that neither profits more from a warmer engine. The figure is the ratio of
    the medians, largest history over smallest."""
    from streaming_pipeline.devstack.embedded.stack import running_stack
    from streaming_pipeline.engine.spark import connect_session
    from streaming_pipeline.gold.windows import reconcile_ride_windows, stream_ride_windows
    from streaming_pipeline.resources import LakehouseResource

    result = WindowsResult(new_rides=new_rides, machine=machine_description(), runs=runs, history_rides=list(histories))
    options = SyntheticOptions(seed=7, late_fraction=0.01)
    # The asset's defaults.
    window = normalize_interval(DEFAULT_RIDE_WINDOW_DURATION, name="window_duration")
    watermark = normalize_interval(DEFAULT_RIDE_WATERMARK_DELAY, name="watermark_delay")
    with tempfile.TemporaryDirectory(prefix="bench-windows-") as tmp, running_stack(Path(tmp) / "stack") as stack:
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
                stream_ride_windows(spark, lakehouses[history], window_duration=window, watermark_delay=watermark)
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
                    stream_ride_windows(spark, lakehouse, window_duration=window, watermark_delay=watermark)
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
