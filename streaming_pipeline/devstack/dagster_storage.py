"""What Dagster's own storage keeps under live mode, measured on a temporary DAGSTER_HOME (docs/dagster-storage.md).

`dagster_home_bytes` is the size of a DAGSTER_HOME on disk (the soak benchmark uses it too). `measure` builds a
temporary DAGSTER_HOME with the stack's dagster.yaml and plays live mode into it, cheaply and without Spark:

- `runs` finished runs of a job shaped like `raw_rides_downstream_job` (the same asset keys and dependencies, one step
  per asset, executed in process on the instance), each materializing its assets with metadata of the size the
  real assets write (counts, offsets, a 10-row preview, the windows' chart), tagged as the offset sensor tags them;
- after each run, the automation sensor's evaluation of the code location's real automation conditions, stored as
  its daemon stores it (only the evaluations that changed);
- the sensor ticks of those runs' time (two offset sensors every 5 s, the automation sensor every 10 s), and the
  consumer-lag observations the offset sensor reports when the lag changes.

It measures the bytes each part adds, runs the retention job's pass (`defs/run_retention.py`) as it would run
31 days later, applies the tick retention of dagster.yaml as the daemon does, measures again, then plays the same
number of runs once more, to show that the space freed is reused. `python -m streaming_pipeline.devstack.dagster_storage
--runs 200` prints the figures and their extrapolation to a day and a month of live mode.
"""

import argparse
import hashlib
import json
import logging
import platform
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickData, TickStatus

from streaming_pipeline.defs.run_retention import RetentionReport, delete_expired_runs
from streaming_pipeline.devstack.embedded.dagster_home import write_dagster_yaml
from streaming_pipeline.lakehouse.settings import RunRetentionSettings

LIVE_JOB = "raw_rides_downstream_job"
BRONZE = "raw_rides"
RIDES_SENSOR = "raw_rides_offset_sensor"
PICKUPS_SENSOR = "raw_pickup_locations_offset_sensor"
AUTOMATION_SENSOR = "default_automation_condition_sensor"
#: Live mode's pace (docs/live-mode.md): a run every ~25 s; the daemon ticks each sensor at most every 5 s, the
#: automation sensor every 10 s (5 times OFFSET_SENSOR_INTERVAL_SECONDS).
RUNS_PER_DAY = 3_500
OFFSET_SENSOR_TICKS_PER_DAY = 2 * 86_400 // 5
AUTOMATION_TICKS_PER_DAY = 86_400 // 10
DAY = 86_400.0


# ------------------------------------------------------------------------------------------------ sizes on disk


def dagster_home_bytes(path: Path | str) -> int:
    """Bytes of every file under `path` (SQLite's -wal and -shm files included), as on disk; symlinks are not
    followed. 0 when `path` does not exist."""
    root = Path(path)
    if not root.exists():
        return 0
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def sqlite_live_bytes(path: Path) -> int:
    """Bytes of a SQLite file that hold data: its pages less the free ones. SQLite reuses freed pages but never
    shrinks the file by itself (without VACUUM), so after deletes the file keeps its size and this goes down."""
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        free = connection.execute("PRAGMA freelist_count").fetchone()[0]
    finally:
        connection.close()
    return int(page_size * (pages - free))


#: dagster.yaml's block for Dagster's consolidated SQLite event log (one database instead of one per run).
CONSOLIDATED_EVENT_LOG_YAML = """\
event_log_storage:
  module: dagster.core.storage.event_log
  class: ConsolidatedSqliteEventLogStorage
  config:
    base_dir: {base_dir}
"""


def _part(relative: Path) -> str:
    parts = relative.parts
    if parts[:1] == ("schedules",):
        return "ticks and evaluations"
    if parts[:1] == ("storage",):
        return "logs"
    if parts[:2] == ("history", "runs") and len(parts) == 3:
        if parts[2].startswith("index.db"):
            return "event-log index"
        if parts[2].startswith(".db"):
            return "runless events"
        return "per-run event logs"
    if parts[:2] == ("history", "runs.db") or relative.name.startswith("runs.db"):
        return "run storage"
    if relative.name.startswith("event_log.db"):
        return "consolidated event log"
    return "other"


