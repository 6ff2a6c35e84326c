"""The continuous mode's settings and definitions: LIVE_MODE and its companions, the job that holds every
checkpoint's pool, and which sensors run by default in each mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from streaming_pipeline.components.asset_metadata import checkpoint_pool
from streaming_pipeline.components.streamed_table import (
    StreamedTable,
    declared_tables,
    fast_run_tables,
    latency_critical_query_names,
    live_query_names,
    streamed_tables,
)
from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import LiveSettings
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.table_model import BRONZE, GOLD, Column, Table


def _project_steps() -> list[StreamedTable]:
    from streaming_pipeline.definitions import defs

    assert defs.component_tree is not None
    return streamed_tables(defs.component_tree)


def test_live_settings_default_to_the_triggered_mode() -> None:
    assert LiveSettings.from_env({}) == LiveSettings(
        mode="triggered",
        trigger_interval="500 milliseconds",
        downstream_trigger_interval="2 minutes",
        report_seconds=30.0,
        reconcile_seconds=300.0,
        freshness_seconds=300.0,
        checks_cron="0 * * * *",
    )
    assert not LiveSettings.from_env({}).continuous
    assert LiveSettings.from_env({}).caught_up_report_seconds == 60.0


def test_live_settings_read_the_continuous_mode_and_its_intervals() -> None:
    settings = LiveSettings.from_env(
        {
            "LIVE_MODE": " Continuous ",
            "CONTINUOUS_TRIGGER_INTERVAL": "2 Seconds",
            "CONTINUOUS_DOWNSTREAM_TRIGGER_INTERVAL": "1 minute",
            "CONTINUOUS_REPORT_SECONDS": "10",
            "CONTINUOUS_RECONCILE_SECONDS": "120",
            "CONTINUOUS_FRESHNESS_SECONDS": "600",
            "CONTINUOUS_CHECKS_CRON": " @hourly ",
        }
    )
    assert settings == LiveSettings(
        mode="continuous",
        trigger_interval="2 seconds",
        downstream_trigger_interval="1 minutes",
        report_seconds=10.0,
        reconcile_seconds=120.0,
        freshness_seconds=600.0,
        checks_cron="@hourly",
    )
    assert settings.continuous and settings.caught_up_report_seconds == 120.0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LIVE_MODE": "streaming"}, "LIVE_MODE='streaming' is not one of triggered, continuous"),
        ({"CONTINUOUS_TRIGGER_INTERVAL": "fast"}, "CONTINUOUS_TRIGGER_INTERVAL='fast' is not a positive interval"),
        ({"CONTINUOUS_TRIGGER_INTERVAL": "0 seconds"}, "CONTINUOUS_TRIGGER_INTERVAL='0 seconds' is not a positive"),
        ({"CONTINUOUS_REPORT_SECONDS": "-5"}, "CONTINUOUS_REPORT_SECONDS='-5' is not a positive number"),
        ({"CONTINUOUS_FRESHNESS_SECONDS": "0"}, "CONTINUOUS_FRESHNESS_SECONDS='0' is not a positive number"),
        ({"CONTINUOUS_FRESHNESS_SECONDS": "90"}, "CONTINUOUS_FRESHNESS_SECONDS='90' is shorter than 120"),
        ({"CONTINUOUS_CHECKS_CRON": "every 5 minutes"}, "CONTINUOUS_CHECKS_CRON='every 5 minutes' is not a cron"),
    ],
)
def test_a_live_setting_that_cannot_be_used_is_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LiveSettings.from_env(env)


def test_only_the_tables_people_wait_for_trigger_at_the_short_interval() -> None:
    """raw_rides and vendor_counts, which counts it; the pickups' bronze table streams at the downstream interval
    with the join that reads it: on 2 cores every query that triggers often lengthens their micro-batches."""
    assert latency_critical_query_names(project_sources(), _project_steps()) == ["raw_rides", "vendor_counts"]
    # A fast run of raw_rides writes vendor_counts too; one of raw_pickup_locations writes only itself.
    assert fast_run_tables("raw_rides", _project_steps()) == ["raw_rides", "vendor_counts"]
    assert fast_run_tables("raw_pickup_locations", _project_steps()) == ["raw_pickup_locations"]


def _step(name: str, reads: list[str], *, latency_critical: bool = False) -> StreamedTable:
    return StreamedTable(
        step=name,
        writes=[Table(name, GOLD, (Column("n", "bigint"),))],
        reads=[Table(table, BRONZE, ()) for table in reads],
        query=lambda inputs, config: None,  # type: ignore[arg-type, return-value]
        compute=lambda step: None,  # type: ignore[arg-type, return-value]
        priority=0,
        latency_critical=latency_critical,
    )


def test_a_bronze_table_no_step_reads_is_latency_critical_and_one_read_by_slow_steps_only_is_not() -> None:
    """In a project of its own a source's bronze table is what its user waits for; read by a slow step only (when
    another step is latency-critical), it streams at the downstream interval with it."""
    orders = SourceTopic.declared(topic="orders", value_schema='{"type": "record", "name": "o", "fields": []}')
    refunds = SourceTopic.declared(topic="refunds", value_schema='{"type": "record", "name": "r", "fields": []}')
    assert latency_critical_query_names([orders], []) == ["raw_orders"]
    steps = [_step("order_totals", ["raw_orders"], latency_critical=True), _step("refund_joins", ["raw_refunds"])]
    assert latency_critical_query_names([orders, refunds], steps) == ["raw_orders", "order_totals"]
    assert live_query_names([orders, refunds], steps) == ["raw_orders", "raw_refunds", "order_totals", "refund_joins"]
    # A project that marks no step latency-critical waits for every table alike: every query triggers as often.
    slow = [_step("order_totals", ["raw_orders"]), _step("refund_joins", ["raw_refunds"])]
    assert latency_critical_query_names([orders, refunds], slow) == live_query_names([orders, refunds], slow)


def test_the_continuous_job_streams_the_checkpoint_of_every_triggered_step() -> None:
    from streaming_pipeline.definitions import defs

    assert live_query_names(project_sources(), _project_steps()) == [
        "raw_pickup_locations",
        "raw_rides",
        "taxi_zones",
        "vendor_counts",
        "high_amount_rides",
        "low_amount_rides",
        "rides_enriched",
        "ride_pickup_joins",
        "ride_window_aggregates",
    ]
    job = defs.resolve_job_def("continuous_streams_job")
    assert [node.name for node in job.nodes] == ["continuous_streams"]
    # The op claims its pools itself, one claim per checkpoint (so that it can lend each alone).
    assert job.graph.node_named("continuous_streams").definition.pool is None
    # Each name is the pool of the triggered step that runs the same query.
    steps = {
        node.name: node.definition.pool
        for name in ("raw_rides_downstream_job", "raw_pickup_locations_downstream_job", "taxi_zones_downstream_job")
        for node in defs.resolve_job_def(name).nodes
    }
    assert {checkpoint_pool(name) for name in live_query_names(project_sources(), _project_steps())} == {
        p for p in steps.values() if p
    }


def test_in_continuous_mode_the_run_is_kept_alive_the_offset_sensors_rest_and_nothing_is_automated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The definitions as `dagster dev` loads them with LIVE_MODE=continuous, built in this process after the
    triggered ones (the mode is read when they load): every table has a freshness policy, from
    CONTINUOUS_FRESHNESS_SECONDS; in triggered mode none has one."""
    from streaming_pipeline.definitions import build_definitions

    triggered = build_definitions()
    monkeypatch.setenv("LIVE_MODE", "continuous")
    monkeypatch.setenv("CONTINUOUS_FRESHNESS_SECONDS", "120")
    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    loaded = {
        "sensors": {s.name: s.default_status.value for s in defs.sensors},
        "schedules": {s.name: [s.default_status.value, s.cron_schedule] for s in defs.schedules},
        "checks_job": sorted(n.name for n in defs.resolve_job_def("live_checks_job").nodes),
        "automated": sorted(a.key.to_user_string() for a in graph.asset_nodes if a.automation_condition is not None),
        "freshness": {
            a.key.to_user_string(): [
                a.freshness_policy.fail_window.to_timedelta().total_seconds(),
                a.freshness_policy.warn_window.to_timedelta().total_seconds(),
            ]
            for a in graph.asset_nodes
            if a.freshness_policy is not None
        },
    }
    # The triggered definitions built before are unchanged: no freshness policy, the streamed tables eager.
    triggered_graph = triggered.resolve_asset_graph()
    assert [a.key for a in triggered_graph.asset_nodes if a.freshness_policy is not None] == []
    assert triggered_graph.get(dg.AssetKey("vendor_counts")).automation_condition is not None
    assert loaded["sensors"] == {
        "continuous_streams_sensor": "RUNNING",
        "default_automation_condition_sensor": "RUNNING",
        "raw_rides_offset_sensor": "STOPPED",
        "raw_pickup_locations_offset_sensor": "STOPPED",
        "taxi_zones_offset_sensor": "STOPPED",
    }
    # The streaming tables' checks run on a schedule, in a job of their own that materializes nothing.
    assert loaded["schedules"] == {
        "live_checks_schedule": ["RUNNING", "0 * * * *"],
        "table_maintenance_schedule": ["RUNNING", "0 3 * * *"],
        "dagster_run_retention_schedule": ["RUNNING", "17 3 * * *"],
    }
    assert loaded["checks_job"] == [
        "high_amount_rides_branches_add_up_to_rides_with_an_amount",
        "high_amount_rides_not_behind_sources",
        "low_amount_rides_not_behind_sources",
        "raw_pickup_locations_consumer_lag_below_bound",
        "raw_pickup_locations_reconciles_with_kafka_offsets",
        "raw_pickup_locations_unique_kafka_coordinates",
        "raw_rides_consumer_lag_below_bound",
        "raw_rides_reconciles_with_kafka_offsets",
        "raw_rides_unique_kafka_coordinates",
        "ride_pickup_joins_not_behind_sources",
        "ride_pickup_joins_unique_join_pairs",
        "ride_window_aggregates_not_behind_sources",
        "ride_window_aggregates_unique_window_per_vendor",
        "ride_window_aggregates_windows_count_each_ride_once",
        "rides_enriched_enriched_rows_equal_raw_rows",
        "rides_enriched_not_behind_sources",
        "taxi_zones_consumer_lag_below_bound",
        "taxi_zones_one_row_per_key",
        "taxi_zones_reconciles_with_kafka_offsets",
        "vendor_counts_not_behind_sources",
        "vendor_counts_vendor_counts_match_raw_rides",
    ]
    assert loaded["automated"] == []
    streamed = [
        "dead_letter_records",
        "high_amount_rides",
        "join_late_rows",
        "low_amount_rides",
        "raw_pickup_locations",
        "raw_rides",
        "ride_pickup_joins",
        "ride_window_aggregates",
        "rides_enriched",
        "taxi_zones",
        "taxi_zones_history",
        "vendor_counts",
    ]
    assert loaded["freshness"] == dict.fromkeys(streamed, [120.0, 60.0])


