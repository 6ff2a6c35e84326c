"""`streaming-pipeline bench`: throughput and memory; `bench --live`: freshness through `dagster dev`.

Both start a private embedded stack (Kafka, registry, the Spark Connect engine) and measure on it, in one run,
so every ratio compares figures taken on the same machine at the same time.
"""

from __future__ import annotations

import json
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from streaming_pipeline.errors import StreamingPipelineError
from streaming_pipeline.producer import produce, rows_from_records
from streaming_pipeline.schemas import load_schema
from streaming_pipeline.settings import RIDES_TOPIC, PipelineSettings
from streaming_pipeline.synthetic import SyntheticOptions, synthetic_rides


class BenchError(StreamingPipelineError):
    """A benchmark could not measure what it set out to (the pipeline lost or duplicated rows)."""


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _machine() -> str:
    import os

    mem_gib = 0.0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_gib = int(line.split()[1]) / 1024 / 1024
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem_gib:.0f} GiB, Python {platform.python_version()}"


def _peak_rss_mib(pid: int | None) -> float:
    """VmHWM (peak resident set) of a process, from /proc."""
    if not pid:
        return 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _print_rows(rows: list[tuple[str, str]], notes: list[str]) -> None:
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for note in notes:
        print(f"note: {note}")


def _write_json(path: Path | None, figures: Any) -> None:
    if path is not None:
        path.write_text(json.dumps(asdict(figures), indent=2))
        _say(f"wrote {path}")


# ----------------------------------------------------------------------------------------------- throughput


@dataclass
class ThroughputResult:
    rides: int
    machine: str
    engine: str = "Spark Connect server, local[*]"
    produce_rides_per_s: float = 0.0
    limit_consume_records_per_s: float = 0.0
    plain_spark_rides_per_s: float = 0.0
    ours_rides_per_s: float = 0.0
    ours_seconds: float = 0.0
    ours_streaming_seconds: float = 0.0
    overhead_seconds_per_run: float = 0.0
    peak_engine_rss_mib: float = 0.0
    peak_python_rss_mib: float = 0.0
    ratios: dict[str, float] = field(default_factory=dict)


def _consume_all(bootstrap: str, expected: int) -> float:
    """Seconds for confluent-kafka to read `expected` records of the topic, no decoding."""
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
    while seen < expected and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=10000, timeout=1.0):
            if message.error() is None:
                if started is None:
                    started = time.monotonic()
                seen += 1
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


def _materialize_raw_rides(resources: dict[str, Any]) -> tuple[float, int, float]:
    """(seconds, rows written, Spark trigger seconds) of one raw_rides materialization through Dagster."""
    from streaming_pipeline.assets import raw_rides

    started = time.monotonic()
    run = dg.materialize([raw_rides], resources=resources)
    seconds = time.monotonic() - started
    metadata = run.get_asset_materialization_events()[0].materialization.metadata
    return seconds, int(metadata["rows_written"].value), float(metadata["streaming_seconds"].value)