@dataclass(frozen=True)
class Snapshot:
    """A DAGSTER_HOME's bytes on disk and live (SQLite pages in use), by part, and its file count."""

    disk: dict[str, int]
    live: dict[str, int]
    files: int

    @property
    def disk_total(self) -> int:
        return sum(self.disk.values())

    @property
    def live_total(self) -> int:
        return sum(self.live.values())


def snapshot(path: Path) -> Snapshot:
    disk: dict[str, int] = {}
    live: dict[str, int] = {}
    files = 0
    for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
        part = _part(file.relative_to(path))
        size = file.lstat().st_size
        files += 1
        disk[part] = disk.get(part, 0) + size
        is_database = file.suffix == ".db" and size > 0
        live[part] = live.get(part, 0) + (sqlite_live_bytes(file) if is_database else size)
    return Snapshot(disk, live, files)


# ------------------------------------------------------------------------------------------------ synthetic live mode


def _markdown_preview(columns: Sequence[str], rows: int, rng: random.Random) -> str:
    """A 10-row preview like `asset_metadata.delta_table_metadata`'s (a pandas markdown table)."""
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("-" * (len(c) + 2) for c in columns) + "|"
    body = [
        "| "
        + " | ".join(f"{rng.choice(('2020-07-01 00:00:04', 'N', 'rides'))}{rng.randint(0, 99_999)}" for _ in columns)
        + " |"
        for _ in range(rows)
    ]
    return "\n".join([header, rule, *body])


def _metadata(key: dg.AssetKey, columns: Sequence[str], run: int, rng: random.Random) -> dict[str, Any]:
    """Metadata of the size the real asset writes (about 2 to 9 KB, the windows' with its chart about 28 KB)."""
    name = key.to_user_string()
    metadata: dict[str, Any] = {
        "rows_read": dg.MetadataValue.int(rng.randint(1, 15_000)),
        "micro_batches": dg.MetadataValue.int(1),
        "table_path": dg.MetadataValue.path(f"/srv/lakehouse/{name}"),
        "delta_version": dg.MetadataValue.int(run),
        "dagster/row_count": dg.MetadataValue.int(run * 12_500),
        "preview": dg.MetadataValue.md(_markdown_preview(columns, 10, rng)),
    }
    if name == BRONZE:
        metadata["kafka_offsets"] = dg.MetadataValue.json({"rides[0]": {"from": run, "until": run + 7}})
        metadata["consumed_offsets"] = dg.MetadataValue.json({"0": run + 7, "1": run + 5})
        metadata["streaming_seconds"] = dg.MetadataValue.float(round(rng.uniform(1, 3), 3))
    if name == "ride_window_aggregates":
        # The chart of the last windows, a PNG inlined as markdown (gold.charts.png_markdown).
        png = "".join(
            rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(16_000)
        )
        metadata["chart"] = dg.MetadataValue.md(f"![windows](data:image/png;base64,{png})")
        metadata["watermark"] = dg.MetadataValue.text("2020-07-01 03:10:00")
    return metadata


