"""The live path as a user runs it: the session's secured, replicated stack (`stack up --secure --kafka-brokers 3`:
three Kafka nodes over SASL_SSL with client certificates, the registry over HTTPS with basic auth) with the
session's Spark Connect engine, and `dagster dev` (webserver + daemon, sensors as they start by default) as
subprocesses with the stack's `stack env`, its Dagster storage in an embedded PostgreSQL server (what `stack up
--dagster-postgres` gives). Nothing is materialized by hand.

The tests share the stack, a lakehouse and a `dagster dev` (started again only to switch modes, twice), in file
order: rides reach gold, and PostgreSQL's own tables record the sensor's runs and their events; a run that fails
while the registry is down is retried once it is back; no two steps ever worked on a checkpoint at once; the
README's replay, with the sensor paused, rebuilds raw_rides and gold over the engine; `dagster dev` restarted with
LIVE_MODE=continuous streams what is produced next, exactly once, with its tables fresh, through a SIGKILL of its
run; a new field registered while the continuous queries run reaches the branches and rides_enriched; that
continuous run goes on exactly once after the engine dies and is started again, after a partition's leader is
SIGKILLed under load, and after the whole Kafka cluster, then the registry, were away, until it is terminated; and,
last, switching back to triggered is exact while a partition's leader is SIGKILLed under the sensor's runs.
No test asserts a time: waits are bounded only so that a broken path fails instead of hanging.
"""

from __future__ import annotations

import csv
import functools
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from streaming_pipeline.components.live_runs import run_pid
from streaming_pipeline.devstack.embedded.dagster_dev import DagsterDev
from streaming_pipeline.devstack.embedded.dagster_home import create_pool_limits, write_dagster_yaml
from streaming_pipeline.devstack.embedded.ports import free_port
from streaming_pipeline.devstack.embedded.postgres import PostgresServer, connect
from streaming_pipeline.devstack.embedded.processes import stop_pid
from streaming_pipeline.devstack.embedded.stack import EmbeddedStack, StackInfo
from streaming_pipeline.devstack.producer import produce, produce_zone_lookup, rows_from_records
from streaming_pipeline.devstack.project import project_pools
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.lakehouse.registry_client import RegistryClient
from streaming_pipeline.lakehouse.schemas import load_schema
from streaming_pipeline.lakehouse.tables import RIDES_TOPIC
from streaming_pipeline.resources import KafkaResource
from streaming_pipeline_tests import live_helpers
from streaming_pipeline_tests import test_schema_evolution as evolution
from streaming_pipeline_tests.depth import scaled
from streaming_pipeline_tests.kafka_helpers import REPO_ROOT, avro_frame, clients_of, produce_raw
from streaming_pipeline_tests.live_helpers import (
    WAIT_SECONDS,
    delta_count,
    delta_vendor_counts,
    engine_catalog,
    expected_vendor_counts,
)
from streaming_pipeline_tests.session_stack import SessionStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SENSOR_NAME = "raw_rides_offset_sensor"
#: Rides of the continuous mode's first load, and of each load a process is killed under (at 400 a second, killed
#: 0.5 s in or later, before the load ends); STREAMING_PIPELINE_TEST_DEPTH multiplies them.
LOAD, KILL_LOAD = scaled(1_000), scaled(800)
#: The names of the streaming tables' asset checks, which live_checks_job runs: three for each bronze table (the table
#: topic's one_row_per_key in place of unique_kafka_coordinates), a check of each silver and gold table, and
#: not_behind_sources of each streaming table: 21 checks in all.
LIVE_CHECKS = [
    "reconciles_with_kafka_offsets",
    "unique_kafka_coordinates",
    "consumer_lag_below_bound",
    "one_row_per_key",
    "branches_add_up_to_rides_with_an_amount",
    "enriched_rows_equal_raw_rows",
    "unique_join_pairs",
    "vendor_counts_match_raw_rides",
    "unique_window_per_vendor",
    "windows_count_each_ride_once",
    "not_behind_sources",
]


@dataclass
class Live:
    stack: StackInfo  # the secured stack's Kafka and registry, with the engine of the session's stack
    engine_dir: Path  # the session's stack, whose engine the runs use
    lakehouse: Path
    dagster_home: Path
    webserver_port: int
    log: Path
    spark: Any
    env: dict[str, str]  # what `dagster dev` runs with: the stack's `stack env` and LAKEHOUSE_DIR
    dagster_dev: DagsterDev  # the one running now (the module's fixture stops it)
    postgres: PostgresServer  # Dagster's run, event-log and schedule storage

    def restart_dagster_dev(self, env: dict[str, str], log: Path) -> DagsterDev:
        """Stop the running `dagster dev` (one daemon per instance), then start one with `env`."""
        self.dagster_dev.stop()
        self.dagster_dev = DagsterDev(env, log).start()
        return self.dagster_dev

    @functools.cached_property
    def _instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.dagster_home))

    def instance(self) -> dg.DagsterInstance:
        """Dagster's view of the storage `dagster dev` writes (one instance: its connections are reused)."""
        return self._instance

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """``sql`` in the `dagster` database with psycopg2, not through Dagster."""
        connection = connect(self.postgres.host, self.postgres.port, self.postgres.passfile)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
        finally:
            connection.close()

    def count(self, table: str) -> int:
        return delta_count(self.spark, self.lakehouse / table)

    def vendor_counts(self) -> dict[int, int]:
        return delta_vendor_counts(self.spark, self.lakehouse / "vendor_counts")


def wait_until(live: Live, what: str, condition: Callable[[], bool]) -> None:
    live_helpers.wait_until(what, condition, log=live.log, seconds=WAIT_SECONDS)


