"""A source topic is one declaration plus its two schema files: a third topic, declared in a temporary module, gets
its bronze asset (with columns from its value schema), its checks, its live job and offset sensor, a place among the
dead-letter table's sources, and the command line's choices, with nothing else written."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline import sources
from streaming_pipeline.definitions import build_definitions
from streaming_pipeline.devstack.cli import build_parser
from streaming_pipeline.errors import ConfigurationError
from streaming_pipeline.schemas import schema_dir
from streaming_pipeline.settings import PipelineSettings

PAYMENT_VALUE = {
    "type": "record",
    "name": "Payment",
    "namespace": "example.payments",
    "fields": [
        {"name": "payment_id", "type": "long", "doc": "The payment."},
        {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "amount", "type": ["null", "double"], "default": None, "doc": "Dollars."},
    ],
}
DECLARATION = """
from streaming_pipeline.sources import SourceTopic

SOURCE = SourceTopic(
    topic="payments",
    bronze_table="raw_payments",
    key_schema="payment_key.avsc",
    value_schema="payment_value.avsc",
    key_field="payment_id",
    description="Every payment.",
)
"""


@pytest.fixture()
def third_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The shipped schemas plus the third topic's two, and a temporary module declaring it."""
    schemas = tmp_path / "schemas"
    shutil.copytree(str(schema_dir()), schemas)
    (schemas / "payment_key.avsc").write_text(json.dumps({"type": "long"}))
    (schemas / "payment_value.avsc").write_text(json.dumps(PAYMENT_VALUE))
    monkeypatch.setenv("STREAMING_PIPELINE_SCHEMA_DIR", str(schemas))
    declarations = tmp_path / "declarations"
    declarations.mkdir()
    (declarations / "taxi_payments.py").write_text(DECLARATION)
    monkeypatch.setattr(sources, "__path__", [*sources.__path__, str(declarations)])
    yield
    sys.modules.pop("streaming_pipeline.sources.taxi_payments", None)


def test_a_third_topic_gets_its_asset_checks_sensor_and_job(third_topic: None) -> None:
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
    assert sensors["raw_payments_offset_sensor"].job_name == "raw_payments_to_gold_job"
    assert sensors["raw_payments_offset_sensor"].default_status == dg.DefaultSensorStatus.RUNNING
    job = defs.resolve_job_def("raw_payments_to_gold_job")
    assert job.asset_layer.executable_asset_keys == {payments, dg.AssetKey("dead_letter_records")}
    assert payments in graph.get(dg.AssetKey("dead_letter_records")).parent_keys
    # The two shipped topics are still there.
    assert {"raw_rides_offset_sensor", "raw_pickup_locations_offset_sensor"} <= set(sensors)


def test_a_third_topic_is_a_choice_of_produce_and_replay(third_topic: None) -> None:
    parser = build_parser()
    assert parser.parse_args(["produce", "payments", "--csv", "payments.csv"]).kind == "payments"
    assert parser.parse_args(["replay", "raw_payments"]).asset == "raw_payments"
    assert sources.source_for_topic("payments").key_field == "payment_id"


def test_two_declarations_of_one_topic_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    declarations = tmp_path / "declarations"
    declarations.mkdir()
    (declarations / "rides_again.py").write_text(
        DECLARATION.replace('"payments"', '"rides"').replace("raw_payments", "raw_rides_again")
    )
    monkeypatch.setattr(sources, "__path__", [*sources.__path__, str(declarations)])
    try:
        with pytest.raises(ConfigurationError, match="more than one source declares the topic rides"):
            sources.all_sources()
    finally:
        sys.modules.pop("streaming_pipeline.sources.rides_again", None)
