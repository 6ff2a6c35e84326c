"""`streaming-pipeline bench soak`: a month of live operation, compressed, measured against the commit count.

On a private embedded stack or the one in `--stack-dir` (Kafka, registry, the warm Spark Connect engine; a
DAGSTER_HOME of its own with the stack's dagster.yaml), the soak drives many small live runs: each round produces a
few rides and pickups and runs both live jobs as the offset sensors would (tagged with the sensor's name), with
micro-batches of one record (MAX_OFFSETS_PER_TRIGGER=1), so that every record is one bronze commit. Every
`sample_every` rounds it records:

- the offset sensor's tick time (the sensor evaluated in process, median of 3);
- the duration of a one-ride live run (one ride produced, the rides job run);
- the active data files and bytes of every table (delta-rs, from the table's snapshot);
- the time of `select count(*) from raw_rides` on the engine (median of 3);
- the bytes in DAGSTER_HOME and the runs it holds;
- the files in raw_rides' `_delta_log` (what Delta-Spark lists on every snapshot update);
- the resident memory (RSS) of the Spark Connect server.

Every `maintain_every` rounds the maintenance job runs (the daily schedule, compressed), and so does the run
retention, with its clock moved forward so that it keeps the runs of the last `keep_runs_minutes` minutes (its
7 days, compressed). The figures go to a table on stdout, a JSON file and a chart (PNG).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from streaming_pipeline.components.kafka_delta_source.sensors import live_job_names
from streaming_pipeline.devstack.bench.common import (
    bench_stack,
    bench_stage,
    engine_description,
    machine_description,
    print_rows,
    process_memory_bytes,
    say,
    write_json,
)
from streaming_pipeline.devstack.errors import BenchError
from streaming_pipeline.devstack.producer import produce, rows_from_records
from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_records
from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline.lakehouse.tables import RAW_RIDES, RIDES
from streaming_pipeline.resources.from_settings import resolved

#: Goals of the soak: (figure, the largest allowed ratio of its last tenth to its first tenth).
RATIO_GOALS = {"sensor_tick_seconds": 1.2, "one_ride_run_seconds": 1.2, "count_seconds": 1.5}


@dataclass
class SoakSample:
    round: int
    elapsed_seconds: float
    bronze_commits: dict[str, int]
    sensor_tick_seconds: float
    one_ride_run_seconds: float
    count_seconds: float
    dagster_home_bytes: int
    runs_kept: int
    active_files: dict[str, int]
    table_bytes: dict[str, int]
    log_files: int = 0
    engine_rss_bytes: int = 0


@dataclass
class MaintenancePass:
    round: int
    bronze_commits: int
    files_after: dict[str, int]
    bytes_after: dict[str, int]
    runs_deleted: int
    seconds: float


@dataclass
class SoakResult:
    machine: str
    engine: str = ""
    rounds: int = 0
    records_per_round: int = 0
    samples: list[SoakSample] = field(default_factory=list)
    maintenance: list[MaintenancePass] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    goals_met: dict[str, bool] = field(default_factory=dict)
    chart: str = ""


def _median_seconds(action: Any, times: int = 3) -> float:
    timings = []
    for _ in range(times):
        started = time.monotonic()
        action()
        timings.append(time.monotonic() - started)
    return statistics.median(timings)


def table_files(path: Path) -> tuple[int, int]:
    """(active data files, their bytes) of the Delta table at `path`, from its snapshot; (0, 0) without a table."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    except TableNotFoundError:
        return 0, 0
    return actions.num_rows, int(sum(actions.column("size_bytes").to_pylist()))


def files_goal(files: int, size_bytes: int) -> int:
    """The most active files a table of `size_bytes` may keep after maintenance: 2 per 100 MB, plus 10."""
    return int(2 * size_bytes / 100e6) + 10


def _bronze_commits(lakehouse: Path) -> dict[str, int]:
    """Micro-batches committed so far per stream source's bronze table: its bronze writer's txnVersion + 1 (batch ids
    from 0). The zones' table topic, loaded once at the start, is not soaked."""
    from streaming_pipeline.lakehouse.bronze.offsets import bronze_app_prefix
    from streaming_pipeline.lakehouse.engine.delta_log import transactions

    found = {}
    for source in project_sources():
        if source.is_table_topic:
            continue
        prefix = bronze_app_prefix(source.bronze_table)
        txns = [t for t in transactions(str(lakehouse / source.bronze_table)).values() if t.app_id.startswith(prefix)]
        found[source.bronze_table] = sum(t.version + 1 for t in txns)
    return found