def test_in_triggered_mode_no_table_has_a_freshness_policy_and_the_checks_run_with_each_run() -> None:
    from streaming_pipeline.definitions import defs

    assert not LiveSettings.from_env().continuous
    assert [a.key for a in defs.resolve_asset_graph().asset_nodes if a.freshness_policy is not None] == []
    assert defs.get_schedule_def("live_checks_schedule").default_status == dg.DefaultScheduleStatus.STOPPED


class _NoKafka:
    """The reporter's Kafka for tables without consumed offsets: its topics have no records."""

    def watermark_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        return {}


def test_the_run_reports_new_commits_and_a_caught_up_table_now_and_then_but_not_one_whose_sources_are_behind(
    tmp_path: Path,
) -> None:
    """What keeps an idle table fresh and lets a lagging one go late: new commits are always reported; a table with
    none is reported (with no rows) once its writers and the writers of its sources are caught up, and then again
    only after `caught_up_every` seconds."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from streaming_pipeline.components.continuous.table_reporter import TableReporter
    from streaming_pipeline.lakehouse.engine.streams import StreamQuery
    from streaming_pipeline.resources import LakehouseResource

    lakehouse = LakehouseResource(root=str(tmp_path))
    for table in ("raw_rides", "vendor_counts"):
        write_deltalake(lakehouse.table_path(table), pa.table({"n": [1, 2]}))
    queries = [
        StreamQuery("raw_rides", lambda: None, tables=("raw_rides", "dead_letter_records")),  # type: ignore[arg-type, return-value]
        StreamQuery(
            "vendor_counts",
            lambda: None,  # type: ignore[arg-type, return-value]
            tables=("vendor_counts",),
            source_paths=(lakehouse.table_path("raw_rides"), lakehouse.table_path("taxi_zones")),
        ),
    ]
    now = [1000.0]
    named: list[str] = []

    def reporter_of(**options: Any) -> TableReporter:
        return TableReporter(
            _NoKafka(),  # type: ignore[arg-type]
            lakehouse,
            queries,
            project_sources(),
            declared_tables(project_sources(), _project_steps()),
            caught_up_every=60,
            **options,
        )

    reporter = reporter_of(clock=lambda: now[0], name_table=named.append)

    def reported(caught_up: set[str]) -> dict[str, tuple[int, str | None]]:
        events = reporter.events({}, caught_up)
        return {
            e.asset_key.to_user_string(): (e.metadata["delta_version"].value, e.description)  # type: ignore[union-attr]
            for e in events
            if isinstance(e, dg.AssetMaterialization)
        }

    caught_up_note = "No new rows: the table is caught up with its sources."
    assert reported(set()) == {}
    assert named == ["raw_rides", "vendor_counts"]  # each existing table gets its catalog name when first seen
    # vendor_counts waits for data, but raw_rides' query does not: vendor_counts may be behind what Kafka holds.
    assert reported({"vendor_counts"}) == {}
    # Both caught up (taxi_zones is no query here): both existing tables are current; dead_letter_records has no table.
    assert reported({"raw_rides", "vendor_counts"}) == {
        "raw_rides": (0, caught_up_note),
        "vendor_counts": (0, caught_up_note),
    }
    now[0] += 30
    assert reported({"raw_rides", "vendor_counts"}) == {}  # reported 30 s ago
    write_deltalake(lakehouse.table_path("raw_rides"), pa.table({"n": [3]}), mode="append")
    assert reported(set()) == {"raw_rides": (1, None)}  # a new commit is reported, caught up or not
    now[0] += 31
    assert reported({"raw_rides", "vendor_counts"}) == {"vendor_counts": (0, caught_up_note)}
    now[0] += 60
    assert reported({"raw_rides", "vendor_counts"}) == {
        "raw_rides": (1, caught_up_note),
        "vendor_counts": (0, caught_up_note),
    }
    assert named == ["raw_rides", "vendor_counts"]  # once per run

    # A table with expectations: what its query's micro-batches found is in its materialization, and each rule's
    # check is evaluated on them.
    from streaming_pipeline.lakehouse.engine.streams import StreamRunReport
    from streaming_pipeline.lakehouse.expectations import Expectation

    rule = Expectation("positive", "n > 0")
    checked = reporter_of(expectations={"vendor_counts": ("vendor_counts", (rule,))})
    write_deltalake(lakehouse.table_path("vendor_counts"), pa.table({"n": [0, 4]}), mode="append")
    report = StreamRunReport("vendor_counts")
    for violations in (1, 0):  # two micro-batches of one row each
        observed = {"rows": 1, "violations_positive": violations, "sample_positive": ['{"n":0}'] * violations}
        report.add({"numInputRows": 1, "observedMetrics": {"expectations": observed}})
    events = checked.events({"vendor_counts": report}, set())
    (evaluation,) = [e for e in events if isinstance(e, dg.AssetCheckEvaluation)]
    assert (evaluation.asset_key, evaluation.check_name, evaluation.passed, evaluation.severity) == (
        dg.AssetKey("vendor_counts"),
        "positive",
        False,
        dg.AssetCheckSeverity.WARN,
    )
    assert {k: evaluation.metadata[k].value for k in ("rows_checked", "violations", "violating_values")} == {
        "rows_checked": 2,
        "violations": 1,
        "violating_values": ['{"n":0}'],
    }
    (materialization,) = [e for e in events if isinstance(e, dg.AssetMaterialization)]
    assert (materialization.metadata["rows_checked"].value, materialization.metadata["violations_positive"].value) == (
        2,
        1,
    )

    # A source's rules: what its bronze handler found in each micro-batch is in the marker of the table's commit of it.
    import json

    from deltalake import CommitProperties

    for batch_id, broken in ((0, 1), (1, 0)):
        found = {
            "rows": 2,
            "violations_amount_not_negative": broken,
            "sample_amount_not_negative": ['{"t":-1}'] * broken,
        }
        marker = {"app_id": "bronze", "batch_id": batch_id, "expectations": found}
        write_deltalake(
            lakehouse.table_path("raw_rides"),
            pa.table({"n": [5, 6]}),
            mode="append",
            commit_properties=CommitProperties(custom_metadata={"userMetadata": json.dumps(marker)}),
        )
    events = checked.events({}, set())
    evaluations = {e.check_name: e for e in events if isinstance(e, dg.AssetCheckEvaluation)}
    assert {name: (e.asset_key, e.passed) for name, e in evaluations.items()} == {
        "dropoff_after_pickup": (dg.AssetKey("raw_rides"), True),
        "amount_not_negative": (dg.AssetKey("raw_rides"), False),
    }
    failing = evaluations["amount_not_negative"].metadata
    assert (failing["rows_checked"].value, failing["violations"].value, failing["violating_values"].value) == (
        4,
        1,
        ['{"t":-1}'],
    )
    assert checked.events({}, set()) == []  # each commit is counted once


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)

    def warning(self, message: str) -> None:
        self.lines.append(f"warning: {message}")


class _Runner:
    """The run's queries, as the lending sees them: which it holds and resumes."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def hold(self, query: str) -> None:
        self.calls.append(f"hold {query}")

    def resume(self, query: str) -> None:
        self.calls.append(f"resume {query}")