def _live_job_assets(graph: Any, keys: set[dg.AssetKey]) -> list[dg.AssetsDefinition]:
    """One asset per key of the live job, with its dependencies among them, writing realistic metadata."""
    from streaming_pipeline.devstack.project import project_tables

    columns = {name: table.column_names for name, table in project_tables().items()}
    rng = random.Random(7)

    def build(key: dg.AssetKey) -> dg.AssetsDefinition:
        deps = sorted(parent for parent in graph.get(key).parent_keys if parent in keys)

        @dg.asset(key=key, deps=deps)
        def synthetic(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
            run = int(context.run.tags.get("synthetic/run", "0"))
            context.log.info(f"{key.to_user_string()}: {rng.randint(1, 9_999)} rows in 1 micro-batch(es)")
            return dg.MaterializeResult(metadata=_metadata(key, columns.get(key.to_user_string(), ["value"]), run, rng))

        return synthetic

    return [build(key) for key in sorted(keys)]


class _Player:
    """Plays live mode into an instance: runs, the automation sensor's evaluations, ticks, lag observations."""

    def __init__(self, instance: dg.DagsterInstance, *, automation_ticks_per_run: int = 2) -> None:
        from streaming_pipeline.definitions import build_definitions

        self.instance = instance
        self.automation_ticks_per_run = automation_ticks_per_run
        self.runs = 0
        self.evaluations = 0
        self._cursor: Any = None
        self.defs = build_definitions()
        graph = self.defs.resolve_asset_graph()
        everything = set(graph.get_all_asset_keys())
        live = dg.AssetSelection.assets(BRONZE).downstream().without_checks().resolve(graph)
        assets = _live_job_assets(graph, everything)
        self.jobs = dg.Definitions(
            assets=assets,
            jobs=[
                dg.define_asset_job(LIVE_JOB, selection=dg.AssetSelection.assets(*live)),
                dg.define_asset_job("everything", selection=dg.AssetSelection.assets(*everything)),
            ],
            executor=dg.in_process_executor,
        )
        self._origins = {
            name: hashlib.sha1(name.encode()).hexdigest() for name in (RIDES_SENSOR, PICKUPS_SENSOR, AUTOMATION_SENSOR)
        }

    def setup(self) -> None:
        """Every table once, by hand (the stack after the demo): no asset is missing for the automation conditions."""
        self.jobs.resolve_job_def("everything").execute_in_process(instance=self.instance)
        self._evaluate()

    def run(self) -> str:
        self.runs += 1
        tags = {
            "dagster/sensor_name": RIDES_SENSOR,
            "source_topic": "rides",
            "dagster/run_key": f"rides@0:{self.runs * 7},1:{self.runs * 5}#{self.runs}",
            "synthetic/run": str(self.runs),
        }
        result = self.jobs.resolve_job_def(LIVE_JOB).execute_in_process(instance=self.instance, tags=tags)
        for _ in range(self.automation_ticks_per_run):
            self._evaluate()
        return result.run_id

    def _evaluate(self) -> None:
        """One tick of the automation sensor, storing the evaluations that changed, as its daemon does
        (`AutomationTickEvaluationContext._get_updated_evaluations`)."""
        result = dg.evaluate_automation_conditions(defs=self.defs, instance=self.instance, cursor=self._cursor)
        changed = []
        for item in result.results:
            previous = self._cursor.get_previous_condition_cursor(item.key) if self._cursor else None
            if previous is None or previous.result_value_hash != item.value_hash or not item.true_subset.is_empty:
                changed.append(item.serializable_evaluation.with_run_ids(set()))
        self._cursor = result.cursor
        storage = self.instance.schedule_storage
        if changed and storage is not None:
            storage.add_auto_materialize_asset_evaluations(result.cursor.evaluation_id, changed)
            self.evaluations += len(changed)

    def ticks(self, count_by_sensor: dict[str, int], run_ids: Sequence[str]) -> int:
        """Sensor ticks like the daemon's: the rides sensor's skip reasons and one success per run, the pickups
        sensor's "no new records", the automation sensor's evaluations."""
        now = time.time()
        made = 0
        run_iter = iter(run_ids)
        for name, count in count_by_sensor.items():
            for i in range(count):
                status, skip, runs = TickStatus.SKIPPED, None, []
                if name == RIDES_SENSOR:
                    if i % 5 == 4 and (run_id := next(run_iter, None)):
                        status, runs = TickStatus.SUCCESS, [run_id]
                    else:
                        skip = f"rides: {i % 40 + 1} record(s) wait; a run on this checkpoint is in flight"
                elif name == PICKUPS_SENSOR:
                    skip = "pickup_locations: no new records"
                self.instance.create_tick(
                    TickData(
                        instigator_origin_id=self._origins[name],
                        instigator_name=name,
                        instigator_type=InstigatorType.SENSOR,
                        status=status,
                        timestamp=now,
                        end_timestamp=now + 0.2,
                        run_ids=runs,
                        run_keys=[f"rides@0:{i},1:{i}#{i}"] if runs else [],
                        skip_reason=skip,
                        cursor=json.dumps({"lag": i % 40, "requests": i}) if name != AUTOMATION_SENSOR else None,
                        selector_id=self._origins[name],
                        auto_materialize_evaluation_id=i if name == AUTOMATION_SENSOR else None,
                    )
                )
                made += 1
        return made

    def purge_ticks(self, now: datetime) -> None:
        """What the daemon does after each tick, with dagster.yaml's tick retention."""
        settings = self.instance.get_tick_retention_settings(InstigatorType.SENSOR)
        for origin in self._origins.values():
            for status, days in settings.items():
                if days > 0:
                    before = (now - timedelta(days=days)).timestamp()
                    self.instance.purge_ticks(origin, origin, before=before, tick_statuses=[status])

    def lag_observations(self, count: int) -> None:
        """The offset sensor's consumer-lag observation, reported when the lag changed (runless events)."""
        for i in range(count):
            self.instance.report_runless_asset_event(
                dg.AssetObservation(
                    asset_key=BRONZE,
                    metadata={
                        "consumer_lag": dg.MetadataValue.int(i % 400),
                        "consumer_lag_by_partition": dg.MetadataValue.json({"0": i % 200, "1": i % 200}),
                        "end_offsets": dg.MetadataValue.json({"0": 10_000 + i, "1": 10_000 + i}),
                    },
                )
            )


# ------------------------------------------------------------------------------------------------ the measurement


@dataclass
class StorageMeasurement:
    """Bytes per unit of live mode, measured, and what a retention pass left."""

    runs: int
    evaluations: int
    ticks: int
    observations: int
    #: bytes on disk per run: its run record, events (own file and index) and captured logs; per part too
    bytes_per_run: float
    bytes_per_run_by_part: dict[str, float]
    bytes_per_evaluation: float
    bytes_per_tick: float
    bytes_per_observation: float
    seconds_per_run: float
    baseline: Snapshot
    after_runs: Snapshot
    after_retention: Snapshot
    after_second_batch: Snapshot
    retention_seconds: float
    deleted: int
    event_log_files_removed: int
    platform: dict[str, str] = field(default_factory=dict)

    @property
    def evaluations_per_run(self) -> float:
        return self.evaluations / self.runs


def _delta(after: Snapshot, before: Snapshot, *parts: str) -> int:
    return sum(after.disk.get(p, 0) - before.disk.get(p, 0) for p in (parts or after.disk.keys()))


@contextmanager
def _temporary_home(root: Path | None = None, *, event_log: str = "sqlite") -> Iterator[Path]:
    """A DAGSTER_HOME with the stack's dagster.yaml; `event_log="consolidated"` adds Dagster's consolidated SQLite
    event log."""
    with tempfile.TemporaryDirectory(prefix="dagster-storage-", dir=root) as tmp:
        home = Path(tmp) / "dagster"
        path = write_dagster_yaml(home)
        if event_log == "consolidated":
            block = CONSOLIDATED_EVENT_LOG_YAML.format(base_dir=json.dumps(str(home / "history")))
            path.write_text(path.read_text() + block)
        elif event_log != "sqlite":
            raise ValueError(f"event_log={event_log!r}: 'sqlite' or 'consolidated'")
        yield home


def _platform() -> dict[str, str]:
    import os

    return {
        "python": platform.python_version(),
        "dagster": version("dagster"),
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cores": str(os.cpu_count()),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


def measure(
    runs: int = 200, *, home_root: Path | None = None, event_log: str = "sqlite", log: logging.Logger | None = None
) -> StorageMeasurement:
    """Play `runs` live runs into a temporary DAGSTER_HOME, measure, apply the retention, play them again."""
    say = log.info if log else (lambda message: None)
    ticks_per_run = {
        RIDES_SENSOR: round(OFFSET_SENSOR_TICKS_PER_DAY / 2 / RUNS_PER_DAY),
        PICKUPS_SENSOR: round(OFFSET_SENSOR_TICKS_PER_DAY / 2 / RUNS_PER_DAY),
        AUTOMATION_SENSOR: round(AUTOMATION_TICKS_PER_DAY / RUNS_PER_DAY),
    }
    with (
        _temporary_home(home_root, event_log=event_log) as home,
        dg.DagsterInstance.from_config(str(home)) as instance,
    ):
        player = _Player(instance)
        player.setup()
        baseline = snapshot(home)

        def batch() -> tuple[list[str], float, Snapshot, Snapshot, Snapshot, int]:
            started = time.monotonic()
            run_ids = []
            for i in range(runs):
                run_ids.append(player.run())
                if (i + 1) % 50 == 0:
                    say(f"{i + 1}/{runs} runs")
            elapsed = time.monotonic() - started
            after_runs = snapshot(home)
            made = player.ticks({name: n * runs for name, n in ticks_per_run.items()}, run_ids)
            after_ticks = snapshot(home)
            player.lag_observations(5 * runs)
            return run_ids, elapsed, after_runs, after_ticks, snapshot(home), made

        evaluations_before = player.evaluations
        _, elapsed, after_runs, after_ticks, after_observations, ticks = batch()
        evaluations = player.evaluations - evaluations_before
        # The schedules database holds the ticks and the automation evaluations: the runs' batch adds only the
        # evaluations to it; the ticks come after.
        run_parts = ("run storage", "event-log index", "per-run event logs", "consolidated event log", "logs")
        by_part = {part: _delta(after_runs, baseline, part) / runs for part in run_parts if part in after_runs.disk}
        later = datetime.now(UTC) + timedelta(days=31)
        started = time.monotonic()
        report: RetentionReport = delete_expired_runs(instance, RunRetentionSettings(), now=later)
        player.purge_ticks(later)
        retention_seconds = time.monotonic() - started
        after_retention = snapshot(home)
        say(report.summary())
        batch()
        after_second_batch = snapshot(home)
        return StorageMeasurement(
            runs=runs,
            evaluations=evaluations,
            ticks=ticks,
            observations=5 * runs,
            bytes_per_run=sum(by_part.values()),
            bytes_per_run_by_part=by_part,
            bytes_per_evaluation=_delta(after_runs, baseline, "ticks and evaluations") / max(evaluations, 1),
            bytes_per_tick=_delta(after_ticks, after_runs, "ticks and evaluations") / ticks,
            bytes_per_observation=_delta(after_observations, after_ticks) / (5 * runs),
            seconds_per_run=elapsed / runs,
            baseline=baseline,
            after_runs=after_observations,
            after_retention=after_retention,
            after_second_batch=after_second_batch,
            retention_seconds=retention_seconds,
            deleted=report.total,
            event_log_files_removed=report.event_log_files_removed,
            platform={**_platform(), "event log": event_log},
        )


# ------------------------------------------------------------------------------------------------ extrapolation


@dataclass(frozen=True)
class Extrapolation:
    """Bytes after `days` of live mode at `runs_per_day`, by part, with and without the retention."""

    days: int
    without: dict[str, float]
    with_retention: dict[str, float]


def extrapolate(
    m: StorageMeasurement,
    days: int,
    *,
    runs_per_day: int = RUNS_PER_DAY,
    policy: RunRetentionSettings | None = None,
    lag_observations_per_day: int = OFFSET_SENSOR_TICKS_PER_DAY // 2,
) -> Extrapolation:
    """Dagster's defaults keep runs forever, automation evaluations 30 days (`EVALUATIONS_TTL_DAYS`), skipped
    sensor ticks 7 days and other ticks forever. With the retention: runs `policy.run_retention_days` (all runs
    succeed here), evaluations as long, ticks as dagster.yaml says. Lag observations (runless events) are kept
    forever either way; one per rides-sensor tick is the upper bound (the lag changes at every tick)."""
    policy = policy or RunRetentionSettings()
    ticks_per_day = OFFSET_SENSOR_TICKS_PER_DAY + AUTOMATION_TICKS_PER_DAY
    success_ticks = runs_per_day + AUTOMATION_TICKS_PER_DAY / 10  # a success: a tick that requested a run
    skipped_ticks = ticks_per_day - success_ticks
    run_day = m.bytes_per_run * runs_per_day
    evaluation_day = m.bytes_per_evaluation * m.evaluations_per_run * runs_per_day
    observation_day = m.bytes_per_observation * lag_observations_per_day
    without = {
        "runs and event logs": run_day * days,
        "automation evaluations": evaluation_day * min(days, 30),
        "sensor ticks": m.bytes_per_tick * (skipped_ticks * min(days, 7) + success_ticks * days),
        "lag observations": observation_day * days,
    }
    keep = policy.run_retention_days
    with_retention = {
        "runs and event logs": run_day * min(days, keep),
        "automation evaluations": evaluation_day * min(days, keep),
        "sensor ticks": m.bytes_per_tick * (skipped_ticks * min(days, 1) + success_ticks * min(days, 7)),
        "lag observations": observation_day * days,
    }
    return Extrapolation(days, without, with_retention)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n < 1e9 else f"{n / 1e9:,.2f} GB"


def report_markdown(m: StorageMeasurement) -> str:
    lines = [
        f"Measured {m.platform.get('date')}: {m.runs} runs, Python {m.platform.get('python')}, dagster "
        f"{m.platform.get('dagster')}, {m.platform.get('system')}, {m.platform.get('cores')} cores, "
        f"{m.platform.get('event log')} event log.",
        "",
        "| per unit | bytes on disk |",
        "|---|---|",
        f"| a live run (run record, events, captured logs) | {m.bytes_per_run:,.0f} |",
        *(f"| - {part} | {value:,.0f} |" for part, value in m.bytes_per_run_by_part.items()),
        f"| an automation evaluation record ({m.evaluations_per_run:.1f} per run) | {m.bytes_per_evaluation:,.0f} |",
        f"| a sensor tick | {m.bytes_per_tick:,.0f} |",
        f"| a lag observation (runless event) | {m.bytes_per_observation:,.0f} |",
        "",
        f"{m.seconds_per_run:.2f} s per synthetic run; the retention pass deleted {m.deleted} runs and removed "
        f"{m.event_log_files_removed} event-log files in {m.retention_seconds:.1f} s.",
        "",
        "| DAGSTER_HOME | on disk | in use (SQLite pages) | files |",
        "|---|---|---|---|",
    ]
    for label, snap in (
        ("after the setup run", m.baseline),
        (f"after {m.runs} runs, their ticks and observations", m.after_runs),
        ("after the retention pass (as 31 days later)", m.after_retention),
        (f"after {m.runs} more runs", m.after_second_batch),
    ):
        lines.append(f"| {label} | {_mb(snap.disk_total)} | {_mb(snap.live_total)} | {snap.files} |")
    lines += ["", f"| after ... of {RUNS_PER_DAY:,} runs a day | without retention | with retention |", "|---|---|---|"]
    for days in (1, 7, 30):
        e = extrapolate(m, days)
        lines.append(f"| {days} day(s) | {_mb(sum(e.without.values()))} | {_mb(sum(e.with_retention.values()))} |")
        for part in e.without:
            lines.append(f"| - {part} | {_mb(e.without[part])} | {_mb(e.with_retention[part])} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="synthetic live runs per batch (default 200)")
    parser.add_argument(
        "--event-log",
        choices=("sqlite", "consolidated"),
        default="sqlite",
        help="Dagster's default SQLite event log (one file per run, the stack's) or the consolidated one",
    )
    parser.add_argument("--json", type=Path, help="also write the measurement to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("dagster").setLevel(logging.WARNING)
    result = measure(args.runs, event_log=args.event_log, log=logging.getLogger("dagster-storage"))
    print(report_markdown(result))
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
