"""The asset checks while the streams write (the continuous mode's scheduled checks, `live_checks_job`): each check
reads versions of its tables that belong together, so a table that its downstream streams have not read yet, or a
window stream ahead of its reconcile, never fails a check that holds, and a wrong table still fails it.

In-process Spark and Delta, no Kafka: rides are appended to raw_rides as Delta commits, as bronze does. Every
expected number is worked out by hand from the rides of the test.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.defs.gold.ride_window_aggregates import windows_count_each_ride_once
from streaming_pipeline.defs.gold.vendor_counts_check import vendor_counts_match_raw_rides
from streaming_pipeline.defs.silver.amount_branches_check import branches_add_up_to_rides_with_an_amount
from streaming_pipeline.defs.silver.rides_enriched_check import enriched_rows_equal_raw_rows
from streaming_pipeline.lakehouse.bronze.offsets import settled_offsets
from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.engine.delta_tables import append_once
from streaming_pipeline.lakehouse.engine.sink_position import DELTA_END_INDEX, delta_source_version
from streaming_pipeline.resources import LakehouseResource, SparkResource
from streaming_pipeline_tests.conftest import SPARK_TEST_CONF
from streaming_pipeline_tests.pipeline_assets import pipeline_asset
from streaming_pipeline_tests.project_tables import stream_ride_windows

RIDES_DDL = (
    "vendor_id int, pickup_datetime timestamp, dropoff_datetime timestamp, pu_location_id int, do_location_id int, "
    "total_amount double, kafka_topic string, kafka_partition int, kafka_offset long"
)
WINDOWS = {"window_duration": "600 seconds", "watermark_delay": "900 seconds"}
ASSETS = [
    pipeline_asset(table)
    for table in ("rides_enriched", "high_amount_rides", "low_amount_rides", "vendor_counts", "ride_window_aggregates")
]
CHECKS = [
    enriched_rows_equal_raw_rows,
    branches_add_up_to_rides_with_an_amount,
    vendor_counts_match_raw_rides,
    windows_count_each_ride_once,
]


def _write_zones(spark, lakehouse: LakehouseResource) -> None:  # type: ignore[no-untyped-def]
    """The taxi_zones table as its table topic's table would hold the rides' two zones."""
    zones = [(132, "Queens", "JFK Airport", "Airports"), (10, "Queens", "Baisley Park", "Boro Zone")]
    zones_ddl = "location_id int, borough string, zone string, service_zone string"
    spark.createDataFrame(zones, zones_ddl).write.format("delta").save(lakehouse.table_path("taxi_zones"))


def run_checks(resources: dict, checks: list) -> dict[str, tuple[bool, dg.AssetCheckSeverity, dict]]:
    """`checks` alone, as the schedule runs them: each one's (passed, severity, metadata values) by name."""
    result = dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.checks(*checks), resources=resources)
    assert result.success
    return {
        e.check_name: (e.passed, e.severity, {k: v.value for k, v in e.metadata.items()})
        for e in result.get_asset_check_evaluations()
    }


def at(hour: int, minute: int) -> dt.datetime:
    return dt.datetime(2024, 3, 10, hour, minute, tzinfo=dt.UTC)


def test_a_delta_source_offset_names_a_whole_version_only_at_a_version_boundary() -> None:
    assert delta_source_version({"reservoirVersion": 7, "index": -1, "isStartingVersion": False}) == 6
    assert delta_source_version({"reservoirVersion": 7, "index": DELTA_END_INDEX, "isStartingVersion": False}) == 7
    assert delta_source_version({"reservoirVersion": 7, "index": 3, "isStartingVersion": False}) is None
    assert delta_source_version({"reservoirVersion": 7, "index": -1, "isStartingVersion": True}) is None