def run_bench(rides: int, json_path: Path | None) -> ThroughputResult:
    from streaming_pipeline.definitions import build_resources
    from streaming_pipeline.embedded.stack import running_stack
    from streaming_pipeline.resources.spark import connect_session

    result = ThroughputResult(rides=rides, machine=_machine())
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp, running_stack(Path(tmp) / "stack") as stack:
        assert stack.spark_remote
        settings = PipelineSettings.from_env(
            {**stack.env(), "LAKEHOUSE_DIR": str(Path(tmp) / "lakehouse")}
        )
        resources = build_resources(settings)
        _say(f"producing {rides:,} synthetic rides")
        started = time.monotonic()
        produced = produce(
            resources["kafka"],
            resources["schema_registry"],
            RIDES_TOPIC,
            rows_from_records(synthetic_rides(rides, SyntheticOptions(seed=1))),
            total=rides,
            acks="1",
        )
        result.produce_rides_per_s = produced.sent / (time.monotonic() - started)
        _say("limit: raw consume with confluent-kafka")
        result.limit_consume_records_per_s = rides / max(_consume_all(stack.bootstrap_servers, rides), 1e-9)
        spark = connect_session(stack.spark_remote)
        _say("warm-up: one untimed pass of each job, so that neither measured job pays for JIT")
        _plain_spark(spark, stack.bootstrap_servers, Path(tmp) / "warmup")
        warm = build_resources(
            PipelineSettings.from_env({**stack.env(), "LAKEHOUSE_DIR": str(Path(tmp) / "warmup-lakehouse")})
        )
        _materialize_raw_rides(warm)
        _say("plain Spark: hand-written Kafka -> from_avro -> Delta job")
        result.plain_spark_rides_per_s = rides / _plain_spark(spark, stack.bootstrap_servers, Path(tmp) / "plain")
        _say("ours: materialize raw_rides through Dagster, fresh checkpoint")
        result.ours_seconds, written, result.ours_streaming_seconds = _materialize_raw_rides(resources)
        if written != rides:
            raise BenchError(f"raw_rides wrote {written} rows, expected {rides}")
        result.ours_rides_per_s = rides / result.ours_seconds
        result.overhead_seconds_per_run = max(0.0, result.ours_seconds - result.ours_streaming_seconds)
        result.peak_engine_rss_mib = _peak_rss_mib(stack.spark_pid)
        result.peak_python_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        spark.stop()
    result.ratios = {
        "ours/plain_spark": round(result.ours_rides_per_s / result.plain_spark_rides_per_s, 3),
        "ours/limit": round(result.ours_rides_per_s / result.limit_consume_records_per_s, 4),
    }
    _print_rows(
        [
            ("rides", f"{result.rides:,}"),
            ("engine", result.engine),
            ("produce (rides/s)", f"{result.produce_rides_per_s:,.0f}"),
            ("limit: raw consume (records/s)", f"{result.limit_consume_records_per_s:,.0f}"),
            ("plain Spark job (rides/s)", f"{result.plain_spark_rides_per_s:,.0f}"),
            ("ours: raw_rides via Dagster (rides/s)", f"{result.ours_rides_per_s:,.0f}"),
            ("ours / plain Spark", f"{result.ratios['ours/plain_spark']:.2f}"),
            ("ours / limit", f"{result.ratios['ours/limit']:.3f}"),
            ("overhead per run outside Spark work (s)", f"{result.overhead_seconds_per_run:.1f}"),
            ("peak Spark Connect server RSS (MiB)", f"{result.peak_engine_rss_mib:,.0f}"),
            ("peak Python RSS (MiB)", f"{result.peak_python_rss_mib:,.0f}"),
            ("machine", result.machine),
        ],
        [],
    )
    _write_json(json_path, result)
    return result


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
    run_launch_to_start_p50_seconds: float = 0.0
    run_duration_p50_seconds: float = 0.0
    sensor_runs: int = 0
    peak_engine_rss_mib: float = 0.0
    raw_rides_seconds: list[float] = field(default_factory=list)
    vendor_counts_seconds: list[float] = field(default_factory=list)


class _Tables:
    """Row counts of raw_rides and vendor_counts over the engine, 0 while a table does not exist."""

    def __init__(self, spark: Any, lakehouse: Path) -> None:
        self.spark = spark
        self.lakehouse = lakehouse

    def raw_rides(self) -> int:
        return self._scalar("raw_rides", "count(*)")

    def counted_rides(self) -> int:
        return self._scalar("vendor_counts", "coalesce(sum(trip_count), 0)")

    def _scalar(self, table: str, expression: str) -> int:
        from pyspark.errors import AnalysisException

        try:
            frame = self.spark.read.format("delta").load(str(self.lakehouse / table))
            return int(frame.selectExpr(expression).collect()[0][0])
        except AnalysisException:
            return 0


def _probe(kafka: Any, registry: Any, tables: _Tables, seed: int, expected: int, timeout: float) -> tuple[float, float]:
    """Produce one ride; seconds until raw_rides has `expected` rows and until vendor_counts counts them."""
    ride = next(synthetic_rides(1, SyntheticOptions(seed=seed)))
    started = time.monotonic()
    produce(kafka, registry, RIDES_TOPIC, rows_from_records([ride]), show_progress=False)
    to_raw = to_gold = None
    deadline = started + timeout
    while to_gold is None:
        if time.monotonic() > deadline:
            raise BenchError(f"ride {expected} did not reach raw_rides/vendor_counts within {timeout:.0f} s")
        if to_raw is None and tables.raw_rides() >= expected:
            to_raw = time.monotonic() - started
        if to_raw is not None and tables.counted_rides() >= expected:
            to_gold = time.monotonic() - started
        time.sleep(0.2)
    assert to_raw is not None
    return to_raw, to_gold