@pytest.fixture(scope="module")
def live(
    session_stack: SessionStack, secured_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory, spark: Any
) -> Iterator[Live]:
    """The session's secured stack, cleared (no topic, no subject), with the engine of the session's stack, a
    lakehouse of the module's own and a DAGSTER_HOME whose storage is a PostgreSQL server of the module's own. The
    tables are read with the test session's own in-process Spark (pytest's process stays a classic driver: pyspark
    does not mix Connect and classic sessions in one process)."""
    root = tmp_path_factory.mktemp("live")
    stack = session_stack.clear_secured(secured_stack, root / "dagster_home")
    assert stack.spark_remote and stack.dagster_home
    # Relaunches after a failure within seconds: the tests' runs fail on purpose (registry down, SIGKILL, the
    # engine restarted) and are terminated, and each counts in the sensors' back-off (a minute at most by default).
    env = {
        **stack.env(),
        "LAKEHOUSE_DIR": str(root / "lakehouse"),
        "OFFSET_SENSOR_RETRY_BACKOFF_SECONDS": "2",
        "OFFSET_SENSOR_MAX_BACKOFF_SECONDS": "4",
    }
    with PostgresServer(root / "postgres", free_port(), log_dir=root / "logs") as postgres:
        write_dagster_yaml(stack.dagster_home, postgres.storage_config())  # as `stack up --dagster-postgres` does
        create_pool_limits(stack.dagster_home, project_pools())
        dagster_dev = DagsterDev(env, root / "dagster-dev.log").start()  # the README's `dagster dev -w workspace.yaml`
        live = Live(
            stack,
            session_stack.directory,
            root / "lakehouse",
            stack.dagster_home,
            dagster_dev.port,
            dagster_dev.log_file,
            spark,
            dict(dagster_dev.env),
            dagster_dev,
            postgres,
        )
        try:
            yield live
        finally:
            live.dagster_dev.stop()
            live.instance().dispose()


PRODUCED: list[dict[str, Any]] = []


def _resources(live: Live) -> tuple[KafkaResource, RegistryClient]:
    return clients_of(live.stack)


def _secured(live: Live) -> StackInfo:
    """The secured stack as `stack up` leaves it: whatever of it was stopped is started again, on its ports."""
    return EmbeddedStack(live.stack.directory, prefer_standard_ports=False, spark=False).up(timeout=120)


def test_produced_rides_reach_raw_rides_and_vendor_counts_with_no_manual_step(live: Live) -> None:
    kafka, registry = _resources(live)
    zones = produce_zone_lookup(kafka, registry)  # what `streaming-pipeline produce zones --csv` sends
    assert (zones.sent, zones.failed) == (265, 0)
    rides = list(synthetic_rides(7, SyntheticOptions(seed=101)))
    result = produce(kafka, registry, RIDES_TOPIC, rows_from_records(rides), show_progress=False)
    assert (result.sent, result.failed) == (7, 0)
    PRODUCED.extend(rides)

    wait_until(live, "7 rides in raw_rides", lambda: live.count("raw_rides") == 7)
    expected = expected_vendor_counts(PRODUCED)
    wait_until(live, f"vendor_counts == {expected}", lambda: live.vendor_counts() == expected)
    # One sensor run carried them from Kafka to gold: it selected bronze and everything downstream.
    runs = live.instance().get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR_NAME}))
    assert runs and all(run.job_name == "raw_rides_downstream_job" for run in runs)
    # The windows are the run's last step (vendor_counts comes right after bronze): they follow in the same run.
    wait_until(live, "windows in ride_window_aggregates", lambda: live.count("ride_window_aggregates") > 0)
    # The taxi_zones sensor loaded the zones from their table topic, so the rides are enriched live too.
    with (REPO_ROOT / "streaming_pipeline" / "lakehouse" / "data" / "taxi_zone_lookup.csv").open(newline="") as handle:
        zones = {int(row["locationid"]): row["zone"] for row in csv.DictReader(handle)}
    expected_zones = sorted((zones.get(r["pu_location_id"]), zones.get(r["do_location_id"])) for r in rides)

    def enriched_zones() -> list[tuple[Any, Any]]:
        if not live.count("rides_enriched"):
            return []
        rows = live.spark.read.format("delta").load(str(live.lakehouse / "rides_enriched")).collect()
        return sorted((r.pu_zone, r.do_zone) for r in rows)

    wait_until(live, f"rides_enriched == {expected_zones}", lambda: enriched_zones() == expected_zones)
    _check_the_runs_are_recorded_in_postgres(live)
    # The runs registered every table they created in the engine's catalog, as `<layer>.<table>` at its path.
    names, (vendors, rides_by_name) = _by_name(live, "SELECT count(*) FROM bronze.raw_rides")
    assert vendors == expected and rides_by_name == [[7]]
    for name in ("bronze.raw_rides", "silver.rides_enriched", "gold.vendor_counts", "gold.ride_window_aggregates"):
        assert names[name] == f"file:{live.lakehouse / name.split('.')[1]}", names


