"""The live path as a user runs it: the embedded stack (with the Spark Connect engine) and `dagster dev`
(webserver + daemon, sensors as they start by default) as subprocesses. Nothing is materialized by hand.

The tests share one stack and one `dagster dev`, in file order: rides reach gold; a run that fails while
the registry is down is retried once it is back; no two runs ever worked on a checkpoint at once; and the
README's replay, with the sensor paused, rebuilds raw_rides and gold over the engine.
No test asserts a time: waits are bounded only so that a broken path fails instead of hanging.
"""

from __future__ import annotations

import csv
import itertools
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from streaming_pipeline.devstack.embedded.dagster_dev import DagsterDev
from streaming_pipeline.devstack.embedded.processes import stop_pid
from streaming_pipeline.devstack.embedded.stack import EmbeddedStack, StackInfo, running_stack
from streaming_pipeline.devstack.producer import produce, rows_from_records
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.registry_client import RegistryClient
from streaming_pipeline.resources import KafkaResource
from streaming_pipeline.schemas import load_schema
from streaming_pipeline.tables import RIDES_TOPIC
from streaming_pipeline_tests import live_helpers
from streaming_pipeline_tests.kafka_helpers import REPO_ROOT, avro_frame, produce_raw
from streaming_pipeline_tests.live_helpers import WAIT_SECONDS, delta_count, delta_vendor_counts, expected_vendor_counts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SENSOR_NAME = "raw_rides_offset_sensor"


@dataclass
class Live:
    stack: StackInfo
    lakehouse: Path
    dagster_home: Path
    webserver_port: int
    log: Path
    spark: Any
    env: dict[str, str]  # what `dagster dev` runs with: the stack's `stack env` and LAKEHOUSE_DIR

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.dagster_home))

    def count(self, table: str) -> int:
        return delta_count(self.spark, self.lakehouse / table)

    def vendor_counts(self) -> dict[int, int]:
        return delta_vendor_counts(self.spark, self.lakehouse / "vendor_counts")


def wait_until(live: Live, what: str, condition: Callable[[], bool]) -> None:
    live_helpers.wait_until(what, condition, log=live.log, seconds=WAIT_SECONDS)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[Live]:
    """The tables are read with the test session's own in-process Spark (pytest's process stays a classic
    driver: pyspark does not mix Connect and classic sessions in one process)."""
    root = tmp_path_factory.mktemp("live")
    with running_stack(root / "stack", spark=True) as stack:
        assert stack.spark_remote and stack.dagster_home
        env = {**stack.env(), "LAKEHOUSE_DIR": str(root / "lakehouse"), "OFFSET_SENSOR_RETRY_BACKOFF_SECONDS": "2"}
        with DagsterDev(env, root / "dagster-dev.log") as dagster_dev:  # the README's `dagster dev -w workspace.yaml`
            yield Live(
                stack,
                root / "lakehouse",
                stack.dagster_home,
                dagster_dev.port,
                dagster_dev.log_file,
                spark,
                dict(dagster_dev.env),
            )


PRODUCED: list[dict[str, Any]] = []


def _resources(live: Live) -> tuple[KafkaResource, RegistryClient]:
    return (
        KafkaResource(bootstrap_servers=live.stack.bootstrap_servers),
        RegistryClient(live.stack.schema_registry_url),
    )


def test_produced_rides_reach_raw_rides_and_vendor_counts_with_no_manual_step(live: Live) -> None:
    kafka, registry = _resources(live)
    rides = list(synthetic_rides(7, SyntheticOptions(seed=101)))
    result = produce(kafka, registry, RIDES_TOPIC, rows_from_records(rides), show_progress=False)
    assert (result.sent, result.failed) == (7, 0)
    PRODUCED.extend(rides)

    wait_until(live, "7 rides in raw_rides", lambda: live.count("raw_rides") == 7)
    expected = expected_vendor_counts(PRODUCED)
    wait_until(live, f"vendor_counts == {expected}", lambda: live.vendor_counts() == expected)
    # One sensor run carried them from Kafka to gold: it selected bronze and everything downstream.
    runs = live.instance().get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR_NAME}))
    assert runs and all(run.job_name == "raw_rides_to_gold_job" for run in runs)
    # The windows are the run's last step (vendor_counts comes right after bronze): they follow in the same run.
    wait_until(live, "windows in ride_window_aggregates", lambda: live.count("ride_window_aggregates") > 0)
    # The automation sensor loaded taxi_zones (missing in a new lakehouse), so the rides are enriched live too.
    with (REPO_ROOT / "streaming_pipeline" / "data" / "taxi_zone_lookup.csv").open(newline="") as handle:
        zones = {int(row["locationid"]): row["zone"] for row in csv.DictReader(handle)}
    expected_zones = sorted((zones.get(r["pu_location_id"]), zones.get(r["do_location_id"])) for r in rides)

    def enriched_zones() -> list[tuple[Any, Any]]:
        if not live.count("rides_enriched"):
            return []
        rows = live.spark.read.format("delta").load(str(live.lakehouse / "rides_enriched")).collect()
        return sorted((r.pu_zone, r.do_zone) for r in rows)

    wait_until(live, f"rides_enriched == {expected_zones}", lambda: enriched_zones() == expected_zones)


