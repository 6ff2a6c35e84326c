"""`streaming-pipeline bench`: ingestion throughput (Kafka -> Delta bronze) beside the raw consume
rate of the same topic, measured in one run on a private embedded stack."""

from __future__ import annotations

import dataclasses
import json
import platform
import resource
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import dagster as dg

from streaming_pipeline.producer import produce, rows_from_records
from streaming_pipeline.schemas import load_schema
from streaming_pipeline.settings import RIDES_TOPIC, PipelineSettings
from streaming_pipeline.synthetic import SyntheticOptions, synthetic_rides


@dataclass
class BenchResult:
    rides: int
    machine: str
    produce_rides_per_s: float = 0.0
    limit_consume_records_per_s: float = 0.0
    plain_spark_rides_per_s: float = 0.0
    ours_rides_per_s: float = 0.0
    ours_seconds: float = 0.0
    ours_streaming_seconds: float = 0.0
    overhead_seconds_per_run: float = 0.0
    freshness_probes: int = 0
    freshness_p50_seconds: float = 0.0
    freshness_p95_seconds: float = 0.0
    peak_driver_jvm_rss_mib: float = 0.0
    peak_python_rss_mib: float = 0.0
    ratios: dict[str, float] = field(default_factory=dict)
    not_measured: list[str] = field(default_factory=list)


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _consume_all(bootstrap: str, expected: int) -> float:
    """Seconds for confluent-kafka to read `expected` records of the topic, no decoding."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800})
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


def _plain_spark(spark, bootstrap: str, out: Path) -> float:
    """The job a user would write by hand: Kafka -> strip the 5-byte header -> from_avro -> Delta append."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    schema = load_schema("ride_value.avsc")
    started = time.monotonic()
    query = (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", RIDES_TOPIC)
        .option("startingOffsets", "earliest").load()
        .select(from_avro(F.expr("substring(value, 6)"), schema).alias("r"), "topic", "partition", "offset")
        .select("r.*", "topic", "partition", "offset")
        .writeStream.format("delta").option("checkpointLocation", str(out / "_chk")).trigger(availableNow=True)
        .start(str(out / "table"))
    )
    query.awaitTermination()
    return time.monotonic() - started