def test_the_run_claims_every_checkpoint_pool_lends_one_to_a_waiting_step_and_takes_it_back(tmp_path: Path) -> None:
    """One claim per checkpoint under a step key of the run's own: a step of another run that queues for one gets
    it (its query held meanwhile), and the query resumes once the pool is the run's again; the run frees them all."""
    from types import SimpleNamespace

    from streaming_pipeline.components.continuous.checkpoint_pools import CheckpointPools, lend_and_take_back

    overrides = {"concurrency": {"pools": {"granularity": "op", "default_limit": 1}}}
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides=overrides) as instance:
        storage = instance.event_log_storage
        log, runner = _Log(), _Runner()
        context = SimpleNamespace(instance=instance, run_id="continuous-run", log=log)
        names = ["raw_rides", "vendor_counts"]
        pools = CheckpointPools(context, {name: checkpoint_pool(name) for name in names})  # type: ignore[arg-type]
        pools.claim_all(poll_seconds=0.01)
        claimed = {
            name: [
                (slot.run_id, slot.step_key)
                for slot in storage.get_concurrency_info(checkpoint_pool(name)).claimed_slots
            ]
            for name in names
        }
        assert claimed == {name: [("continuous-run", f"continuous_streams:{name}")] for name in names}
        assert pools.wanted() == {}

        # A maintenance step of another run queues for vendor_counts' pool.
        pool = checkpoint_pool("vendor_counts")
        assert not storage.claim_concurrency_slot(pool, "maintenance-run", "optimize_vendor_counts").is_claimed
        assert pools.wanted() == {"vendor_counts": "optimize_vendor_counts (run maintenance-run)"}
        lent: set[str] = set()
        lend_and_take_back(context, runner, pools, lent)  # type: ignore[arg-type]
        assert (runner.calls, lent) == (["hold vendor_counts"], {"vendor_counts"})
        assert storage.claim_concurrency_slot(pool, "maintenance-run", "optimize_vendor_counts").is_claimed
        lend_and_take_back(context, runner, pools, lent)  # type: ignore[arg-type]
        assert (runner.calls, lent) == (["hold vendor_counts"], {"vendor_counts"})  # the step still holds it
        storage.free_concurrency_slot_for_step("maintenance-run", "optimize_vendor_counts")
        lend_and_take_back(context, runner, pools, lent)  # type: ignore[arg-type]
        assert (runner.calls, lent) == (["hold vendor_counts", "resume vendor_counts"], set())
        assert log.lines == [
            "vendor_counts: stopped, its checkpoint lent to step optimize_vendor_counts (run maintenance-run)",
            "vendor_counts: its checkpoint is back, streaming again",
        ]

        pools.free_all()
        assert all(storage.claim_concurrency_slot(checkpoint_pool(n), "other-run", n).is_claimed for n in names)


def test_without_op_granular_pools_the_run_claims_nothing_and_says_so(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from streaming_pipeline.components.continuous.checkpoint_pools import CheckpointPools

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        log = _Log()
        context = SimpleNamespace(instance=instance, run_id="continuous-run", log=log)
        pools = CheckpointPools(context, {"raw_rides": checkpoint_pool("raw_rides")})  # type: ignore[arg-type]
        pools.claim_all(poll_seconds=0.01)
        assert pools.claim("raw_rides") and pools.wanted() == {}
        assert [line.split(":")[0] for line in log.lines] == ["warning"]
        assert "not op-granular" in log.lines[0]