@pytest.mark.slow
def test_the_checks_compare_each_table_with_the_raw_rides_version_it_was_computed_from(spark, tmp_path: Path) -> None:
    lakehouse = LakehouseResource(root=str(tmp_path / "lakehouse"))
    resources = {"spark": SparkResource(stop_on_teardown=False, conf=SPARK_TEST_CONF), "lakehouse": lakehouse}
    raw = lakehouse.table_path("raw_rides")
    offsets = iter(range(100))

    def append(*rides: tuple[int, dt.datetime, float | None]) -> int:
        rows = [
            (vendor, pickup, pickup + dt.timedelta(minutes=5), 132, 10, amount, "rides", 0, next(offsets))
            for vendor, pickup, amount in rides
        ]
        spark.createDataFrame(rows, RIDES_DDL).coalesce(1).write.format("delta").mode("append").save(raw)
        version = latest_version(raw)
        assert version is not None
        return version

    _write_zones(spark, lakehouse)
    # Vendor 1 three times, vendor 2 once; amounts 50 (high), 10 and 20 (low), one without an amount.
    first = append((1, at(9, 0), 50.0), (1, at(9, 5), 10.0), (2, at(9, 31), None), (1, at(9, 31), 20.0))
    assert first == 0
    # Latest pickup 09:31, watermark 09:16: the window [09:00, 09:10) is final, so the reconcile commits.
    materialized = dg.materialize([*ASSETS, *CHECKS], resources=resources)
    assert materialized.success
    # (rides_enriched's expectations are evaluated by its step too; components/test_streaming_table.py asserts them)
    names = {c.check_key.name for c in CHECKS}
    evaluations = materialized.get_asset_check_evaluations()
    assert {e.check_name: e.passed for e in evaluations if e.check_name in names} == dict.fromkeys(names, True)

    # raw_rides moves on (a bronze micro-batch the downstream queries have not read yet): two rides, one of them
    # late for the final window. Compared as the tables stand, every check would fail: 6 rides, 4 counted.
    append((2, at(9, 2), 30.0), (2, at(9, 40), 45.0))
    found = run_checks(resources, CHECKS)
    assert {name: passed for name, (passed, _, _) in found.items()} == {c.check_key.name: True for c in CHECKS}
    assert found["vendor_counts_match_raw_rides"][2] == {
        "sum_trip_count": 4,
        "raw_rides_rows": 4,
        "vendor_counts_version": 0,
        "raw_rides_version": 0,
    }
    enriched = found["enriched_rows_equal_raw_rows"][2]
    assert (enriched["rides_enriched_rows"], enriched["raw_rides_rows"], enriched["raw_rides_version"]) == (4, 4, 0)
    branches = found["branches_add_up_to_rides_with_an_amount"][2]
    assert (branches["high"], branches["low"], branches["raw_rides_with_amount"], branches["raw_rides_version"]) == (
        1,
        2,
        3,
        0,
    )
    windows = found["windows_count_each_ride_once"][2]
    assert (windows["raw_rides_version"], windows["on_time_plus_late"], windows["at_a_reconcile"]) == (0, 4, True)

    # The window stream reads the new version but its reconcile has not run yet (the continuous run reconciles
    # about once a minute): the late ride (09:02) is in no count yet, so the table as it stands holds 5 of 6 rides.
    stream_ride_windows(spark, lakehouse, **WINDOWS)
    found = run_checks(resources, CHECKS)
    windows = found["windows_count_each_ride_once"]
    assert windows[0] is True
    assert (windows[2]["raw_rides_version"], windows[2]["on_time_plus_late"], windows[2]["at_a_reconcile"]) == (
        0,
        4,
        True,
    )

    # A wrong table still fails: a row of rides_enriched deleted behind the query's back is missing from the
    # query's next commit, which the check pins.
    enriched = lakehouse.table_path("rides_enriched")
    spark.sql(f"DELETE FROM delta.`{enriched}` WHERE kafka_offset = 0")
    append((1, at(9, 45), 5.0))
    materialized = dg.materialize(
        [*ASSETS, *CHECKS], selection=dg.AssetSelection.assets("rides_enriched"), resources=resources
    )
    [check] = [e for e in materialized.get_asset_check_evaluations() if e.check_name in names]
    assert (check.check_name, check.passed) == ("enriched_rows_equal_raw_rows", False)
    assert (check.metadata["rides_enriched_rows"].value, check.metadata["raw_rides_rows"].value) == (6, 7)


