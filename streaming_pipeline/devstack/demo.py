"""`streaming-pipeline demo`: the whole flow once, end to end, on the embedded default.

Starts the embedded stack (Kafka, registry, the Spark Connect engine) if it is not running, produces rides
and pickups, materializes every asset and check through the project's Dagster definitions on that engine,
prints each table, writes the window chart, and leaves the stack as it found it. One line per stage.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import dagster as dg

from streaming_pipeline.defs.silver.amount_branches_check import HIGH_AMOUNT_RIDES, LOW_AMOUNT_RIDES
from streaming_pipeline.defs.silver.rides_enriched_check import RIDES_ENRICHED
from streaming_pipeline.devstack.errors import DemoError
from streaming_pipeline.devstack.producer import ProduceResult, produce, produce_zone_lookup, rows_from_records
from streaming_pipeline.devstack.project import QUIET_RUN_CONFIG, project_tables
from streaming_pipeline.devstack.records import read_rides_csv
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_pickups, synthetic_rides
from streaming_pipeline.lakehouse import tables
from streaming_pipeline.lakehouse.progress import waiting
from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline.lakehouse.tables import PICKUPS_TOPIC, RIDES_TOPIC

if TYPE_CHECKING:
    import pandas as pd

#: How some tables are shown best: the order of their rows and the columns worth a look. Any other table of the
#: definitions is shown too, ordered by its first column, with its first columns that are not Kafka coordinates.
PREFERRED_VIEWS: dict[str, tuple[list[str], list[str]]] = {
    tables.RAW_RIDES.name: (
        ["pickup_datetime"],
        [
            "vendor_id",
            "pickup_datetime",
            "pu_location_id",
            "do_location_id",
            "trip_distance",
            "total_amount",
            "kafka_partition",
            "kafka_offset",
        ],
    ),
    tables.RAW_PICKUP_LOCATIONS.name: (
        ["pickup_datetime"],
        ["pu_location_id", "pickup_datetime", "kafka_partition", "kafka_offset"],
    ),
    tables.DEAD_LETTER_RECORDS.name: (
        ["kafka_topic", "kafka_partition", "kafka_offset"],
        ["kafka_topic", "kafka_partition", "kafka_offset", "error"],
    ),
    "ride_window_aggregates": (
        ["window_start", "vendor_id"],
        ["window_start", "window_end", "vendor_id", "trip_count", "total_amount_sum", "late_trip_count", "is_final"],
    ),
    "ride_pickup_joins": (
        ["pickup_datetime", "vendor_id"],
        ["vendor_id", "location_id", "dropoff_datetime", "pickup_datetime"],
    ),
    "join_late_rows": (
        ["query_id", "batch_id"],
        ["batch_id", "input_rows", "rows_dropped_by_watermark", "watermark"],
    ),
    HIGH_AMOUNT_RIDES: (["total_amount"], ["vendor_id", "pickup_datetime", "total_amount", "kafka_offset"]),
    LOW_AMOUNT_RIDES: (["total_amount"], ["vendor_id", "pickup_datetime", "total_amount", "kafka_offset"]),
    tables.TAXI_ZONES.name: (["location_id"], ["location_id", "borough", "zone", "service_zone"]),
    RIDES_ENRICHED: (
        ["pickup_datetime"],
        ["pickup_datetime", "pu_borough", "pu_zone", "do_borough", "do_zone", "total_amount"],
    ),
}
DESCENDING = {HIGH_AMOUNT_RIDES}
SHOWN_ROWS = 5


@dataclass
class DemoOptions:
    stack_dir: Path
    lakehouse_dir: str | None  # a path or a URI; None: LAKEHOUSE_DIR, else .lakehouse/ (the store's bucket with it)
    output_dir: Path
    rides: int = 5000
    csv: Path | None = None
    seed: int = 42
    object_store: bool = False  # the lakehouse on the stack's object store (stack up --object-store)
    secure: bool = False  # Kafka over SASL_SSL, the registry over HTTPS with basic auth (stack up --secure)


class _Stages:
    """One progress line per stage: what it did, with counts and seconds."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def say(self, message: str) -> None:
        print(f"[demo {time.monotonic() - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)


def _check_produced(result: ProduceResult) -> None:
    if result.failed:
        raise DemoError(f"producing to {result.topic} failed: {'; '.join(result.errors[:3])}")


def _produce(options: DemoOptions, kafka: Any, registry: Any, stages: _Stages) -> int:
    started = time.monotonic()
    with waiting("producing", say=stages.say):  # a large --csv takes a while
        zones = produce_zone_lookup(kafka, registry)
        _check_produced(zones)
        if options.csv is not None:
            ride_rows = list(read_rides_csv(options.csv))
            rides = [row.record for row in ride_rows if row.record is not None]
            _check_produced(produce(kafka, registry, RIDES_TOPIC, ride_rows, total=len(ride_rows), show_progress=False))
            pickups = [{"pu_location_id": r["do_location_id"], "pickup_datetime": r["dropoff_datetime"]} for r in rides]
            source = str(options.csv)
        else:
            synthetic = SyntheticOptions(seed=options.seed, out_of_order_fraction=0.05)
            rides = list(synthetic_rides(options.rides, synthetic))
            pickups = list(synthetic_pickups(options.rides, synthetic))
            _check_produced(
                produce(kafka, registry, RIDES_TOPIC, rows_from_records(rides), total=len(rides), show_progress=False)
            )
            source = f"the synthetic generator (seed {options.seed})"
        _check_produced(
            produce(kafka, registry, PICKUPS_TOPIC, rows_from_records(pickups), total=len(pickups), show_progress=False)
        )
    stages.say(
        f"produced {zones.sent} taxi zones, and {len(rides):,} rides and {len(pickups):,} pickups from {source} "
        f"({time.monotonic() - started:.1f} s)"
    )
    return len(rides)


def _materialize(resources: Mapping[str, Any], stages: _Stages) -> dg.ExecuteInProcessResult:
    from streaming_pipeline.definitions import defs, pipeline_definitions

    pipeline = pipeline_definitions()
    graph = defs.resolve_asset_graph()
    stages.say(
        f"materializing {len(graph.get_all_asset_keys())} assets and {len(graph.asset_check_keys)} checks through "
        "the Dagster definitions on the Spark Connect engine..."
    )
    # The run takes a minute or more: a running clock on a terminal, nothing in a log.
    with waiting("materializing", say=stages.say):
        result = dg.materialize(
            [
                *cast(list[dg.AssetsDefinition], pipeline.assets),
                *cast(list[dg.AssetChecksDefinition], pipeline.asset_checks),
            ],
            resources=resources,
            raise_on_error=False,
            run_config=QUIET_RUN_CONFIG,
        )
    seconds = {
        event.step_key: event.event_specific_data.duration_ms / 1000  # type: ignore[union-attr]
        for event in result.all_events
        if event.event_type_value == "STEP_SUCCESS"
    }
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization  # type: ignore[union-attr]
        rows = materialization.metadata.get("dagster/row_count")
        detail = f"{rows.value:,} rows" if rows is not None else "done"
        stages.say(
            f"  {materialization.asset_key.to_user_string()}: {detail} ({seconds.get(event.step_key, 0.0):.1f} s)"
        )
    if not result.success:
        failures = [
            f"{e.step_key}: {e.step_failure_data.error.message.strip().splitlines()[0]}"  # type: ignore[union-attr]
            for e in result.all_events
            if e.is_step_failure
        ]
        raise DemoError("the run failed: " + "; ".join(failures))
    return result


def _table_views() -> dict[str, tuple[list[str], list[str]]]:
    """Every table of the definitions, sources first: its preferred view, else one made from its columns."""
    from streaming_pipeline.definitions import defs

    declared = project_tables()
    views: dict[str, tuple[list[str], list[str]]] = {}
    for key in defs.resolve_asset_graph().toposorted_asset_keys:
        name = key.to_user_string()
        if name in PREFERRED_VIEWS:
            views[name] = PREFERRED_VIEWS[name]
        elif name in declared:
            columns = [c for c in declared[name].column_names if c not in tables.KAFKA_COLUMN_NAMES][:6]
            views[name] = (columns[:1], columns)
    return views


def _show_tables(spark: Any, lakehouse: Any) -> dict[str, int]:
    from pyspark.sql import functions as F

    from streaming_pipeline.lakehouse.engine.delta_tables import read_table, table_exists

    counts: dict[str, int] = {}
    for table, (order, columns) in _table_views().items():
        path = lakehouse.table_path(table)
        if not table_exists(path):
            continue
        frame = read_table(spark, path)
        counts[table] = frame.count()
        present = [c for c in columns if c in frame.columns]
        ordering = [F.col(c).desc() if table in DESCENDING else F.col(c) for c in order]
        rounded = [
            F.round(c, 2).alias(c) if c.endswith(("amount", "amount_sum", "distance")) else F.col(c) for c in present
        ]
        print(f"\n{table}: {counts[table]:,} rows (first {SHOWN_ROWS} by {', '.join(order)})")
        frame.orderBy(*ordering).select(*rounded).show(SHOWN_ROWS, truncate=False)
    return counts


def run_demo(options: DemoOptions) -> int:
    from streaming_pipeline.devstack.embedded.stack import EmbeddedStack, default_stack_dir
    from streaming_pipeline.lakehouse.engine.delta_tables import read_table
    from streaming_pipeline.lakehouse.gold.charts import window_chart_png
    from streaming_pipeline.resources.from_settings import build_resources, resolved

    stages = _Stages()
    stack = EmbeddedStack(options.stack_dir, object_store=options.object_store, secure=options.secure)
    was_running = stack.status().running
    info = stack.up(progress=lambda message: stages.say(message))
    stages.say(f"embedded stack {'was already running' if was_running else 'started'} in {info.directory}")
    # This process reads the tables outside Spark too (the checks, delta-rs): it needs the store's variables; and a
    # run reads its secrets (dg.EnvVar) from here.
    os.environ.update(info.object_store_env)
    os.environ.update(info.secure_env)
    if info.secure_env:
        stages.say("Kafka takes SASL_SSL only, the registry HTTPS with basic auth: both with client certificates")
    lakehouse_dir = options.lakehouse_dir or info.lakehouse_dir or PipelineSettings.from_env().lakehouse_dir
    if info.lakehouse_dir:
        stages.say(f"the lakehouse is {lakehouse_dir}, on the object store {info.object_store_url}")
    try:
        settings = PipelineSettings.from_env({**info.env(), "LAKEHOUSE_DIR": lakehouse_dir})
        resources = build_resources(settings)
        _produce(options, resolved(resources["kafka"]), resolved(resources["schema_registry"]).get_client(), stages)
        result = _materialize(resources, stages)
        evaluations = result.get_asset_check_evaluations()
        # an expectation of warning severity that counted rows warns (the rows flowed on); any other check fails
        expectations = [e for e in evaluations if "violations" in e.metadata and "rows_checked" in e.metadata]
        warned = [e for e in expectations if not e.passed and e.severity == dg.AssetCheckSeverity.WARN]
        warnings = [e.check_name for e in warned]
        failed_checks = [e.check_name for e in evaluations if not e.passed and e not in warned]
        spark = resources["spark"].get_session()
        counts = _show_tables(spark, resources["lakehouse"])
        windows: pd.DataFrame = read_table(
            spark, resources["lakehouse"].table_path("ride_window_aggregates")
        ).toPandas()
        options.output_dir.mkdir(parents=True, exist_ok=True)
        chart = options.output_dir / "ride_window_aggregates.png"
        chart.write_bytes(window_chart_png(windows.sort_values("window_start").tail(300)))
        spark.stop()
        print("\n== summary ==")
        print("rows per table: " + ", ".join(f"{table} {n:,}" for table, n in counts.items()))
        passed = len(evaluations) - len(failed_checks) - len(warnings)
        print(
            f"asset checks: {passed} of {len(evaluations)} passed"
            + (f"; warnings: {', '.join(warnings)}" if warnings else "")
            + (f"; failed: {', '.join(failed_checks)}" if failed_checks else "")
        )
        if expectations:
            print(
                "expectations (rows that broke each rule): "
                + ", ".join(
                    f"{e.asset_key.to_user_string()}.{e.check_name} {e.metadata['violations'].value:,} of "
                    f"{e.metadata['rows_checked'].value:,}"
                    for e in expectations
                )
            )
        print(f"window chart: {chart.resolve()}")
        dir_arg = "" if stack.directory == default_stack_dir().resolve() else f" --dir {stack.directory}"
        print(
            f'open the UI: streaming-pipeline stack up{dir_arg} && eval "$(streaming-pipeline stack env{dir_arg})" '
            "&& dagster dev -w workspace.yaml   (then http://127.0.0.1:3000)"
        )
        return 1 if failed_checks else 0
    finally:
        if not was_running:
            stages.say("stopping the embedded stack (it was not running before the demo)")
            stack.down()