def test_a_run_that_failed_while_the_registry_was_down_is_retried_once_it_is_back(live: Live) -> None:
    kafka, registry = _resources(live)
    schema = load_schema("ride_value.avsc")
    key_schema = load_schema("ride_key.avsc")
    registry.register("rides-value", schema)
    rides = list(synthetic_rides(5, SyntheticOptions(seed=202)))
    # Encoded while the registry is up; sent while it is down (the producer itself needs no registry then).
    messages = [
        (
            avro_frame(registry, key_schema, ride["vendor_id"], RIDES_TOPIC, field=_key_field()),
            avro_frame(registry, schema, ride, RIDES_TOPIC),
        )
        for ride in rides
    ]
    before = live.count("raw_rides")
    stop_pid(live.stack.registry_pid, timeout=15)
    produce_raw(live.stack.bootstrap_servers, RIDES_TOPIC, messages)
    PRODUCED.extend(rides)

    def failed_sensor_runs() -> int:
        return len(
            live.instance().get_runs(
                filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR_NAME}, statuses=[dg.DagsterRunStatus.FAILURE])
            )
        )

    wait_until(live, "a sensor run fails while the registry is down", lambda: failed_sensor_runs() >= 1)
    assert live.count("raw_rides") == before  # nothing was taken while the registry was down

    restarted = EmbeddedStack(live.stack.directory, prefer_standard_ports=False).up(timeout=60)
    assert restarted.schema_registry_url == live.stack.schema_registry_url
    wait_until(live, "the retried run brings the 5 rides", lambda: live.count("raw_rides") == before + 5)
    expected = expected_vendor_counts(PRODUCED)
    wait_until(live, f"vendor_counts == {expected}", lambda: live.vendor_counts() == expected)


def _key_field():  # type: ignore[no-untyped-def]
    from confluent_kafka.serialization import MessageField

    return MessageField.KEY


def test_a_manual_run_and_a_sensor_run_never_work_on_the_same_checkpoint_at_once(live: Live) -> None:
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
    manual_run_id = client.submit_job_execution("raw_rides_to_gold_job")

    def finished(run_id: str) -> bool:
        run = live.instance().get_run_by_id(run_id)
        return run is not None and run.is_finished

    wait_until(live, "the manual run finishes", lambda: finished(manual_run_id))
    assert live.instance().get_run_by_id(manual_run_id).status == dg.DagsterRunStatus.SUCCESS
    wait_until(live, "3 more rides in raw_rides", lambda: live.count("raw_rides") == before + 3)

    # Every run that materialized raw_rides, whoever started it: their [start, end] intervals never overlap.
    records = live.instance().get_run_records()
    on_checkpoint = [
        r
        for r in records
        if r.dagster_run.job_name == "raw_rides_to_gold_job"
        or (r.dagster_run.asset_selection and dg.AssetKey("raw_rides") in r.dagster_run.asset_selection)
    ]
    intervals = sorted((r.start_time, r.end_time) for r in on_checkpoint if r.start_time is not None)
    assert len(intervals) >= 3 and all(end is not None for _, end in intervals)
    for (_, previous_end), (start, _) in itertools.pairwise(intervals):
        assert start >= previous_end, f"two runs on the raw_rides checkpoint overlapped: {intervals}"
    assert manual_run_id in {r.dagster_run.run_id for r in on_checkpoint}


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
    # The replay's run is in the UI's instance, and the old content stays readable.
    runs = live.instance().get_runs(filters=dg.RunsFilter(tags={"streaming-pipeline/replay": "raw_rides"}))
    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS]
    old = live.spark.read.format("delta").option("versionAsOf", version_before).load(str(live.lakehouse / "raw_rides"))
    assert old.count() == len(PRODUCED)
