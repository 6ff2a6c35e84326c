"""A source topic is one defs.yaml plus its schema: a third topic, declared by a `KafkaDeltaSource` defs.yaml in the
project's defs folder for the test, gets its bronze asset (with columns from its value schema), its checks, its
live job and offset sensor, a place among the dead-letter table's sources, the maintenance job and the continuous
mode, and the command line's choices, with nothing else written."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from streaming_pipeline.definitions import build_definitions
from streaming_pipeline.devstack.cli import build_parser
from streaming_pipeline.devstack.project import project_defs_folder, project_sources
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline.lakehouse.sources import source_for_topic
from streaming_pipeline_tests.avro_examples import PAYMENT_VALUE

DECLARATION = {
    "type": "streaming_pipeline.components.KafkaDeltaSource",
    "attributes": {
        "topic": "payments",
        "value_schema": "payment_value.avsc",
        "key_schema": "payment_key.avsc",
        "key_field": "payment_id",
        "description": "Every payment.",
    },
}


def _declare(folder: Path, declaration: dict[str, object]) -> None:
    folder.mkdir()
    (folder / "payment_key.avsc").write_text(json.dumps({"type": "long"}))
    (folder / "payment_value.avsc").write_text(json.dumps(PAYMENT_VALUE))
    (folder / "defs.yaml").write_text(yaml.safe_dump(declaration))


@pytest.fixture()
def third_topic() -> Iterator[Path]:
    """The third topic's folder in the project's defs folder (the installed package is this checkout), removed after."""
    folder = project_defs_folder() / "bronze" / "test_payments"
    assert not folder.exists(), f"{folder} is left from an earlier run; remove it"
    try:
        _declare(folder, DECLARATION)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_third_topic_gets_its_asset_checks_sensor_job_and_place_in_the_shared_jobs(third_topic: Path) -> None:
    defs = build_definitions(PipelineSettings.from_env({}))
    graph = defs.resolve_asset_graph()
    payments = dg.AssetKey("raw_payments")

    node = graph.get(payments)
    assert node.group_name == "bronze"
    assert node.metadata["source_topic"] == "payments"
    columns = [(c.name, c.type) for c in node.metadata["dagster/column_schema"].columns]
    assert columns == [
        ("payment_id", "bigint"),
        ("paid_at", "timestamp"),
        ("amount", "double"),
        ("kafka_topic", "string"),
        ("kafka_partition", "int"),
        ("kafka_offset", "bigint"),
        ("kafka_timestamp", "timestamp"),
        ("schema_id", "int"),
    ]
    checks = {key.name for key in graph.asset_check_keys if key.asset_key == payments}
    assert checks == {"reconciles_with_kafka_offsets", "unique_kafka_coordinates", "consumer_lag_below_bound"}
    sensors = {sensor.name: sensor for sensor in defs.sensors or []}
    assert sensors["raw_payments_offset_sensor"].job_name == "raw_payments_downstream_job"
    assert sensors["raw_payments_offset_sensor"].default_status == dg.DefaultSensorStatus.RUNNING
    job = defs.resolve_job_def("raw_payments_downstream_job")
    assert job.asset_layer.executable_asset_keys == {payments, dg.AssetKey("dead_letter_records")}
    assert payments in graph.get(dg.AssetKey("dead_letter_records")).parent_keys
    # The two shipped topics are still there.
    assert {"raw_rides_offset_sensor", "raw_pickup_locations_offset_sensor"} <= set(sensors)
    # The jobs that work on every table: its maintenance op, its query in the continuous run.
    maintenance = defs.resolve_job_def("table_maintenance_job")
    assert "maintain_raw_payments" in {node.name for node in maintenance.nodes}
    assert [s.bronze_table for s in project_sources()] == [
        "raw_pickup_locations",
        "raw_rides",
        "taxi_zones",
        "raw_payments",
    ]


def test_a_third_topic_is_a_choice_of_produce_and_replay(third_topic: Path) -> None:
    parser = build_parser()
    assert parser.parse_args(["produce", "payments", "--csv", "payments.csv"]).kind == "payments"
    assert parser.parse_args(["replay", "raw_payments"]).asset == "raw_payments"
    source = source_for_topic(project_sources(), "payments")
    assert (source.key_field, source.key_schema) == ("payment_id", str(third_topic.resolve() / "payment_key.avsc"))


def test_the_command_line_refuses_two_declarations_of_one_topic(third_topic: Path) -> None:
    # Building the definitions names both declarations (streaming_pipeline_tests/components); the command line only
    # loads the components, so it checks the sources itself.
    rides_again = {**DECLARATION, "attributes": {**DECLARATION["attributes"], "topic": "rides"}}  # type: ignore[dict-item]
    (third_topic / "defs.yaml").write_text(yaml.safe_dump(rides_again))
    with pytest.raises(ConfigurationError, match="more than one source declares the topic rides"):
        project_sources()


def test_a_source_that_binds_the_resources_in_this_project_is_named_with_the_way_out(third_topic: Path) -> None:
    """`dg scaffold defs` writes `resources: from_environment`, which this project's definitions bind already."""
    declaration = yaml.safe_load((third_topic / "defs.yaml").read_text())
    declaration["attributes"]["resources"] = "from_environment"
    (third_topic / "defs.yaml").write_text(yaml.safe_dump(declaration))

    with pytest.raises(ConfigurationError) as refused:
        build_definitions(PipelineSettings.from_env({}))

    assert str(refused.value) == (
        f"{third_topic}: `resources: from_environment` binds the resources, which this project's definitions.py "
        "binds already: delete that line"
    )


def test_the_command_line_works_on_the_sources_the_definitions_are_built_from() -> None:
    """`project_sources` (the command line's) are the sources of the code location's components, the library's
    declarations of the project's three."""
    from streaming_pipeline.components.kafka_delta_source import declared_sources
    from streaming_pipeline.definitions import defs
    from streaming_pipeline.lakehouse import tables

    assert (
        declared_sources(defs.component_tree)
        == project_sources()
        == (
            tables.PICKUP_LOCATIONS,
            tables.RIDES,
            tables.TAXI_ZONE_LOOKUP,
        )
    )