def _run_timings(dagster_home: Path) -> tuple[list[float], list[float]]:
    """(launch -> RUN_START, RUN_START -> end) in seconds, for every finished run the offset sensor launched."""
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    launch, duration = [], []
    for record in instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/sensor_name": "raw_rides_offset_sensor"})):
        if record.start_time and record.end_time:
            launch.append(record.start_time - record.create_timestamp.timestamp())
            duration.append(record.end_time - record.start_time)
    return launch, duration


def run_live_bench(probes: int, json_path: Path | None, gap_seconds: float = 3.0, timeout: float = 300.0) -> LiveResult:
    """Freshness through the real `dagster dev` path: webserver + daemon, the offset sensor, the run it launches."""
    from streaming_pipeline.embedded.dagster_dev import DagsterDev
    from streaming_pipeline.embedded.stack import running_stack
    from streaming_pipeline.resources import KafkaResource, SchemaRegistryResource
    from streaming_pipeline.resources.spark import connect_session

    if probes < 2:
        raise BenchError("--probes must be at least 2 (the first probe is reported separately)")
    result = LiveResult(probes=probes, machine=_machine())
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp, running_stack(Path(tmp) / "stack") as stack:
        assert stack.spark_remote and stack.dagster_home
        kafka = KafkaResource(bootstrap_servers=stack.bootstrap_servers)
        registry = SchemaRegistryResource(url=stack.schema_registry_url)
        kafka.ensure_topic(RIDES_TOPIC)
        lakehouse = Path(tmp) / "lakehouse"
        spark = connect_session(stack.spark_remote)
        tables = _Tables(spark, lakehouse)
        _say("starting dagster dev (webserver + daemon)")
        with DagsterDev({**stack.env(), "LAKEHOUSE_DIR": str(lakehouse)}, Path(tmp) / "dagster-dev.log"):
            _say("probe 1 (right after dagster dev answers)")
            raw, gold = _probe(kafka, registry, tables, seed=5000, expected=1, timeout=timeout)
            result.first_ride_to_raw_rides_seconds, result.first_ride_to_vendor_counts_seconds = raw, gold
            for probe in range(2, probes + 1):
                time.sleep(gap_seconds)
                raw, gold = _probe(kafka, registry, tables, seed=5000 + probe, expected=probe, timeout=timeout)
                result.raw_rides_seconds.append(round(raw, 2))
                result.vendor_counts_seconds.append(round(gold, 2))
                _say(f"probe {probe}/{probes}: raw_rides {raw:.1f} s, vendor_counts {gold:.1f} s")
            launch, duration = _run_timings(stack.dagster_home)
        spark.stop()
        result.peak_engine_rss_mib = _peak_rss_mib(stack.spark_pid)
    result.raw_rides_p50_seconds = round(statistics.median(result.raw_rides_seconds), 2)
    result.raw_rides_p95_seconds = round(_percentile(result.raw_rides_seconds, 0.95), 2)
    result.vendor_counts_p50_seconds = round(statistics.median(result.vendor_counts_seconds), 2)
    result.vendor_counts_p95_seconds = round(_percentile(result.vendor_counts_seconds, 0.95), 2)
    result.sensor_runs = len(launch)
    result.run_launch_to_start_p50_seconds = round(statistics.median(launch), 2) if launch else 0.0
    result.run_duration_p50_seconds = round(statistics.median(duration), 2) if duration else 0.0
    _print_rows(
        [
            ("probes", f"{probes} (1 first + {probes - 1} measured)"),
            ("first ride -> raw_rides / vendor_counts (s)",
             f"{result.first_ride_to_raw_rides_seconds:.1f} / {result.first_ride_to_vendor_counts_seconds:.1f}"),
            ("produce -> raw_rides p50 / p95 (s)", f"{result.raw_rides_p50_seconds:.1f} / {result.raw_rides_p95_seconds:.1f}"),
            ("produce -> vendor_counts p50 / p95 (s)",
             f"{result.vendor_counts_p50_seconds:.1f} / {result.vendor_counts_p95_seconds:.1f}"),
            ("run launch -> RUN_START p50 (s)", f"{result.run_launch_to_start_p50_seconds:.1f}"),
            ("sensor run duration p50 (s)", f"{result.run_duration_p50_seconds:.1f} over {result.sensor_runs} runs"),
            ("peak Spark Connect server RSS (MiB)", f"{result.peak_engine_rss_mib:,.0f}"),
            ("machine", result.machine),
        ],
        [],
    )
    _write_json(json_path, result)
    return result