def _rename_a_zone(
    live: Live, log: Path, before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> tuple[int, str, str, float]:
    """Once every ride of `before` is enriched, rename the pickup zone most rides of both `before` and `after` have,
    on the taxi_zones topic, and wait until the table has the new name; (zone id, old name, new name, the epoch
    second after which rides get the new name)."""
    kafka, registry = _resources(live)
    live_helpers.wait_until(
        "every ride enriched before the rename", lambda: live.count("rides_enriched") == len(before), log=log
    )
    both = {r["pu_location_id"] for r in before} & {r["pu_location_id"] for r in after}
    location_id = max(sorted(both), key=lambda z: sum(r["pu_location_id"] == z for r in [*before, *after]))
    with (REPO_ROOT / "streaming_pipeline" / "lakehouse" / "data" / "taxi_zone_lookup.csv").open(newline="") as handle:
        (row,) = [r for r in csv.DictReader(handle) if int(r["locationid"]) == location_id]
    old, new = row["zone"], f"{row['zone']} (renamed)"
    record = {"location_id": location_id, "borough": row["borough"], "zone": new, "service_zone": row["service_zone"]}
    assert produce(kafka, registry, "taxi_zones", rows_from_records([record]), show_progress=False).sent == 1

    def renamed() -> bool:
        zones = live.spark.read.format("delta").load(str(live.lakehouse / "taxi_zones"))
        return [r.zone for r in zones.where(f"location_id = {location_id}").collect()] == [new]

    live_helpers.wait_until("the zone renamed in taxi_zones", renamed, log=log)
    return location_id, old, new, time.time()


def _pu_zone_rides(live: Live, location_id: int, since: float) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The Kafka coordinates of the rides from zone `location_id` in raw_rides: produced before `since` (epoch
    seconds), and after."""
    raw = live.spark.read.format("delta").load(str(live.lakehouse / "raw_rides"))
    rows = raw.where(f"pu_location_id = {location_id}").select("kafka_partition", "kafka_offset", "kafka_timestamp")
    found = [((r.kafka_partition, r.kafka_offset), r.kafka_timestamp.timestamp()) for r in rows.collect()]
    return [c for c, t in found if t < since], [c for c, t in found if t >= since]


def _by_name(live: Live, query: str) -> tuple[dict[str, str | None], tuple[dict[int, int], list[list[Any]]]]:
    """The engine's catalog, gold.vendor_counts by name, and the rows of `query`, from a session of its own."""
    assert live.stack.spark_remote
    names, (vendors, rows) = engine_catalog(
        live.stack.spark_remote, "SELECT vendor_id, trip_count FROM gold.vendor_counts", query
    )
    return names, ({int(vendor): int(count) for vendor, count in vendors}, rows)


SENSOR_RUNS = """
SELECT r.run_id, r.status, r.pipeline_name
FROM runs r JOIN run_tags t ON t.run_id = r.run_id
WHERE t.key = 'dagster/sensor_name' AND t.value = %s
ORDER BY r.id
"""


def _check_the_runs_are_recorded_in_postgres(live: Live) -> None:
    """PostgreSQL's own tables, read with psycopg2: every run the sensor requested is the live job, finished; the
    event log agrees with the runs table run by run; a run that succeeded materialized everything the job selects.
    Dagster reads the same storage, and nothing went to the SQLite files it uses by default."""
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

    from streaming_pipeline.definitions import defs

    job = "raw_rides_downstream_job"
    wait_until(
        live,
        "no sensor run in flight",
        lambda: {status for _, status, _ in live.query(SENSOR_RUNS, (SENSOR_NAME,))} <= {"SUCCESS", "FAILURE"},
    )
    runs = live.query(SENSOR_RUNS, (SENSOR_NAME,))
    assert {name for _, _, name in runs} == {job}, runs
    run_ids = [run_id for run_id, _, _ in runs]
    succeeded = [run_id for run_id, status, _ in runs if status == "SUCCESS"]
    failed = [run_id for run_id, status, _ in runs if status == "FAILURE"]
    assert succeeded, runs

    def events(event_type: dg.DagsterEventType) -> list[tuple[Any, ...]]:
        return live.query(
            "SELECT run_id, asset_key FROM event_logs WHERE dagster_event_type = %s AND run_id = ANY(%s)",
            (event_type.value, run_ids),
        )

    assert sorted(r for r, _ in events(dg.DagsterEventType.RUN_SUCCESS)) == sorted(succeeded)
    assert sorted(r for r, _ in events(dg.DagsterEventType.RUN_FAILURE)) == sorted(failed)
    materialized = events(dg.DagsterEventType.ASSET_MATERIALIZATION)
    keys_by_run = {
        run_id: {"/".join(json.loads(key)) for rid, key in materialized if rid == run_id} for run_id in run_ids
    }
    job_assets = {k.to_user_string() for k in defs.resolve_job_def(job).asset_layer.selected_asset_keys}
    assert {"raw_rides", "vendor_counts"} <= job_assets
    assert any(keys_by_run[run_id] == job_assets for run_id in succeeded), keys_by_run

    instance = live.instance()
    assert isinstance(instance.run_storage, PostgresRunStorage)
    assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
    seen = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR_NAME}))
    assert sorted(run.run_id for run in seen) == sorted(run_ids)
    assert sorted(p.relative_to(live.dagster_home) for p in live.dagster_home.rglob("*.db")) == []


def test_a_run_that_failed_while_the_registry_was_down_is_retried_once_it_is_back(live: Live) -> None:
    kafka, registry = _resources(live)
    rides = list(synthetic_rides(5, SyntheticOptions(seed=202)))
    messages = _frames_while_the_registry_is_up(registry, rides)
    before = live.count("raw_rides")
    stop_pid(_secured(live).registry_pid, timeout=15)
    produce_raw(kafka, RIDES_TOPIC, messages)
    PRODUCED.extend(rides)

    def failed_sensor_runs() -> int:
        return len(
            live.instance().get_runs(
                filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR_NAME}, statuses=[dg.DagsterRunStatus.FAILURE])
            )
        )

    wait_until(live, "a sensor run fails while the registry is down", lambda: failed_sensor_runs() >= 1)
    assert live.count("raw_rides") == before  # nothing was taken while the registry was down

    restarted = _secured(live)
    assert restarted.schema_registry_url == live.stack.schema_registry_url
    wait_until(live, "the retried run brings the 5 rides", lambda: live.count("raw_rides") == before + 5)
    expected = expected_vendor_counts(PRODUCED)
    wait_until(live, f"vendor_counts == {expected}", lambda: live.vendor_counts() == expected)


