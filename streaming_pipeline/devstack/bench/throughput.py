"""`streaming-pipeline bench throughput` (`bench` alone): the rides per second of raw_rides through Dagster, beside
a plain Spark job on the same records and the raw consume rate, and the memory of the engine and of this process."""

from __future__ import annotations

import itertools
import resource
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import dagster as dg

from streaming_pipeline.devstack.bench.common import (
    PHASE_LABELS,
    bench_stack,
    bench_stage,
    bronze_handler_steps,
    engine_description,
    machine_description,
    print_rows,
    process_memory_bytes,
    say,
    write_json,
)
from streaming_pipeline.devstack.engine_events import PHASES, progress_reports, query_breakdowns
from streaming_pipeline.devstack.errors import BenchError
from streaming_pipeline.devstack.producer import produce, rows_from_records
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.lakehouse.progress import Progress
from streaming_pipeline.lakehouse.schemas import load_schema
from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline.lakehouse.tables import RAW_RIDES, RIDES, RIDES_TOPIC


def _peak_rss_mib(pid: int | None) -> float:
    """VmHWM (peak resident set) of a process, from /proc."""
    return process_memory_bytes(pid, "VmHWM") / 2**20


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
    # Where each job's time goes, per round: the seconds of each phase Spark reports (`durationMs`), summed over the
    # run's micro-batches, and `micro_batches`, from the engine's event log (a private stack's; none with
    # --stack-dir); and ours' handler steps before its append (ms, from its commits' markers).
    plain_spark_phases: list[dict[str, float]] = field(default_factory=list)
    ours_phases: list[dict[str, float]] = field(default_factory=list)
    ours_handler_ms: list[dict[str, float]] = field(default_factory=list)
    # Their medians over the rounds, per job ("plain_spark", "ours"), with `outside_batches`: the run's seconds
    # outside its micro-batches (the query's start and stop; for ours also the Dagster run and the foreachBatch
    # handler's Python worker).
    phase_medians: dict[str, dict[str, float]] = field(default_factory=dict)
    handler_ms_medians: dict[str, float] = field(default_factory=dict)

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
        for job, runs, totals in (
            ("plain_spark", self.plain_spark_phases, self.plain_spark_seconds),
            ("ours", self.ours_phases, self.ours_seconds),
        ):
            if runs:
                with_outside = [
                    {**run, "outside_batches": max(0.0, total - run.get("triggerExecution", 0.0))}
                    for run, total in zip(runs, totals, strict=True)
                ]
                self.phase_medians[job] = _medians(with_outside)
        if self.ours_handler_ms:
            self.handler_ms_medians = _medians(self.ours_handler_ms)


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of each key over `runs` (a key a run lacks counts as 0 there)."""
    keys = dict.fromkeys(key for run in runs for key in run)
    return {key: round(statistics.median(run.get(key, 0.0) for run in runs), 3) for key in keys}


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


#: The plain job's streaming query name, by which its micro-batches are found in the engine's event log.
PLAIN_SPARK_QUERY = "plain_spark"


def _job_phases(reports: list[dict[str, object]], query: str, window: tuple[float, float]) -> dict[str, float]:
    """The seconds of each phase of `query`'s micro-batches that started in `window` (epoch seconds), summed, and
    `micro_batches`; {} when the event log has none (a stack without one)."""
    breakdown = query_breakdowns(reports, *window).get(query)
    if breakdown is None:
        return {}
    return {**breakdown.phase_seconds, "micro_batches": float(breakdown.micro_batches)}


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
        .queryName(PLAIN_SPARK_QUERY)
        .option("checkpointLocation", str(out / "_chk"))
        .trigger(availableNow=True)
        .start(str(out / "table"))
    )
    query.awaitTermination()
    return time.monotonic() - started


def _materialize_raw_rides(resources: Mapping[str, Any]) -> tuple[float, int, float]:
    """(seconds, rows written, Spark trigger seconds) of one raw_rides materialization through Dagster."""
    from streaming_pipeline.components.kafka_delta_source.assets import bronze_asset
    from streaming_pipeline.devstack.project import QUIET_RUN_CONFIG
    from streaming_pipeline.lakehouse.settings import LiveSettings

    raw_rides = bronze_asset(RIDES, LiveSettings())
    started = time.monotonic()
    run = dg.materialize([raw_rides], resources=resources, run_config=QUIET_RUN_CONFIG)
    seconds = time.monotonic() - started
    metadata = run.get_asset_materialization_events()[0].materialization.metadata
    rows_written = cast(int, metadata["rows_written"].value)
    streaming_seconds = cast(float, metadata["streaming_seconds"].value)
    return seconds, int(rows_written), float(streaming_seconds)


def run_bench(
    sizes: list[int], json_path: Path | None, rounds: int = 2, stack_dir: Path | None = None
) -> ThroughputResult:
    """Throughput at each size, on one topic that grows from size to size: at every size the limit, then `rounds`
    rounds of both jobs from fresh checkpoints, alternating which goes first; printed as a table.

    Args:
        sizes: the sizes to measure, in synthetic rides (`--rides`).
        json_path: where to write every figure as JSON (`--json`); None for none.
        rounds: timed rounds per job and size (`--rounds`).
        stack_dir: the embedded stack to measure on (`--stack-dir`); None for a private one.

    Returns:
        The figures of every size.
    """
    from streaming_pipeline.lakehouse.engine.spark import connect_session
    from streaming_pipeline.resources.from_settings import build_resources, resolved

    sizes = sorted(set(sizes))
    if not sizes or sizes[0] < 1 or rounds < 1:
        raise BenchError("--rides takes positive sizes, and --rounds at least 1")
    result = ThroughputResult(sizes=sizes, rounds=rounds, machine=machine_description())
    with (
        tempfile.TemporaryDirectory(prefix="bench-") as tmp,
        bench_stack(Path(tmp), stack_dir, event_log=Path(tmp) / "spark-events") as stack,
    ):
        assert stack.spark_remote
        work, events = Path(tmp), Path(tmp) / "spark-events"

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
                resolved(resources["kafka"]),
                resolved(resources["schema_registry"]).get_client(),
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
            windows: dict[str, list[tuple[float, float]]] = {"plain": [], "ours": []}
            for round_number in range(1, rounds + 1):
                jobs = ["plain", "ours"] if round_number % 2 else ["ours", "plain"]
                for job in jobs:
                    name = f"{size}-{round_number}-{job}"
                    began = time.time()
                    if job == "plain":
                        say(f"{size:,} rides, round {round_number}: plain Spark, Kafka -> from_avro -> Delta")
                        with bench_stage(f"{size:,} rides, round {round_number}: plain Spark"):
                            seconds = _plain_spark(spark, stack.bootstrap_servers, work / name)
                        figures.plain_spark_seconds.append(seconds)
                        windows[job].append((began, time.time()))
                        continue
                    say(f"{size:,} rides, round {round_number}: ours, raw_rides through Dagster, fresh checkpoint")
                    with bench_stage(f"{size:,} rides, round {round_number}: ours"):
                        run_resources = resources_in(name)
                        seconds, written, streaming = _materialize_raw_rides(run_resources)
                    windows[job].append((began, time.time()))
                    if written != size:
                        raise BenchError(f"raw_rides wrote {written} rows, expected {size}")
                    figures.ours_seconds.append(seconds)
                    figures.ours_streaming_seconds.append(streaming)
                    raw_rides = run_resources["lakehouse"].table_path(RAW_RIDES.name)
                    figures.ours_handler_ms.append(bronze_handler_steps(raw_rides, None)[0])
            # Spark flushes its event log at every progress report: it holds this size's micro-batches by now.
            reports = progress_reports(events) if events.is_dir() else []
            figures.plain_spark_phases = [_job_phases(reports, PLAIN_SPARK_QUERY, w) for w in windows["plain"]]
            figures.ours_phases = [_job_phases(reports, RAW_RIDES.name, w) for w in windows["ours"]]
            if not all(figures.plain_spark_phases + figures.ours_phases):
                figures.plain_spark_phases, figures.ours_phases = [], []
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
        for job, label in (("plain_spark", "plain Spark"), ("ours", "ours")):
            if job in figures.phase_medians:
                rows.append((f"{at}: {label}, seconds per run", _phase_text(figures.phase_medians[job])))
        if figures.handler_ms_medians:
            steps = ", ".join(f"{step} {ms:,.0f}" for step, ms in figures.handler_ms_medians.items())
            rows.append((f"{at}: ours, handler before its append (ms)", steps))
    rows += [
        ("peak Spark Connect server RSS (MiB)", f"{result.peak_engine_rss_mib:,.0f}"),
        ("peak Python RSS (MiB)", f"{result.peak_python_rss_mib:,.0f}"),
        ("machine", result.machine),
    ]
    print_rows(rows, [f"medians of {result.rounds} rounds per job, the jobs' order alternating by round"])


def _phase_text(phases: dict[str, float]) -> str:
    """`phase_medians` of a job on one line: its micro-batches, their seconds in all and per phase, and outside."""
    short = {**PHASE_LABELS, "triggerExecution": "batches"}
    parts = [f"{short.get(p, p)} {phases[p]:,.2f}" for p in PHASES if phases.get(p)]
    batches = int(phases.get("micro_batches", 0))
    outside = phases["outside_batches"]
    return f"{batches} micro-batch{'es' if batches != 1 else ''}: {', '.join(parts)}; outside them {outside:,.2f}"
