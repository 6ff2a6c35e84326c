"""`streaming-pipeline demo`: the whole flow once, end to end, on the embedded default."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from streaming_pipeline.charts import window_chart_png
from streaming_pipeline.delta_tables import read_table, table_exists
from streaming_pipeline.producer import ProduceResult, produce, rows_from_records
from streaming_pipeline.records import read_rides_csv
from streaming_pipeline.settings import PICKUPS_TOPIC, RIDES_TOPIC, PipelineSettings
from streaming_pipeline.synthetic import SyntheticOptions, synthetic_pickups, synthetic_rides

TABLES = ["raw_rides", "raw_pickup_locations", "dead_letter_records", "vendor_counts", "ride_window_aggregates", "ride_pickup_joins"]


@dataclass
class DemoOptions:
    stack_dir: Path
    lakehouse_dir: Path
    output_dir: Path
    rides: int = 5000
    csv: Path | None = None
    seed: int = 42


def _say(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def _check(result: ProduceResult) -> None:
    _say(f"{result.topic}: {result.sent} sent, {result.failed} failed")
    if result.failed:
        raise SystemExit(f"producing to {result.topic} failed: {'; '.join(result.errors[:3])}")


def run_demo(options: DemoOptions) -> int:
    from streaming_pipeline.assets import ALL_ASSETS
    from streaming_pipeline.checks import ALL_CHECKS
    from streaming_pipeline.definitions import build_resources
    from streaming_pipeline.embedded.stack import EmbeddedStack

    stack = EmbeddedStack(options.stack_dir)
    was_running = stack.status().running
    info = stack.up(progress=_say)
    try:
        settings = PipelineSettings.from_env(
            {
                "KAFKA_BOOTSTRAP_SERVERS": info.bootstrap_servers,
                "SCHEMA_REGISTRY_URL": info.schema_registry_url,
                "LAKEHOUSE_DIR": str(options.lakehouse_dir.resolve()),
            }
        )
        resources = build_resources(settings)
        spark_resource = resources["spark"]
        # Keep the run's session for printing the tables afterwards instead of starting a second one.
        resources["spark"] = type(spark_resource)(
            profile=spark_resource.profile, master=spark_resource.master, conf=spark_resource.conf, stop_on_teardown=False
        )
        kafka, registry = resources["kafka"], resources["schema_registry"]
        synthetic = SyntheticOptions(seed=options.seed, out_of_order_fraction=0.05)
        if options.csv is not None:
            _say(f"producing rides from {options.csv}")
            rides_rows = list(read_rides_csv(options.csv))
            _check(produce(kafka, registry, RIDES_TOPIC, rides_rows, total=len(rides_rows)))
            pickups = [
                {"pu_location_id": row.record["do_location_id"], "pickup_datetime": row.record["dropoff_datetime"]}
                for row in rides_rows
                if row.record is not None
            ]
            _check(produce(kafka, registry, PICKUPS_TOPIC, rows_from_records(pickups), total=len(pickups)))
        else:
            _say(f"producing {options.rides} synthetic rides and pickups (seed {options.seed})")
            _check(produce(kafka, registry, RIDES_TOPIC, rows_from_records(synthetic_rides(options.rides, synthetic)), total=options.rides))
            _check(
                produce(kafka, registry, PICKUPS_TOPIC, rows_from_records(synthetic_pickups(options.rides, synthetic)), total=options.rides)
            )
        _say("materializing every asset through the Dagster definitions (starts Spark; ~1-3 minutes)")
        result = dg.materialize([*ALL_ASSETS, *ALL_CHECKS], resources=resources, raise_on_error=False)
        if not result.success:
            _say("the run failed; see the Dagster log above")
            return 1
        failed_checks = [e.check_name for e in result.get_asset_check_evaluations() if not e.passed]
        spark = resources["spark"].get_session()
        lakehouse = resources["lakehouse"]
        print("\n== lakehouse tables ==")
        for table in TABLES:
            path = lakehouse.table_path(table)
            if not table_exists(spark, path):
                print(f"{table}: not created")
                continue
            frame = read_table(spark, path)
            print(f"\n{table}: {frame.count()} rows  ({path})")
            frame.show(5, truncate=False)
        windows = read_table(spark, lakehouse.table_path("ride_window_aggregates")).toPandas().sort_values("window_start")
        options.output_dir.mkdir(parents=True, exist_ok=True)
        chart = options.output_dir / "ride_window_aggregates.png"
        chart.write_bytes(window_chart_png(windows.tail(300)))
        print(f"window chart: {chart}")
        print(f"asset checks: {'all passed' if not failed_checks else 'failed: ' + ', '.join(failed_checks)}")
        spark.stop()
        return 0
    finally:
        if not was_running:
            _say("stopping the embedded stack (it was not running before the demo)")
            stack.down(progress=_say)