def _frames_while_the_registry_is_up(
    registry: RegistryClient, rides: list[dict[str, Any]]
) -> list[tuple[bytes, bytes]]:
    """(key, value) Confluent frames of `rides`, encoded while the registry is up, to be sent while it is down (the
    producer itself needs no registry then). Registers both schemas first: the test may be the module's first."""
    schema, key_schema = load_schema("ride_value.avsc"), load_schema("ride_key.avsc")
    registry.register(f"{RIDES_TOPIC}-value", schema)
    registry.register(f"{RIDES_TOPIC}-key", key_schema)
    return [
        (
            avro_frame(registry, key_schema, ride["vendor_id"], RIDES_TOPIC, field=_key_field()),
            avro_frame(registry, schema, ride, RIDES_TOPIC),
        )
        for ride in rides
    ]


def _key_field():  # type: ignore[no-untyped-def]
    from confluent_kafka.serialization import MessageField

    return MessageField.KEY


def test_steps_of_a_manual_run_and_a_sensor_run_never_work_on_the_same_checkpoint_at_once(live: Live) -> None:
    from dagster_graphql import DagsterGraphQLClient

    kafka, registry = _resources(live)
    rides = list(synthetic_rides(3, SyntheticOptions(seed=303)))
    before = live.count("raw_rides")
    instance = live.instance()
    seen = {run.run_id for run in instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR_NAME}))}
    assert produce(kafka, registry, RIDES_TOPIC, rows_from_records(rides), show_progress=False).sent == 3
    PRODUCED.extend(rides)

    def new_sensor_run_started() -> bool:
        runs = live.instance().get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR_NAME}))
        return any(r.run_id not in seen and r.status != dg.DagsterRunStatus.QUEUED for r in runs)

    wait_until(live, "the sensor launches a run", new_sensor_run_started)
    client = DagsterGraphQLClient("127.0.0.1", port_number=live.webserver_port)
    manual_run_id = client.submit_job_execution("raw_rides_downstream_job")

    def finished(run_id: str) -> bool:
        run = live.instance().get_run_by_id(run_id)
        return run is not None and run.is_finished

    wait_until(live, "the manual run finishes", lambda: finished(manual_run_id))
    assert live.instance().get_run_by_id(manual_run_id).status == dg.DagsterRunStatus.SUCCESS
    wait_until(live, "3 more rides in raw_rides", lambda: live.count("raw_rides") == before + 3)

    # Every step that ran the raw_rides query, in any run, whoever started it: their [start, end] intervals never
    # overlap (a run holds the checkpoint only while its bronze step runs; its silver and gold steps may overlap the
    # next run's bronze step).
    intervals = _step_intervals(live.instance(), "raw_rides")
    assert len(intervals) >= 3
    for (_, previous_end, previous_run), (start, _, run) in itertools.pairwise(intervals):
        assert start >= previous_end, f"steps of runs {previous_run} and {run} overlapped on raw_rides: {intervals}"
    assert manual_run_id in {run for _, _, run in intervals}


def _step_intervals(instance: dg.DagsterInstance, step_key: str) -> list[tuple[float, float, str]]:
    """(start, end, run id) of every finished step `step_key` in the instance's runs, sorted by start."""
    intervals = []
    for record in instance.get_run_records():
        events = instance.all_logs(
            record.dagster_run.run_id,
            of_type={
                dg.DagsterEventType.STEP_START,
                dg.DagsterEventType.STEP_SUCCESS,
                dg.DagsterEventType.STEP_FAILURE,
            },
        )
        times = [e.timestamp for e in events if e.step_key == step_key]
        if times:
            assert len(times) == 2, f"step {step_key} of run {record.dagster_run.run_id} has not finished: {times}"
            intervals.append((min(times), max(times), record.dagster_run.run_id))
    return sorted(intervals)


def test_replay_with_the_sensor_paused_rebuilds_raw_rides_and_gold_over_the_engine(live: Live) -> None:
    """The README's way out, typed as a user types it: pause the offset sensor, then `streaming-pipeline replay
    raw_rides`. Its Spark session is a Connect client of the stack's engine, beside the session of the job it runs."""

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(command), cwd=REPO_ROOT, env=live.env, capture_output=True, text=True, timeout=600)

    paused = run(sys.executable, "-m", "dagster", "sensor", "stop", SENSOR_NAME, "-w", "workspace.yaml")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    in_flight = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    wait_until(
        live, "no run in flight", lambda: not live.instance().get_runs(filters=dg.RunsFilter(statuses=in_flight))
    )
    assert live.count("raw_rides") == len(PRODUCED)
    version_before = (
        live.spark.sql(f"DESCRIBE HISTORY delta.`{live.lakehouse / 'raw_rides'}`").agg({"version": "max"}).first()[0]
    )

    replayed = run(sys.executable, "-m", "streaming_pipeline.devstack.cli", "replay", "raw_rides")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    n = len(PRODUCED)
    assert f"{n} row(s) before, {n} after; the old content stays readable as VERSION AS OF {version_before}" in (
        replayed.stdout
    ), replayed.stdout
    assert live.count("raw_rides") == len(PRODUCED)
    assert live.vendor_counts() == expected_vendor_counts(PRODUCED)
    # The catalog's names still lead to the rebuilt tables.
    _, (vendors, rides_by_name) = _by_name(live, "SELECT count(*) FROM bronze.raw_rides")
    assert vendors == expected_vendor_counts(PRODUCED) and rides_by_name == [[len(PRODUCED)]]
    # The replay's run is in the UI's instance, and the old content stays readable.
    runs = live.instance().get_runs(filters=dg.RunsFilter(tags={"streaming-pipeline/replay": "raw_rides"}))
    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS]
    old = live.spark.read.format("delta").option("versionAsOf", version_before).load(str(live.lakehouse / "raw_rides"))
    assert old.count() == len(PRODUCED)