@pytest.mark.slow
def test_a_check_without_its_table_passes_on_empty_raw_rides_warns_while_its_query_starts_else_fails(
    spark, tmp_path: Path
) -> None:
    """Without its table, a check passes while raw_rides is empty, warns while the table's query has started and
    committed nothing, and fails when it never ran or committed batches without the table. Once the queries have
    written the tables and their checkpoints are gone, the checks warn that they cannot pin the versions."""
    lakehouse = LakehouseResource(root=str(tmp_path / "lakehouse"))
    resources = {"spark": SparkResource(stop_on_teardown=False, conf=SPARK_TEST_CONF), "lakehouse": lakehouse}
    pinned_checks = [vendor_counts_match_raw_rides, enriched_rows_equal_raw_rows]
    before_the_tables = [*pinned_checks, branches_add_up_to_rides_with_an_amount]
    checkpoints = {
        "vendor_counts": lakehouse.checkpoint_path("vendor_counts"),
        "rides_enriched": lakehouse.checkpoint_path("rides_enriched"),
        "high_amount_rides and low_amount_rides": lakehouse.checkpoint_path("high_amount_rides"),
    }

    raw = lakehouse.table_path("raw_rides")
    spark.createDataFrame([], RIDES_DDL).write.format("delta").save(raw)
    error, warn = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN
    no_branches = {"high": 0, "low": 0, "duplicated_keys": 0}
    assert run_checks(resources, before_the_tables) == {
        "vendor_counts_match_raw_rides": (True, error, {"sum_trip_count": 0, "raw_rides_rows": 0}),
        "enriched_rows_equal_raw_rows": (True, error, {"rides_enriched_rows": 0, "raw_rides_rows": 0}),
        "branches_add_up_to_rides_with_an_amount": (True, error, {**no_branches, "raw_rides_with_amount": 0}),
    }

    def two_rides_without_tables(severity: dg.AssetCheckSeverity, errors: dict[str, str]) -> dict:
        """What the three checks give while raw_rides has the two rides and none of their tables exists."""
        return {
            "vendor_counts_match_raw_rides": (
                False,
                severity,
                {"sum_trip_count": 0, "raw_rides_rows": 2, "error": errors["vendor_counts"]},
            ),
            "enriched_rows_equal_raw_rows": (
                False,
                severity,
                {"rides_enriched_rows": 0, "raw_rides_rows": 2, "error": errors["rides_enriched"]},
            ),
            "branches_add_up_to_rides_with_an_amount": (
                False,
                severity,
                {**no_branches, "raw_rides_with_amount": 2, "error": errors["high_amount_rides and low_amount_rides"]},
            ),
        }

    # Two rides that no query has read, and no query has run: without their tables the checks fail.
    rides = [
        (1, at(9, 0), at(9, 5), 132, 10, 12.0, "rides", 0, 0),
        (2, at(9, 1), at(9, 6), 132, 10, 8.0, "rides", 0, 1),
    ]
    spark.createDataFrame(rides, RIDES_DDL).write.format("delta").mode("append").save(raw)
    never_run = {
        table: f"{table} does not exist while raw_rides has 2 rows for it: its query has never run (checkpoint {path})"
        for table, path in checkpoints.items()
    }
    assert run_checks(resources, before_the_tables) == two_rides_without_tables(error, never_run)

    # Their queries have started (Spark wrote each checkpoint's `metadata`) and committed no micro-batch yet, as in
    # the continuous mode's first minute: the tables are behind, not wrong, so the checks warn.
    for path in checkpoints.values():
        Path(path).mkdir(parents=True)
        (Path(path) / "metadata").write_text(json.dumps({"id": f"query-of-{Path(path).name}"}) + "\n")
    starting = {
        table: f"{table} does not exist yet: its query has started and committed no micro-batch so far (checkpoint "
        f"{path})"
        for table, path in checkpoints.items()
    }
    assert run_checks(resources, before_the_tables) == two_rides_without_tables(warn, starting)
    # Once a query has committed a micro-batch, its missing table is an error again.
    (Path(checkpoints["vendor_counts"]) / "commits").mkdir()
    (Path(checkpoints["vendor_counts"]) / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    assert run_checks(resources, [vendor_counts_match_raw_rides]) == {
        "vendor_counts_match_raw_rides": (
            False,
            error,
            {
                "sum_trip_count": 0,
                "raw_rides_rows": 2,
                "error": "vendor_counts does not exist while raw_rides has 2 rows for it: its query has committed "
                f"micro-batches, yet the table is missing (checkpoint {checkpoints['vendor_counts']})",
            },
        )
    }
    for path in checkpoints.values():
        shutil.rmtree(path)

    # The queries write them (the zones as their table topic's table would hold them); then their checkpoints are
    # deleted, so no commit of either table names the raw_rides version it came from any more: a warning, not a
    # comparison of the tables as they stand.
    _write_zones(spark, lakehouse)
    assert dg.materialize(
        [*ASSETS, *CHECKS],
        selection=dg.AssetSelection.assets("rides_enriched", "vendor_counts"),
        resources=resources,
    ).success
    for table in ("vendor_counts", "rides_enriched"):
        shutil.rmtree(lakehouse.checkpoint_path(table))
    found = run_checks(resources, pinned_checks)
    assert {name: (passed, severity) for name, (passed, severity, _) in found.items()} == {
        "vendor_counts_match_raw_rides": (False, dg.AssetCheckSeverity.WARN),
        "enriched_rows_equal_raw_rows": (False, dg.AssetCheckSeverity.WARN),
    }
    assert found["vendor_counts_match_raw_rides"][2]["error"].startswith(
        "none of the newest commits of vendor_counts names the raw_rides version"
    )
    assert found["enriched_rows_equal_raw_rows"][2]["error"].startswith(
        "none of the newest commits of rides_enriched names the raw_rides version"
    )


def test_a_bronze_table_settles_at_the_newest_batch_its_checkpoint_committed(spark, tmp_path: Path) -> None:
    """A bronze micro-batch appends its rows, then its dead letters, then Spark commits it: the reconciliation
    counts the records below the offsets of the newest batch committed, so a batch in flight is left out."""
    table, checkpoint = str(tmp_path / "raw_rides"), tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "cp-1"}) + "\n")
    (checkpoint / "sources" / "0" / "0").write_text('v1\n{"rides":{"0":3,"1":0}}\n')
    ends = {0: {"0": 5, "1": 2}, 1: {"0": 9, "1": 4}}
    for batch, end in ends.items():
        (checkpoint / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps({"rides": end})}\n'
        )
        frame = spark.createDataFrame([(batch,)], "batch int")
        append_once(frame, table, "bronze:raw_rides:cp-1", batch, "attempt")

    def settled() -> dict[int, int]:
        return settled_offsets(table, str(checkpoint), "raw_rides", "rides")

    # Batch 1 is in the table but not committed: it may still write dead letters. Batch 0 is settled.
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    assert settled() == {0: 5, 1: 2}
    (checkpoint / "commits" / "1").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    assert settled() == {0: 9, 1: 4}
    # Only batch 0, in flight: nothing of the table is settled yet, so the reconciliation starts and ends at the
    # offsets the checkpoint started from.
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / "1").unlink()
    first_only = str(tmp_path / "first_only")
    append_once(spark.createDataFrame([(0,)], "batch int"), first_only, "bronze:raw_rides:cp-1", 0, "attempt")
    assert settled_offsets(first_only, str(checkpoint), "raw_rides", "rides") == {0: 3, 1: 0}
