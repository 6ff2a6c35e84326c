"""Fault injection on the real embedded stack: bad bytes, the registry away, the object store stopped mid-run (killed
runs are in test_kill_fuzz.py; schema changes in test_schema_evolution.py and test_exactly_once_bronze.py; late rides
in test_exactly_once_windows.py and the materialized lakehouse). Every expectation is computed in the test from what
the test produced."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.devstack.cli import main as cli_main
from streaming_pipeline.lakehouse.tables import RIDES
from streaming_pipeline_tests.kafka_helpers import (
    all_coordinates,
    delta_log_versions,
    end_offsets,
)
from streaming_pipeline_tests.pipeline_assets import pipeline_asset

raw_rides = pipeline_asset(RIDES.bronze_table)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "rides"


# ----------------------------------------------------------------------------- helpers


def _produce(stack, *args: str) -> None:
    code = cli_main(
        [
            "produce",
            "rides",
            *args,
            "--no-progress",
            "--bootstrap-servers",
            stack.bootstrap_servers,
            "--schema-registry-url",
            stack.schema_registry_url,
        ]
    )
    assert code == 0, f"produce {args} exited with {code}"


def _materialize(assets, resources) -> dg.ExecuteInProcessResult:
    result = dg.materialize(assets, resources=resources, raise_on_error=False)
    assert result.success, "\n".join(_failure_messages(result))
    return result


def _failure_messages(result: dg.ExecuteInProcessResult) -> list[str]:
    """Messages of every step failure and of the exceptions chained under it."""
    messages = []
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            while error is not None:
                messages.append(f"{error.cls_name}: {error.message}")
                error = error.cause
    return messages


def _coordinates(frame) -> list[tuple[str, int, int]]:
    return [
        (r.kafka_topic, r.kafka_partition, r.kafka_offset)
        for r in frame.select("kafka_topic", "kafka_partition", "kafka_offset").collect()
    ]


def _read(spark, resources, table: str):
    return spark.read.format("delta").load(resources["lakehouse"].table_path(table))


# ----------------------------------------------------------------------------- bad bytes


def test_undecodable_records_go_to_dead_letters_and_nothing_is_lost(materialized_lakehouse, spark):
    """The session's lakehouse (materialized_lakehouse.py): the sample, four ride records and one pickup no schema
    decodes, more rides in a second run. Every record is in raw_rides or, byte for byte, in the dead letters."""
    lakehouse = materialized_lakehouse
    offsets = lakehouse.end_offsets[TOPIC]
    raw = spark.read.format("delta").load(lakehouse.table_path("raw_rides"))
    raw_coordinates = _coordinates(raw)
    assert len(raw_coordinates) == len(set(raw_coordinates)) == len(lakehouse.rides) == 266 + 40
    dead = spark.read.format("delta").load(lakehouse.table_path("dead_letter_records")).collect()
    assert len(dead) == len(lakehouse.bad) == 5
    by_coordinate = {(r.kafka_topic, r.kafka_partition, r.kafka_offset): r for r in dead}
    assert set(by_coordinate) == {(bad.topic, bad.partition, bad.offset) for bad in lakehouse.bad}
    ride_letters = {c for c in by_coordinate if c[0] == TOPIC}
    assert set(raw_coordinates) | ride_letters == all_coordinates(TOPIC, offsets)
    assert len(raw_coordinates) + len(ride_letters) == sum(offsets.values())

    for bad in lakehouse.bad:
        row = by_coordinate[(bad.topic, bad.partition, bad.offset)]
        assert bytes(row.raw_value) == bad.value, bad.name
        assert (None if row.raw_key is None else bytes(row.raw_key)) == bad.key, bad.name
        assert bad.error in row.error, (bad.name, row.error)
        assert row.failed_at is not None, bad.name


# ----------------------------------------------------------------------------- the registry down


def test_registry_down_fails_run_clearly_and_loses_nothing(stack, pipeline_resources, spark, rides_csv):
    from streaming_pipeline.devstack.embedded.processes import pid_alive, stop_pid
    from streaming_pipeline.devstack.embedded.registry_process import SchemaRegistryProcess, registry_answers

    _produce(stack, "--csv", str(rides_csv))
    offsets = end_offsets(stack.bootstrap_servers, TOPIC)
    assert sum(offsets.values()) == 266

    stop_pid(stack.registry_pid, timeout=15)
    assert not pid_alive(stack.registry_pid) and not registry_answers(stack.schema_registry_url)

    failed = dg.materialize([raw_rides], resources=pipeline_resources, raise_on_error=False)
    assert not failed.success
    messages = _failure_messages(failed)
    assert len(messages) >= 2, f"the failed run reported no product error: {messages}"
    assert any(f"schema registry at {stack.schema_registry_url} did not answer" in m for m in messages), messages
    # The product's own error (the first one under Dagster's "Error occurred while executing op")
    # is what the run's failure shows first: it must say that the registry is down, checked at the end.
    product_error = messages[1]
    lakehouse = pipeline_resources["lakehouse"]
    for table in ("raw_rides", "dead_letter_records"):
        path = lakehouse.table_path(table)
        if delta_log_versions(path):
            assert spark.read.format("delta").load(path).count() == 0, f"{table} got rows while the registry was down"

    # The registry comes back on its port with its data (the schema the producer registered).
    port = int(stack.schema_registry_url.rsplit(":", 1)[1])
    with SchemaRegistryProcess(stack.directory / "registry", port, log_dir=stack.directory / "logs") as restarted:
        assert restarted.pid != stack.registry_pid
        assert registry_answers(stack.schema_registry_url)
        _materialize([raw_rides], pipeline_resources)
    coordinates = _coordinates(_read(spark, pipeline_resources, "raw_rides"))
    assert len(coordinates) == len(set(coordinates)) == 266
    assert set(coordinates) == all_coordinates(TOPIC, offsets)
    # On a local disk the engine writes no Hadoop checksum twins (spark_conf/local.conf): each commit is its JSON
    # and Delta's .crc.
    log = Path(lakehouse.table_path("raw_rides")) / "_delta_log"
    assert [f.name for f in log.iterdir() if f.name.startswith(".")] == []
    dead_path = lakehouse.table_path("dead_letter_records")
    if delta_log_versions(dead_path):
        assert spark.read.format("delta").load(dead_path).count() == 0

    assert "registry" in product_error.lower() and stack.schema_registry_url in product_error, (
        f"the run's error does not say the schema registry is down: {product_error!r}"
    )


# ----------------------------------------------------------------------------- the object store stopped mid-run


def test_object_store_stopped_mid_run_fails_naming_it_and_the_next_run_is_exact(
    stack, session_object_store, session_stack, spark, spark_test_conf, rides_csv, tmp_path
):
    """raw_rides on the session's object store, 50 records a micro-batch: the store is stopped once the first batch
    has committed. The run fails with an error naming the store; once it is started again (on its port, with its
    data), the next run leaves every record exactly once."""
    import threading
    import time
    import uuid

    from streaming_pipeline.devstack.embedded.processes import pid_alive, stop_pid
    from streaming_pipeline.devstack.embedded.stack import EmbeddedStack
    from streaming_pipeline.lakehouse.engine.delta_log import latest_version
    from streaming_pipeline.resources import LakehouseResource
    from streaming_pipeline_tests.conftest import pipeline_resources_for

    _produce(stack, "--csv", str(rides_csv))
    offsets = end_offsets(stack.bootstrap_servers, TOPIC)
    assert sum(offsets.values()) == 266
    lakehouse = f"{session_object_store.lakehouse_dir}/store-stopped-{uuid.uuid4().hex[:8]}"
    resources = pipeline_resources_for(stack, lakehouse, spark_test_conf)
    resources["lakehouse"] = LakehouseResource(root=lakehouse, max_offsets_per_trigger=50)
    table = f"{lakehouse}/raw_rides"
    store_pid = EmbeddedStack(session_stack.directory).info().object_store_pid
    assert pid_alive(store_pid)
    stopped = threading.Event()

    def stop_after_the_first_commit() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not stopped.is_set():
            if (latest_version(table) or -1) >= 1:  # version 0 creates the table, 1 is the first batch's
                stop_pid(store_pid, timeout=15)
                stopped.set()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=stop_after_the_first_commit, daemon=True)
    watcher.start()
    try:
        failed = dg.materialize([raw_rides], resources=resources, raise_on_error=False)
    finally:
        stopped.set()
        watcher.join(timeout=30)
        restarted = session_stack.up()  # the store again, on its port, with its data
    assert not pid_alive(store_pid) and restarted.object_store_pid != store_pid
    assert not failed.success, "the run went on with its object store stopped"
    messages = _failure_messages(failed)
    assert any(
        f"LAKEHOUSE_DIR={lakehouse}" in m and f"AWS_ENDPOINT_URL={session_object_store.object_store_url}" in m
        for m in messages
    ), messages
    assert session_object_store.object_store_env["AWS_SECRET_ACCESS_KEY"] not in "\n".join(messages)

    _materialize([raw_rides], resources)
    coordinates = _coordinates(spark.read.format("delta").load(table))
    assert len(coordinates) == len(set(coordinates)) == 266
    assert set(coordinates) == all_coordinates(TOPIC, offsets)