def test_the_continuous_mode_streams_produced_rides_to_gold_exactly_once_through_a_kill_of_its_run(
    live: Live, tmp_path: Path
) -> None:
    """Switching to `LIVE_MODE=continuous` (dagster dev restarted with it, same stack and lakehouse): the sensor
    launches the continuous run, which carries rides produced under load to raw_rides and vendor_counts exactly
    once from where the triggered runs left them, with no triggered run; its process SIGKILLed under load, the
    sensor relaunches it; the schedule runs the asset checks beside it (every minute here), and they pass while the
    tables stream. The continuous run goes on for the next tests."""
    kafka, registry = _resources(live)
    env = {**_continuous_env(live), "CONTINUOUS_CHECKS_CRON": "* * * * *"}
    dagster_dev = live.restart_dagster_dev(env, tmp_path / "dagster-dev-continuous.log")

    def continuous_run() -> dg.DagsterRun | None:
        return _continuous_run(live)

    live_helpers.wait_until(
        "the sensor launches the continuous run", lambda: continuous_run() is not None, log=dagster_dev.log_file
    )
    triggered_before = _live_job_runs(live)
    rides = list(synthetic_rides(LOAD, SyntheticOptions(seed=404)))
    result = produce(kafka, registry, RIDES_TOPIC, rows_from_records(rides), rate=400, show_progress=False)
    assert (result.sent, result.failed) == (LOAD, 0)
    PRODUCED.extend(rides)
    expected = expected_vendor_counts(PRODUCED)
    live_helpers.wait_until(
        f"{len(PRODUCED)} rides in raw_rides",
        lambda: live.count("raw_rides") == len(PRODUCED),
        log=dagster_dev.log_file,
    )
    live_helpers.wait_until(
        f"vendor_counts == {expected}", lambda: live.vendor_counts() == expected, log=dagster_dev.log_file
    )
    distinct = live.spark.read.format("delta").load(str(live.lakehouse / "raw_rides"))
    assert distinct.select("kafka_partition", "kafka_offset").distinct().count() == len(PRODUCED)
    # The offset sensors stood aside: no triggered run took any of them.
    assert _live_job_runs(live) == (triggered_before)
    # The run reports the tables it streams as materializations of their assets, at its report interval (5 s
    # here), so the report of vendor_counts' last commit may come a little after the counts are exact.
    run_id = continuous_run().run_id

    def reported_by_the_continuous_run() -> bool:
        materialization = live.instance().get_latest_materialization_event(dg.AssetKey("vendor_counts"))
        return materialization is not None and materialization.run_id == run_id

    live_helpers.wait_until(
        "the continuous run reports vendor_counts", reported_by_the_continuous_run, log=dagster_dev.log_file
    )
    # Dagster's freshness daemon evaluates the tables' freshness policies (continuous mode only).
    live_helpers.wait_until(
        "vendor_counts is fresh",
        lambda: _freshness(live, "vendor_counts") == "PASS",
        log=dagster_dev.log_file,
    )

    # The run's process SIGKILLed at a random moment while rides stream in: the sensor marks it failed and
    # launches another, which first stops the killed run's queries (still running on the engine, in the killed
    # run's Spark Connect session) and then takes over the checkpoints; every ride lands once.
    killed = continuous_run()
    assert killed is not None
    pid = run_pid(live.instance(), killed.run_id)
    assert pid is not None
    more_rides = list(synthetic_rides(KILL_LOAD, SyntheticOptions(seed=406)))
    _kill_under_load(live, more_rides, rate=400, pid=pid, latest=KILL_LOAD / 400 - 0.5)
    PRODUCED.extend(more_rides)
    live_helpers.wait_until(
        "another continuous run",
        lambda: (run := continuous_run()) is not None and run.run_id != killed.run_id,
        log=dagster_dev.log_file,
    )
    assert live.instance().get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
    relaunched = continuous_run()
    assert relaunched is not None

    live_helpers.wait_until(
        "the new run stops the killed run's queries",
        lambda: _logged(live, relaunched.run_id, f"run {killed.run_id} left running when its process died"),
        log=dagster_dev.log_file,
    )
    # Once run monitoring has freed the killed run's pools, the new run streams: rides produced now are its own.
    live_helpers.wait_until(
        "the new run streams",
        lambda: _logged(live, relaunched.run_id, "vendor_counts: streaming"),
        log=dagster_dev.log_file,
    )
    after_restart = list(synthetic_rides(200, SyntheticOptions(seed=407)))
    # A zone renamed on the taxi_zones table topic while the run streams: the rides enriched before keep the old name,
    # the rides produced after it get the new one (each micro-batch joins the zones as they are then).
    renamed = _rename_a_zone(live, dagster_dev.log_file, PRODUCED, after_restart)
    assert produce(kafka, registry, RIDES_TOPIC, rows_from_records(after_restart), show_progress=False).sent == 200
    PRODUCED.extend(after_restart)
    _wait_until_exact(live, dagster_dev.log_file, "after the kill")
    live_helpers.wait_until(
        "every ride enriched", lambda: live.count("rides_enriched") == len(PRODUCED), log=dagster_dev.log_file
    )
    enriched = live.spark.read.format("delta").load(str(live.lakehouse / "rides_enriched"))
    names = {
        (r.kafka_partition, r.kafka_offset): r.pu_zone
        for r in enriched.where(f"pu_location_id = {renamed[0]}")
        .select("kafka_partition", "kafka_offset", "pu_zone")
        .collect()
    }
    before, after = _pu_zone_rides(live, renamed[0], renamed[3])
    assert before and after and {names[k] for k in before} == {renamed[1]} and {names[k] for k in after} == {renamed[2]}

    # The schedule's check runs read the tables while the queries write them (the first minute's tick came
    # during the load or the kill above): every check of the streaming tables passed.
    def checked() -> list[dg.DagsterRun]:
        runs = live.instance().get_runs(filters=dg.RunsFilter(job_name="live_checks_job"))
        return [run for run in runs if run.is_finished]

    live_helpers.wait_until("a scheduled check run", lambda: bool(checked()), log=dagster_dev.log_file)
    check_run = checked()[-1]  # the first one
    assert check_run.status == dg.DagsterRunStatus.SUCCESS
    assert check_run.tags.get("dagster/schedule_name") == "live_checks_schedule"
    records = (
        live.instance()
        .get_records_for_run(check_run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        .records
    )
    evaluations = [record.event_log_entry.dagster_event.event_specific_data for record in records]
    assert len(evaluations) == 21 and {e.check_name for e in evaluations} == set(LIVE_CHECKS)
    assert [(e.asset_key.to_user_string(), e.check_name) for e in evaluations if not e.passed] == []


def test_a_new_field_registered_while_the_continuous_queries_run_reaches_the_silver_tables(live: Live) -> None:
    """A compatible version with a new field, registered and produced while the continuous queries run: the Delta
    streams of raw_rides see its schema change and restart, and the field reaches the branches and rides_enriched,
    null in every older row, with no failed query; the UI's column schema shows it. The next tests' producers go
    back to the first version."""
    log = live.dagster_dev.log_file
    run = _continuous_run(live)
    assert run is not None
    kafka, registry = _resources(live)
    registry.register(f"{RIDES_TOPIC}-value", evolution.V2)
    key_schema = load_schema("ride_key.avsc")
    rides = [
        {**ride, evolution.NEW_FIELD: round(1 + i / 4, 2)}
        for i, ride in enumerate(synthetic_rides(60, SyntheticOptions(seed=413)))
    ]
    placed = produce_raw(
        kafka,
        RIDES_TOPIC,
        [
            (
                avro_frame(registry, key_schema, ride["vendor_id"], RIDES_TOPIC, field=_key_field()),
                avro_frame(registry, evolution.V2, ride, RIDES_TOPIC),
            )
            for ride in rides
        ],
    )
    PRODUCED.extend(rides)
    _wait_until_exact(live, log, "after a new field")
    fees = {coordinate: ride for coordinate, ride in zip(placed, rides, strict=True)}

    def expected(table: str) -> dict[tuple[int, int], float]:
        def kept(ride: dict[str, Any]) -> bool:
            amount = ride["total_amount"]
            if table == "high_amount_rides":
                return amount is not None and amount >= evolution.THRESHOLD
            if table == "low_amount_rides":
                return amount is not None and amount < evolution.THRESHOLD
            return True

        return {c: ride[evolution.NEW_FIELD] for c, ride in fees.items() if kept(ride)}

    def carried(table: str) -> dict[tuple[int, int], float]:
        frame = live.spark.read.format("delta").load(str(live.lakehouse / table))
        if evolution.NEW_FIELD not in frame.columns:
            return {}
        rows = frame.where(frame[evolution.NEW_FIELD].isNotNull()).collect()
        return {(r.kafka_partition, r.kafka_offset): r[evolution.NEW_FIELD] for r in rows}

    for table in ("raw_rides", "high_amount_rides", "low_amount_rides", "rides_enriched"):
        want = expected(table)
        live_helpers.wait_until(f"{table} carries the new field", lambda t=table, w=want: carried(t) == w, log=log)
    live_helpers.wait_until(
        "rides_enriched holds every ride", lambda: live.count("rides_enriched") == len(PRODUCED), log=log
    )
    assert _logged(live, run.run_id, "a source table's schema changed, restarting the query")
    for query in ("high_amount_rides", "low_amount_rides", "rides_enriched"):
        assert not _logged(live, run.run_id, f"{query}: failed"), f"{query} failed after the schema change"
    assert _continuous_run(live) is not None and _continuous_run(live).run_id == run.run_id  # type: ignore[union-attr]

    def column_names(table: str) -> list[str]:
        event = live.instance().get_latest_materialization_event(dg.AssetKey(table))
        materialization = event.asset_materialization if event is not None else None
        schema = materialization.metadata.get("dagster/column_schema") if materialization is not None else None
        return [c.name for c in schema.value.columns] if schema is not None else []  # type: ignore[attr-defined]

    live_helpers.wait_until(
        "the continuous run reports rides_enriched's new column",
        lambda: evolution.NEW_FIELD in column_names("rides_enriched"),
        log=log,
    )


def test_the_continuous_mode_stays_exact_when_the_engine_a_leader_the_cluster_and_the_registry_go_away_until_terminated(
    live: Live, tmp_path: Path
) -> None:
    """The Spark Connect server SIGKILLed while rides stream in, and started again as `stack up` does: the run
    fails, the sensor relaunches it, and the new run goes on from the checkpoints. Then the leader of a partition
    SIGKILLed under load and started again; the whole Kafka cluster stopped for 10 s and started again; then the
    registry: the same run goes on. Every ride lands once, carried by the continuous runs alone. Terminated from the
    UI's API, the run stops every query. It goes on with the continuous run the previous test left (or starts one)."""
    kafka, registry = _resources(live)
    stack_dir = live.engine_dir
    dagster_dev = live.dagster_dev
    if dagster_dev.env.get("LIVE_MODE") != "continuous":
        dagster_dev = live.restart_dagster_dev(_continuous_env(live), tmp_path / "dagster-dev-faults.log")
    log = dagster_dev.log_file
    _set_sensor(dagster_dev, "continuous_streams_sensor", running=True)  # in case the module does not run in order
    # The offset sensor the previous test started would carry rides while the continuous run is in back-off.
    _set_sensor(dagster_dev, SENSOR_NAME, running=False)
    live_helpers.wait_until("the continuous run", lambda: _continuous_run(live) is not None, log=log)
    first = _continuous_run(live)
    assert first is not None
    # Its queries run in its Spark Connect session (the windows start last): an engine killed before, while the
    # run was starting, would leave the run nothing to lose.
    live_helpers.wait_until(
        "the continuous run streams",
        lambda: _logged(live, first.run_id, "ride_window_aggregates: streaming"),
        log=log,
    )

    # The engine dies a random moment into a load; `stack up` starts it again on its port.
    engine = EmbeddedStack(stack_dir, prefer_standard_ports=False).up(timeout=60)  # all running: where they are
    assert engine.spark_pid is not None
    rides = list(synthetic_rides(KILL_LOAD, SyntheticOptions(seed=410)))
    _kill_under_load(live, rides, rate=400, pid=engine.spark_pid, latest=KILL_LOAD / 400 - 0.5)
    PRODUCED.extend(rides)
    restarted = EmbeddedStack(stack_dir, prefer_standard_ports=False).up(timeout=120)
    assert restarted.spark_remote == engine.spark_remote and restarted.spark_pid != engine.spark_pid
    live_helpers.wait_until(
        "the run that lost its engine fails",
        lambda: _status(live, first.run_id) == dg.DagsterRunStatus.FAILURE,
        log=log,
    )
    live_helpers.wait_until(
        "the sensor relaunches the continuous run",
        lambda: (run := _continuous_run(live)) is not None and run.run_id != first.run_id,
        log=log,
    )
    _wait_until_exact(live, log, "after the engine restarted")
    relaunched = _continuous_run(live)
    assert relaunched is not None

    # A partition's leader killed under load: the other two nodes take over its partitions, and the run goes on.
    _kill_a_leader_under_load(live, list(synthetic_rides(KILL_LOAD, SyntheticOptions(seed=415))), log)

    # The whole cluster away for 10 s: the run waits for it, and what is produced once it is back lands once too.
    nodes = _secured(live).kafka_node_pids
    with ThreadPoolExecutor(len(nodes)) as pool:  # together: a node stopped after the others waits for a quorum
        list(pool.map(lambda pid: stop_pid(pid, timeout=30), nodes.values()))
    time.sleep(10)
    back = _secured(live)
    assert back.bootstrap_servers == live.stack.bootstrap_servers
    more = list(synthetic_rides(300, SyntheticOptions(seed=411)))
    assert produce(kafka, registry, RIDES_TOPIC, rows_from_records(more), show_progress=False).sent == 300
    PRODUCED.extend(more)
    _wait_until_exact(live, log, "after the broker came back")

    # The registry away: rides encoded before, sent while it is down, wait in Kafka; raw_rides' micro-batch
    # fails for want of their schemas and is retried with back-off, and once the registry is back they land once
    # (none as a dead letter).
    offline = list(synthetic_rides(50, SyntheticOptions(seed=412)))
    messages = _frames_while_the_registry_is_up(registry, offline)
    failures_before = log.read_text(errors="replace").count("raw_rides: failed (")
    stop_pid(back.registry_pid, timeout=15)
    produce_raw(kafka, RIDES_TOPIC, messages)
    live_helpers.wait_until(
        "raw_rides fails while the registry is away",
        lambda: log.read_text(errors="replace").count("raw_rides: failed (") > failures_before,
        log=log,
    )
    assert live.count("raw_rides") == len(PRODUCED)  # nothing taken while the registry is away
    PRODUCED.extend(offline)
    registry_back = _secured(live)
    assert registry_back.schema_registry_url == back.schema_registry_url
    _wait_until_exact(live, log, "after the registry came back")
    after = _continuous_run(live)
    assert after is not None and after.run_id == relaunched.run_id  # neither outage failed the run

    # Terminated from the UI's API with its sensor stopped (the offset sensors rest in this mode): no query goes on.
    _stop_the_continuous_run(live, dagster_dev)
    offsets = live.lakehouse / "_checkpoints" / "raw_rides" / "offsets"
    batches = sorted(offsets.iterdir())
    more = list(synthetic_rides(20, SyntheticOptions(seed=405)))
    assert produce(kafka, registry, RIDES_TOPIC, rows_from_records(more), show_progress=False).sent == 20
    time.sleep(5)  # a query still running would have started a micro-batch (500 ms trigger) by now
    assert sorted(offsets.iterdir()) == batches
    assert live.count("raw_rides") == len(PRODUCED)
    PRODUCED.extend(more)  # in Kafka only: the next mode carries them


def test_switching_back_to_triggered_loses_and_duplicates_nothing_through_a_leader_kill(
    live: Live, tmp_path: Path
) -> None:
    """continuous -> triggered on the same checkpoints (triggered -> continuous is the continuous test's start): the
    offset sensor's runs take the rides the terminated continuous run left in Kafka and rides produced now, while
    the leader of a partition of the rides topic is SIGKILLed under that load and started again; every table is
    exact, with no continuous run."""
    sensor_runs_before = _live_job_runs(live)
    dagster_dev = live.restart_dagster_dev(live.env, tmp_path / "dagster-dev-triggered.log")
    _set_sensor(dagster_dev, SENSOR_NAME, running=True)  # paused since the replay
    _kill_a_leader_under_load(live, list(synthetic_rides(KILL_LOAD, SyntheticOptions(seed=414))), dagster_dev.log_file)
    # The offset sensor's runs carried them: triggered mode is back, with no continuous run.
    assert _live_job_runs(live) > sensor_runs_before
    assert _continuous_run(live) is None


def _kill_under_load(live: Live, rides: list[dict[str, Any]], *, rate: int, pid: int, latest: float) -> None:
    """Produce `rides` at `rate` a second and SIGKILL process `pid` 0.5 to `latest` s into that load; every ride is
    sent all the same."""
    kafka, registry = _resources(live)
    delay = random.Random().uniform(0.5, latest)
    with ThreadPoolExecutor(1) as pool:
        producing = pool.submit(
            produce, kafka, registry, RIDES_TOPIC, rows_from_records(rides), rate=rate, show_progress=False
        )
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        assert producing.result().sent == len(rides), f"killed {delay:.1f} s into the load"


def _kill_a_leader_under_load(live: Live, rides: list[dict[str, Any]], log: Path) -> None:
    """SIGKILL the Kafka node that leads partition 0 of the rides topic a random moment into a load of `rides` (the
    producer's idempotent writes wait for two in-sync replicas), start it again as `stack up` does 5 s later, and
    wait until every ride is in raw_rides once and vendor_counts counts each once."""
    kafka, _ = _resources(live)
    leader = kafka.admin().list_topics(RIDES_TOPIC, timeout=10).topics[RIDES_TOPIC].partitions[0].leader
    pid = _secured(live).kafka_node_pids[leader]
    assert pid is not None
    _kill_under_load(live, rides, rate=400, pid=pid, latest=len(rides) / 400 - 0.5)
    PRODUCED.extend(rides)
    time.sleep(5)
    restarted = _secured(live)
    assert restarted.kafka_node_pids[leader] not in (None, pid)
    _wait_until_exact(live, log, f"after Kafka node {leader}, the leader of partition 0, was killed")


def _wait_until_exact(live: Live, log: Path, when: str = "") -> None:
    """Wait until raw_rides holds every ride of PRODUCED and vendor_counts counts each once (counted here from the
    produced records), then check that no Kafka record is in raw_rides twice."""
    expected = expected_vendor_counts(PRODUCED)
    live_helpers.wait_until(
        f"{len(PRODUCED)} rides in raw_rides {when}".strip(), lambda: live.count("raw_rides") == len(PRODUCED), log=log
    )
    live_helpers.wait_until(
        f"vendor_counts == {expected} {when}".strip(), lambda: live.vendor_counts() == expected, log=log
    )
    raw = live.spark.read.format("delta").load(str(live.lakehouse / "raw_rides"))
    assert raw.select("kafka_partition", "kafka_offset").distinct().count() == len(PRODUCED)


def _continuous_env(live: Live) -> dict[str, str]:
    """`dagster dev`'s environment in the continuous mode. Reports every 5 s, and Dagster's freshness daemon every
    5 s (30 s by default), to see a table fresh sooner; the queries downstream of raw_rides trigger every 30 s (2
    minutes by default), to see them take new rides sooner."""
    return {
        **live.env,
        "LIVE_MODE": "continuous",
        "CONTINUOUS_REPORT_SECONDS": "5",
        "CONTINUOUS_DOWNSTREAM_TRIGGER_INTERVAL": "30 seconds",
        "FRESHNESS_DAEMON_INTERVAL_SECONDS": "5",
    }


def _continuous_run(live: Live) -> dg.DagsterRun | None:
    runs = live.instance().get_runs(
        filters=dg.RunsFilter(job_name="continuous_streams_job", statuses=[dg.DagsterRunStatus.STARTED])
    )
    return runs[0] if runs else None


def _set_sensor(dagster_dev: DagsterDev, name: str, *, running: bool) -> None:
    """Start or stop a sensor as the UI's toggle does, with Dagster's GraphQL mutations through the running webserver
    (`dagster sensor start/stop`, which the replay test runs as the docs say, loads the code location anew: 4 to
    6 s a call)."""
    import json
    import urllib.request

    def graphql(query: str, variables: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{dagster_dev.port}/graphql",
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        assert "errors" not in answer, answer
        return dict(answer["data"])

    selector = {"repositoryLocationName": "streaming_pipeline", "repositoryName": "__repository__", "sensorName": name}
    if running:
        started = graphql(
            "mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) "
            "{ ... on Sensor { sensorState { status } } ... on PythonError { message } } }",
            {"s": selector},
        )
        assert started["startSensor"].get("sensorState") == {"status": "RUNNING"}, started
        return
    found = graphql(
        "query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) "
        "{ ... on Sensor { sensorState { id } } ... on PythonError { message } } }",
        {"s": selector},
    )
    stopped = graphql(
        "mutation($id: String) { stopSensor(id: $id) "
        "{ ... on StopSensorMutationResult { instigationState { status } } ... on PythonError { message } } }",
        {"id": found["sensorOrError"]["sensorState"]["id"]},
    )
    assert stopped["stopSensor"].get("instigationState") == {"status": "STOPPED"}, stopped


def _stop_the_continuous_run(live: Live, dagster_dev: DagsterDev) -> None:
    """Stop the sensor that keeps the continuous run alive, terminate the run from the UI's API, wait until it ends."""
    from dagster_graphql import DagsterGraphQLClient

    _set_sensor(dagster_dev, "continuous_streams_sensor", running=False)
    run = _continuous_run(live)
    assert run is not None
    DagsterGraphQLClient("127.0.0.1", port_number=dagster_dev.port).terminate_run(run.run_id)
    live_helpers.wait_until(
        "the continuous run ends",
        lambda: live.instance().get_run_by_id(run.run_id).is_finished,
        log=dagster_dev.log_file,
    )
    assert live.instance().get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED


def _logged(live: Live, run_id: str, text: str) -> bool:
    """Whether the run's log has a message containing `text`."""
    return any(text in entry.user_message for entry in live.instance().all_logs(run_id))


def _status(live: Live, run_id: str) -> dg.DagsterRunStatus | None:
    run = live.instance().get_run_by_id(run_id)
    return run.status if run is not None else None


def _freshness(live: Live, table: str) -> str | None:
    """The freshness state Dagster's freshness daemon last recorded for `table` (PASS, WARN, FAIL, ...)."""
    records = live.instance().get_freshness_state_records([dg.AssetKey(table)])
    record = records.get(dg.AssetKey(table))
    return record.freshness_state.value if record is not None else None


def _live_job_runs(live: Live) -> int:
    """How many runs raw_rides' live job has had (the offset sensor's)."""
    return len(live.instance().get_runs(filters=dg.RunsFilter(job_name="raw_rides_downstream_job")))