def _ratio(samples: list[SoakSample], figure: str) -> float:
    """The median of `figure` over the last tenth of the samples over its median over the first tenth."""
    tenth = max(1, len(samples) // 10)
    first = statistics.median(getattr(s, figure) for s in samples[:tenth])
    last = statistics.median(getattr(s, figure) for s in samples[-tenth:])
    return last / max(first, 1e-9)


class _Soak:
    """The stack, the definitions and the instance one soak works with."""

    def __init__(self, stack: Any, work: Path) -> None:
        from streaming_pipeline.definitions import build_definitions
        from streaming_pipeline.lakehouse.engine.spark import connect_session

        self.lakehouse = work / "lakehouse"
        env = {**stack.env(), "LAKEHOUSE_DIR": str(self.lakehouse)}
        self.defs = build_definitions(PipelineSettings.from_env({**env, "MAX_OFFSETS_PER_TRIGGER": "1"}))
        assert self.defs.resources is not None
        self.resources = self.defs.resources
        self.dagster_home = Path(stack.dagster_home)
        self.engine_pid = stack.spark_pid
        self.instance = dg.DagsterInstance.from_config(str(self.dagster_home))
        self.spark = connect_session(stack.spark_remote)
        self.registry = resolved(self.resources["schema_registry"]).get_client()
        self.seed = 0
        # The zone lookup, which the enrichment reads: to its table topic, and into its table.
        from streaming_pipeline.devstack.producer import produce_zone_lookup
        from streaming_pipeline.devstack.project import QUIET_RUN_CONFIG

        if produce_zone_lookup(resolved(self.resources["kafka"]), self.registry).failed:
            raise BenchError("producing the taxi zones failed")
        # In micro-batches of the default size: one record each is for the streams the soak measures (265 MERGEs).
        zones = build_definitions(PipelineSettings.from_env(env)).resolve_assets_def("taxi_zones")
        loaded = dg.materialize([zones], instance=self.instance, run_config=QUIET_RUN_CONFIG)  # resources bound
        if not loaded.success:
            raise BenchError("loading taxi_zones failed")

    def produce(self, topic_source: Any, count: int) -> None:
        self.seed += 1
        records = synthetic_records(topic_source, count, SyntheticOptions(seed=self.seed))
        produce(
            resolved(self.resources["kafka"]), self.registry, topic_source.topic, rows_from_records(records), acks="1"
        )

    def run_live(self, source: Any) -> float:
        """Run the source's live job as its offset sensor would; its seconds."""
        from streaming_pipeline.devstack.project import QUIET_RUN_CONFIG

        job = self.defs.resolve_job_def(live_job_names(dg.AssetKey(source.bronze_table))[0])
        started = time.monotonic()
        result = job.execute_in_process(
            instance=self.instance,
            run_config=QUIET_RUN_CONFIG,
            tags={"dagster/sensor_name": f"{source.bronze_table}_offset_sensor"},
            raise_on_error=False,
        )
        if not result.success:
            raise BenchError(f"the live run {result.run_id} of {source.bronze_table} failed; see DAGSTER_HOME")
        return time.monotonic() - started

    def sensor_tick(self) -> float:
        from streaming_pipeline.components.kafka_delta_source.sensors import build_offset_sensor, live_job
        from streaming_pipeline.lakehouse.settings import SensorSettings

        key = dg.AssetKey(RIDES.bronze_table)
        sensor = build_offset_sensor(key, RIDES.topic, live_job(key), SensorSettings(), [RIDES.bronze_table])
        context = dg.build_sensor_context(
            instance=self.instance,
            resources={"kafka": self.resources["kafka"], "lakehouse": self.resources["lakehouse"]},
            definitions=self.defs,
        )
        return _median_seconds(lambda: sensor(context))

    def count_seconds(self) -> float:
        path = self.lakehouse / RAW_RIDES.name
        return _median_seconds(lambda: self.spark.sql(f"select count(*) from delta.`{path}`").collect())

    def sample(self, round_number: int, started: float) -> SoakSample:
        from streaming_pipeline.devstack.dagster_storage import dagster_home_bytes

        commits = _bronze_commits(self.lakehouse)
        tick = self.sensor_tick()
        self.produce(RIDES, 1)
        one_ride = self.run_live(RIDES)
        files = {p.name: table_files(p) for p in sorted(self.lakehouse.iterdir()) if (p / "_delta_log").is_dir()}
        return SoakSample(
            round=round_number,
            elapsed_seconds=round(time.monotonic() - started, 1),
            bronze_commits=commits,
            sensor_tick_seconds=tick,
            one_ride_run_seconds=one_ride,
            count_seconds=self.count_seconds(),
            dagster_home_bytes=dagster_home_bytes(self.dagster_home),
            runs_kept=self.instance.get_runs_count(),
            active_files={name: f for name, (f, _) in files.items()},
            table_bytes={name: b for name, (_, b) in files.items()},
            log_files=sum(1 for _ in (self.lakehouse / RAW_RIDES.name / "_delta_log").iterdir()),
            engine_rss_bytes=process_memory_bytes(self.engine_pid, "VmRSS"),
        )

    def maintain(self, round_number: int, keep_runs_minutes: float) -> MaintenancePass:
        from streaming_pipeline.defs.run_retention import delete_expired_runs
        from streaming_pipeline.devstack.project import QUIET_RUN_CONFIG
        from streaming_pipeline.lakehouse.settings import RunRetentionSettings

        started = time.monotonic()
        job = self.defs.resolve_job_def("table_maintenance_job")
        if not job.execute_in_process(instance=self.instance, run_config=QUIET_RUN_CONFIG).success:
            raise BenchError("the maintenance run failed; see DAGSTER_HOME")
        policy = RunRetentionSettings()
        # The retention's clock moved forward: the runs older than keep_runs_minutes stand for runs older than its
        # retention in days.
        now = datetime.now(UTC) + timedelta(days=policy.run_retention_days) - timedelta(minutes=keep_runs_minutes)
        deleted = delete_expired_runs(self.instance, policy, now=now).total
        files = {p.name: table_files(p) for p in sorted(self.lakehouse.iterdir()) if (p / "_delta_log").is_dir()}
        return MaintenancePass(
            round=round_number,
            bronze_commits=_bronze_commits(self.lakehouse).get(RAW_RIDES.name, 0),
            files_after={name: f for name, (f, _) in files.items()},
            bytes_after={name: b for name, (_, b) in files.items()},
            runs_deleted=deleted,
            seconds=round(time.monotonic() - started, 1),
        )


def run_soak_bench(
    commits: int,
    json_path: Path | None,
    chart_path: Path | None,
    *,
    records_per_round: int = 20,
    sample_every: int = 5,
    maintain_every: int = 10,
    keep_runs_minutes: float = 15.0,
    stack_dir: Path | None = None,
) -> SoakResult:
    """Live rounds until every bronze table has at least `commits` micro-batch commits; see the module's docstring.

    Args:
        commits: micro-batch commits per bronze table (`--commits`).
        json_path: where to write every figure as JSON, after each sample too (`--json`); None for none.
        chart_path: the chart (PNG) to draw (`--chart`); None for none.
        records_per_round: records per topic and live run, one commit each (`--records-per-round`).
        sample_every: rounds between samples (`--sample-every`).
        maintain_every: rounds between maintenance passes (`--maintain-every`).
        keep_runs_minutes: the runs the run retention keeps, in minutes (its 7 days, compressed).
        stack_dir: the embedded stack to measure on (`--stack-dir`); None for a private one.

    Returns:
        The samples, the maintenance passes, and the ratios of each figure's last tenth to its first.
    """
    if commits < 1 or records_per_round < 1 or sample_every < 1 or maintain_every < 1:
        raise BenchError("--commits, --records-per-round, --sample-every and --maintain-every must be positive")
    result = SoakResult(machine=machine_description(), records_per_round=records_per_round)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp, bench_stack(Path(tmp), stack_dir) as stack:
        assert stack.spark_remote and stack.dagster_home
        soak = _Soak(stack, Path(tmp))
        result.engine = engine_description(soak.spark)
        started = time.monotonic()
        round_number, sampled = 0, False
        while min(_bronze_commits(soak.lakehouse).values(), default=0) < commits:
            round_number += 1
            with bench_stage(f"round {round_number}: {records_per_round} records per topic, both live jobs"):
                for source in project_sources():
                    if not source.is_table_topic:  # the zones were loaded once, at the start: not soaked
                        soak.produce(source, records_per_round)
                        soak.run_live(source)
            sampled = round_number == 1 or round_number % sample_every == 0
            if sampled:
                sample = soak.sample(round_number, started)
                result.samples.append(sample)
                say(
                    f"round {round_number}: {sample.bronze_commits} commits, tick {sample.sensor_tick_seconds:.3f} s, "
                    f"one-ride run {sample.one_ride_run_seconds:.1f} s, count {sample.count_seconds:.2f} s, "
                    f"raw_rides files {sample.active_files.get(RAW_RIDES.name)}, "
                    f"DAGSTER_HOME {sample.dagster_home_bytes / 2**20:.1f} MiB, "
                    f"raw_rides _delta_log {sample.log_files} files, "
                    f"engine RSS {sample.engine_rss_bytes / 2**20:,.0f} MiB"
                )
                write_json(json_path, result)  # what a soak stopped early has measured is kept
            if round_number % maintain_every == 0:
                with bench_stage(f"round {round_number}: maintenance and run retention"):
                    done = soak.maintain(round_number, keep_runs_minutes)
                result.maintenance.append(done)
                say(f"round {round_number}: maintenance: files {done.files_after}, {done.runs_deleted} run(s) deleted")
        if not sampled:
            result.samples.append(soak.sample(round_number, started))
        result.rounds = round_number
        soak.spark.stop()
    _summarize(result)
    if chart_path is not None:
        chart_path.parent.mkdir(parents=True, exist_ok=True)
        chart_path.write_bytes(soak_chart_png(result))
        result.chart = str(chart_path)
    _print_soak(result)
    write_json(json_path, result)
    return result


def _summarize(result: SoakResult) -> None:
    if len(result.samples) < 2:
        return
    for figure, goal in RATIO_GOALS.items():
        result.ratios[figure] = round(_ratio(result.samples, figure), 3)
        result.goals_met[figure] = result.ratios[figure] <= goal
    result.goals_met["active_files"] = all(
        files <= files_goal(files, done.bytes_after[name])
        for done in result.maintenance
        for name, files in done.files_after.items()
    )


def _print_soak(result: SoakResult) -> None:
    last = result.samples[-1]
    rows = [
        ("engine", result.engine),
        ("rounds (live runs per topic)", f"{result.rounds:,}"),
        ("bronze commits at the end", ", ".join(f"{k} {v:,}" for k, v in last.bronze_commits.items())),
    ]
    for figure, goal in RATIO_GOALS.items():
        if figure in result.ratios:
            met = "met" if result.goals_met[figure] else "NOT met"
            rows.append((f"{figure}: last / first tenth", f"{result.ratios[figure]:.2f} (goal <= {goal}: {met})"))
    if result.maintenance:
        worst = max(
            (files - files_goal(files, done.bytes_after[name]), name, files)
            for done in result.maintenance
            for name, files in done.files_after.items()
        )
        met = "met" if result.goals_met.get("active_files") else "NOT met"
        rows.append(("most active files after maintenance", f"{worst[2]} ({worst[1]}; goal: {met})"))
    rows += [
        ("DAGSTER_HOME at the end (MiB)", f"{last.dagster_home_bytes / 2**20:.1f}"),
        ("runs kept at the end", f"{last.runs_kept:,}"),
        ("machine", result.machine),
    ]
    tenth = max(1, len(result.samples) // 10)
    print_rows(rows, [f"{len(result.samples)} samples; first and last tenth: medians of {tenth} sample(s) each"])


def soak_chart_png(result: SoakResult) -> bytes:
    """Seven panels against raw_rides' commit count: tick time, one-ride run, count(*), active files, DAGSTER_HOME,
    the files in raw_rides' _delta_log and the engine's RSS."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    commits = [s.bronze_commits.get(RAW_RIDES.name, 0) for s in result.samples]
    figure, axes = plt.subplots(7, 1, figsize=(9, 17), dpi=100, sharex=True)
    panels = [
        ("offset sensor tick (s)", [s.sensor_tick_seconds for s in result.samples]),
        ("one-ride live run (s)", [s.one_ride_run_seconds for s in result.samples]),
        ("select count(*) from raw_rides (s)", [s.count_seconds for s in result.samples]),
    ]
    for axis, (title, values) in zip(axes[:3], panels, strict=True):
        axis.plot(commits, values, marker="o", markersize=3)
        axis.set_ylabel(title, fontsize=8)
        axis.set_ylim(bottom=0)
    tables = sorted({name for s in result.samples for name in s.active_files})
    for name in tables:
        axes[3].plot(commits, [s.active_files.get(name, 0) for s in result.samples], label=name, linewidth=1)
    axes[3].set_ylabel("active data files per table", fontsize=8)
    axes[3].legend(fontsize=6, ncol=3)
    axes[4].plot(commits, [s.dagster_home_bytes / 2**20 for s in result.samples], marker="o", markersize=3)
    axes[4].set_ylabel("DAGSTER_HOME (MiB)", fontsize=8)
    axes[4].set_ylim(bottom=0)
    axes[5].plot(commits, [s.log_files for s in result.samples], marker="o", markersize=3)
    axes[5].set_ylabel("files in raw_rides/_delta_log", fontsize=8)
    axes[5].set_ylim(bottom=0)
    axes[6].plot(commits, [s.engine_rss_bytes / 2**20 for s in result.samples], marker="o", markersize=3)
    axes[6].set_ylabel("Spark Connect server RSS (MiB)", fontsize=8)
    axes[6].set_ylim(bottom=0)
    axes[6].set_xlabel("raw_rides micro-batch commits")
    for done in result.maintenance:
        for axis in axes:
            axis.axvline(done.bronze_commits, color="grey", linewidth=0.5, linestyle=":")
    figure.suptitle(f"Soak: {result.rounds} live rounds; dotted: maintenance + run retention\n{result.engine}")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