def _jvm_peak_rss_mib(spark) -> float:
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _freshness(resources: dict, probes: int) -> list[float]:
    """Seconds from producing one ride to reading it in raw_rides, through the offset sensor and the
    run it requests (in this process, Spark session warm), polling the sensor every 0.5 s."""
    from streaming_pipeline.assets import raw_rides
    from streaming_pipeline.sensors import build_offset_sensor

    sensor = build_offset_sensor(dg.AssetKey("raw_rides"), RIDES_TOPIC, min_new_records=1)
    sensor_resources = {"kafka": resources["kafka"], "lakehouse": resources["lakehouse"]}
    spark = resources["spark"].get_session()
    table = resources["lakehouse"].table_path("raw_rides")
    seen = spark.read.format("delta").load(table).count()
    cursor = None
    delays = []
    for probe in range(probes):
        ride = next(synthetic_rides(1, SyntheticOptions(seed=10_000 + probe)))
        started = time.monotonic()
        produce(resources["kafka"], resources["schema_registry"], RIDES_TOPIC, rows_from_records([ride]), show_progress=False)
        while True:
            tick = sensor(dg.build_sensor_context(resources=sensor_resources, cursor=cursor))
            cursor = tick.cursor
            if tick.run_requests:
                dg.materialize([raw_rides], resources=resources)
                if spark.read.format("delta").load(table).count() > seen:
                    break
            time.sleep(0.5)
        seen += 1
        delays.append(time.monotonic() - started)
        _say(f"freshness probe {probe + 1}/{probes}: {delays[-1]:.1f} s")
    return delays


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_bench(rides: int, json_path: Path | None, probes: int = 20) -> BenchResult:
    from streaming_pipeline.assets import raw_rides
    from streaming_pipeline.definitions import build_resources
    from streaming_pipeline.embedded.stack import running_stack

    result = BenchResult(rides=rides, machine=f"{platform.node()} {platform.machine()}, {_cpus()} cores, {_mem_gib():.0f} GiB, "
                                              f"Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp, running_stack(Path(tmp) / "stack") as stack:
        settings = PipelineSettings.from_env({"KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
                                              "SCHEMA_REGISTRY_URL": stack.schema_registry_url,
                                              "LAKEHOUSE_DIR": str(Path(tmp) / "lakehouse")})
        resources = build_resources(settings)
        _say(f"producing {rides} synthetic rides")
        started = time.monotonic()
        produced = produce(resources["kafka"], resources["schema_registry"], RIDES_TOPIC,
                           rows_from_records(synthetic_rides(rides, SyntheticOptions(seed=1))), total=rides, acks="1")
        result.produce_rides_per_s = produced.sent / (time.monotonic() - started)
        _say("limit: raw consume with confluent-kafka")
        result.limit_consume_records_per_s = rides / max(_consume_all(stack.bootstrap_servers, rides), 1e-9)
        spark = resources["spark"].get_session()
        spark.range(1).count()
        _say("warm-up: one untimed pass of each job, so neither measured job pays for a cold JVM")
        _plain_spark(spark, stack.bootstrap_servers, Path(tmp) / "warmup")
        warm = build_resources(dataclasses.replace(settings, lakehouse_dir=str(Path(tmp) / "warmup-lakehouse")))
        warm["spark"] = type(resources["spark"])(stop_on_teardown=False)
        dg.materialize([raw_rides], resources=warm)
        _say("plain Spark: hand-written Kafka -> from_avro -> Delta job")
        result.plain_spark_rides_per_s = rides / _plain_spark(spark, stack.bootstrap_servers, Path(tmp) / "plain")
        _say("ours: materialize raw_rides through Dagster, fresh checkpoint")
        resources["spark"] = type(resources["spark"])(stop_on_teardown=False)
        started = time.monotonic()
        run = dg.materialize([raw_rides], resources=resources)
        result.ours_seconds = time.monotonic() - started
        result.ours_rides_per_s = rides / result.ours_seconds
        events = run.get_asset_materialization_events()
        written = events[0].materialization.metadata["rows_written"].value if events else 0
        if written != rides:
            raise RuntimeError(f"raw_rides wrote {written} rows, expected {rides}")
        result.ours_streaming_seconds = float(events[0].materialization.metadata["streaming_seconds"].value)
        result.overhead_seconds_per_run = max(0.0, result.ours_seconds - result.ours_streaming_seconds)
        if probes:
            delays = _freshness(resources, probes)
            result.freshness_probes = len(delays)
            result.freshness_p50_seconds = round(_percentile(delays, 0.5), 2)
            result.freshness_p95_seconds = round(_percentile(delays, 0.95), 2)
        result.peak_driver_jvm_rss_mib = _jvm_peak_rss_mib(spark)
        result.peak_python_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        spark.stop()
    result.ratios = {
        "ours/plain_spark": round(result.ours_rides_per_s / result.plain_spark_rides_per_s, 3),
        "ours/limit": round(result.ours_rides_per_s / result.limit_consume_records_per_s, 4),
    }
    result.not_measured = [
        "freshness is measured in one process with a warm Spark session; under `dagster dev` the daemon adds "
        "its tick interval and starts each run in a new process (a cold Spark session)"
    ]
    _print_table(result)
    if json_path is not None:
        json_path.write_text(json.dumps(asdict(result), indent=2))
        _say(f"wrote {json_path}")
    return result


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _mem_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024 / 1024
    return 0.0


def _print_table(result: BenchResult) -> None:
    rows = [
        ("rides", f"{result.rides:,}"),
        ("produce (rides/s)", f"{result.produce_rides_per_s:,.0f}"),
        ("limit: raw consume (records/s)", f"{result.limit_consume_records_per_s:,.0f}"),
        ("plain Spark job (rides/s)", f"{result.plain_spark_rides_per_s:,.0f}"),
        ("ours: raw_rides via Dagster (rides/s)", f"{result.ours_rides_per_s:,.0f}"),
        ("ours / plain Spark", f"{result.ratios['ours/plain_spark']:.2f}"),
        ("ours / limit", f"{result.ratios['ours/limit']:.3f}"),
        ("freshness p50 / p95 (s)", f"{result.freshness_p50_seconds:.1f} / {result.freshness_p95_seconds:.1f} over {result.freshness_probes} probes"),
        ("overhead per run outside Spark work (s)", f"{result.overhead_seconds_per_run:.1f}"),
        ("peak driver JVM RSS (MiB)", f"{result.peak_driver_jvm_rss_mib:,.0f}"),
        ("peak Python RSS (MiB)", f"{result.peak_python_rss_mib:,.0f}"),
        ("machine", result.machine),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for item in result.not_measured:
        print(f"note: {item}")
