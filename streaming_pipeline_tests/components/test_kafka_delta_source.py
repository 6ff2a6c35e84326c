"""`KafkaDeltaSource` in a defs folder of its own (Dagster's component sandbox): what `dg scaffold defs` writes, what
one instance builds, and the error a bad `defs.yaml` gives (naming the file, the field and the value)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster.components.testing import DefsFolderSandbox, create_defs_folder_sandbox

from streaming_pipeline.components import KafkaDeltaSource
from streaming_pipeline_tests.avro_examples import PAYMENT_VALUE
from streaming_pipeline_tests.error_helpers import error_chain

#: What bronze adds to the value's fields (streaming_pipeline.lakehouse.table_model.KAFKA_COLUMNS), written out here.
KAFKA_COLUMNS = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "schema_id"]


@pytest.fixture()
def sandbox() -> Iterator[DefsFolderSandbox]:
    with create_defs_folder_sandbox() as sandbox:
        yield sandbox


def _declare(sandbox: DefsFolderSandbox, name: str, attributes: dict[str, Any], schema: Any = PAYMENT_VALUE) -> Path:
    path = sandbox.defs_folder_path / name
    path.mkdir(parents=True)
    (path / "payment_value.avsc").write_text(json.dumps(schema))
    (path / "defs.yaml").write_text(
        yaml.safe_dump({"type": "streaming_pipeline.components.KafkaDeltaSource", "attributes": attributes})
    )
    return path


def test_scaffold_writes_every_field_and_an_example_schema_that_loads(sandbox: DefsFolderSandbox) -> None:
    path = sandbox.scaffold_component(component_cls=KafkaDeltaSource, defs_path="orders")

    text = (path / "defs.yaml").read_text()
    declared = yaml.safe_load(text)
    # the sandbox scaffolds by the defining module's name; `dg scaffold defs` writes the name it is given
    assert declared.pop("type") == "streaming_pipeline.components.kafka_delta_source.component.KafkaDeltaSource"
    assert declared == {"attributes": {"topic": "orders", "value_schema": "value.avsc"}}
    # The project binds no resources: the first scaffold binds them at the defs folder's root, the dg way.
    resources = sandbox.defs_folder_path / "resources.py"
    assert "@dg.definitions" in resources.read_text()
    written = resources.read_text()
    second = sandbox.scaffold_component(component_cls=KafkaDeltaSource, defs_path="payments")
    assert "resources" not in (second / "defs.yaml").read_text()
    assert resources.read_text() == written
    for optional in ("# key_schema: key.avsc", "# table: raw_orders", "# description:"):
        assert optional in text
    example = json.loads((path / "value.avsc").read_text())
    assert [f["name"] for f in example["fields"]] == ["id", "amount", "created_at"]

    with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
        assert isinstance(component, KafkaDeltaSource)
        spec = defs.get_assets_def("raw_orders").specs_by_key[dg.AssetKey("raw_orders")]
        schema = spec.metadata["dagster/column_schema"]
        assert [(c.name, c.type) for c in schema.columns][:3] == [
            ("id", "bigint"),
            ("amount", "double"),
            ("created_at", "timestamp"),
        ]


def test_an_instance_builds_the_bronze_asset_its_checks_live_job_sensor_resources_and_the_continuous_mode(
    sandbox: DefsFolderSandbox,
) -> None:
    path = _declare(
        sandbox,
        "payments",
        {
            "topic": "payments",
            "value_schema": "payment_value.avsc",
            "description": "Every payment.",
            "resources": "from_environment",
        },
    )

    with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
        assert isinstance(component, KafkaDeltaSource)
        assert component.source.value_schema == str(path / "payment_value.avsc")
        asset = defs.get_assets_def("raw_payments")
        spec = asset.specs_by_key[dg.AssetKey("raw_payments")]
        assert spec.description == "Every payment."
        assert spec.group_name == "bronze"
        assert spec.metadata["source_topic"] == "payments"
        columns = spec.metadata["dagster/column_schema"].columns
        assert [(c.name, c.type, c.description) for c in columns[:3]] == [
            ("payment_id", "bigint", "The payment."),
            ("paid_at", "timestamp", None),
            ("amount", "double", "Dollars."),
        ]
        assert [c.name for c in columns[3:]] == KAFKA_COLUMNS
        assert sorted(key.name for key in defs.resolve_asset_graph().asset_check_keys) == [
            "consumer_lag_below_bound",
            "reconciles_with_kafka_offsets",
            "unique_kafka_coordinates",
        ]
        # the project's first source also brings the continuous mode (every source's and streaming table's query,
        # and its checks' schedule) and the table maintenance
        assert sorted(job.name for job in defs.jobs or []) == [
            "continuous_streams_job",
            "live_checks_job",
            "raw_payments_downstream_job",
            "table_maintenance_job",
        ]
        assert sorted(schedule.name for schedule in defs.schedules or []) == [
            "live_checks_schedule",
            "table_maintenance_schedule",
        ]
        assert sorted(sensor.name for sensor in defs.sensors or []) == [
            "continuous_streams_sensor",
            "raw_payments_offset_sensor",
        ]
        assert sorted(defs.resources or {}) == ["kafka", "lakehouse", "schema_registry", "spark"]
        # The project's dead letters come with its (first) source, downstream of its bronze table.
        dead_letters = defs.resolve_asset_graph().get(dg.AssetKey("dead_letter_records"))
        assert dead_letters.group_name == "bronze"
        assert dead_letters.parent_keys == {dg.AssetKey("raw_payments")}
        assert [c.name for c in dead_letters.metadata["dagster/column_schema"].columns] == [
            "kafka_topic",
            "kafka_partition",
            "kafka_offset",
            "raw_key",
            "raw_value",
            "error",
            "failed_at",
        ]


_PYTHON_DECLARATION = """
import dagster as dg

from streaming_pipeline.components import KafkaDeltaSource
from streaming_pipeline.lakehouse.sources import SourceTopic

PAYMENTS = SourceTopic.declared(topic="payments", value_schema={schema!r}, key_field={key_field!r})


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> KafkaDeltaSource:
    return KafkaDeltaSource.of(PAYMENTS, context, resources="from_environment")
"""


def _rule(expect: str, on_violation: str = "warn") -> dict[str, str]:
    return {"name": "positive", "expect": expect, "on_violation": on_violation}


@pytest.mark.parametrize("key_field", ["payment_id", "id"])
def test_a_source_declared_in_python_builds_as_its_yaml_would_and_its_errors_name_the_module(
    sandbox: DefsFolderSandbox, key_field: str
) -> None:
    schema = sandbox.defs_folder_path / "payment_value.avsc"
    schema.write_text(json.dumps(PAYMENT_VALUE))
    module = sandbox.defs_folder_path / "payments.py"
    module.write_text(_PYTHON_DECLARATION.format(schema=str(schema), key_field=key_field))

    if key_field == "id":
        with pytest.raises(Exception) as raised, sandbox.build_all_defs():
            pass
        assert f"{module}: key_field 'id' is not a field of the value schema" in _messages(raised.value)
        return
    with sandbox.build_all_defs() as defs:
        columns = (
            defs.get_assets_def("raw_payments")
            .specs_by_key[dg.AssetKey("raw_payments")]
            .metadata["dagster/column_schema"]
        )
        assert [(c.name, c.description) for c in columns.columns[:3]] == [
            ("payment_id", "The payment."),
            ("paid_at", None),
            ("amount", "Dollars."),
        ]
        assert {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()} == {
            "raw_payments",
            "dead_letter_records",
        }


def test_the_table_defaults_to_raw_topic_with_non_identifier_characters_as_underscores(
    sandbox: DefsFolderSandbox,
) -> None:
    path = _declare(sandbox, "payments", {"topic": "shop.payments-v1", "value_schema": "payment_value.avsc"})

    with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
        assert (
            defs.get_assets_def("raw_shop_payments_v1")
            .specs_by_key[dg.AssetKey("raw_shop_payments_v1")]
            .metadata["source_topic"]
            == "shop.payments-v1"
        )


def test_two_instances_build_together_and_the_one_that_says_so_binds_the_resources(sandbox: DefsFolderSandbox) -> None:
    _declare(sandbox, "payments", {"topic": "payments", "value_schema": "payment_value.avsc"})
    _declare(
        sandbox, "refunds", {"topic": "refunds", "value_schema": "payment_value.avsc", "resources": "from_environment"}
    )

    with sandbox.build_all_defs() as defs:
        assert sorted(defs.resources or {}) == ["kafka", "lakehouse", "schema_registry", "spark"]
        graph = defs.resolve_asset_graph()
        assert sorted(key.to_user_string() for key in graph.get_all_asset_keys()) == [
            "dead_letter_records",
            "raw_payments",
            "raw_refunds",
        ]
        # One dead-letter table for both, downstream of each.
        assert graph.get(dg.AssetKey("dead_letter_records")).parent_keys == {
            dg.AssetKey("raw_payments"),
            dg.AssetKey("raw_refunds"),
        }


@pytest.mark.parametrize(
    ("attributes", "schema", "expected"),
    [
        pytest.param(
            {"topic": "payments", "value_schema": "payment_value.avsc", "partitions": 3},
            PAYMENT_VALUE,
            ["attributes.partitions", "Extra inputs are not permitted", "input_value=3"],
            id="unknown-field",
        ),
        pytest.param(
            {"topic": "payments", "value_schema": "missing.avsc"},
            PAYMENT_VALUE,
            ["attributes.value_schema", "value_schema 'missing.avsc': no such file"],
            id="missing-schema-file",
        ),
        pytest.param(
            {"topic": "payments", "value_schema": "payment_value.avsc"},
            {"type": "record", "name": "Payment", "fields": [{"name": "id", "type": "nosuchtype"}]},
            ["attributes.value_schema", "value_schema 'payment_value.avsc'", "is not a valid Avro schema"],
            id="invalid-avro",
        ),
        pytest.param(
            {"topic": "payments", "value_schema": "payment_value.avsc"},
            "string",
            ["attributes.value_schema", "value_schema 'payment_value.avsc'", "must be an Avro record"],
            id="value-not-a-record",
        ),
        pytest.param(
            {"topic": "pay ments", "value_schema": "payment_value.avsc"},
            PAYMENT_VALUE,
            ["attributes.topic", "topic 'pay ments' is not a Kafka topic name"],
            id="bad-topic",
        ),
        pytest.param(
            {"topic": "payments", "value_schema": "payment_value.avsc", "table": "raw-payments"},
            PAYMENT_VALUE,
            ["attributes.table", "table 'raw-payments' is not a table name"],
            id="bad-table",
        ),
        pytest.param(
            {"topic": "payments", "value_schema": "payment_value.avsc", "expectations": [_rule("amont >= 0")]},
            PAYMENT_VALUE,
            ["expectation 'positive': 'amont >= 0' names amont, not a column of the table"],
            id="rule-on-an-unknown-column",
        ),
        pytest.param(
            {
                "topic": "payments",
                "value_schema": "payment_value.avsc",
                "expectations": [_rule("amount > 0"), _rule("amount < 10")],
            },
            PAYMENT_VALUE,
            ["expectation 'positive' is declared twice"],
            id="rule-named-twice",
        ),
        pytest.param(
            {"topic": "payments", "value_schema": "payment_value.avsc", "expectations": [_rule("amount * 2", "warn")]},
            PAYMENT_VALUE,
            ["'amount * 2' is not a boolean expression"],
            id="rule-not-a-condition",
        ),
        pytest.param(
            {
                "topic": "payments",
                "value_schema": "payment_value.avsc",
                "expectations": [_rule("amount > 0", "ignore")],
            },
            PAYMENT_VALUE,
            ["attributes.expectations", "on_violation"],
            id="rule-of-an-unknown-action",
        ),
        pytest.param(
            {
                "topic": "payments",
                "value_schema": "payment_value.avsc",
                "expectations": [_rule("amount > 0")],
                "quarantine_table": "set_aside",
            },
            PAYMENT_VALUE,
            ["`quarantine_table` takes the rows that `drop` rules set aside, and this source has none"],
            id="quarantine-without-a-drop-rule",
        ),
    ],
)
def test_a_bad_defs_yaml_names_the_file_the_field_and_the_value(
    sandbox: DefsFolderSandbox, attributes: dict[str, Any], schema: Any, expected: list[str]
) -> None:
    path = _declare(sandbox, "payments", attributes, schema)

    with pytest.raises(Exception) as raised, sandbox.build_all_defs():
        pass

    message = _messages(raised.value)
    assert str(path / "defs.yaml") in message
    for part in expected:
        assert part in message


def test_a_source_s_rules_are_checks_of_its_table_and_its_drop_rules_fill_a_quarantine_table_downstream(
    sandbox: DefsFolderSandbox,
) -> None:
    rules = [_rule("amount > 0", "drop"), {"name": "paid", "expect": "paid_at IS NOT NULL"}]
    declared = {"topic": "payments", "value_schema": "payment_value.avsc", "expectations": rules}
    _declare(sandbox, "payments", {**declared, "resources": "from_environment"})

    with sandbox.build_all_defs() as defs:
        bronze = defs.get_assets_def("raw_payments")
        assert {key.name for key in bronze.check_keys} == {"positive", "paid"}
        assert bronze.keys == {dg.AssetKey("raw_payments"), dg.AssetKey("raw_payments_quarantine")}
        assert bronze.asset_deps[dg.AssetKey("raw_payments_quarantine")] == {dg.AssetKey("raw_payments")}
        columns = bronze.specs_by_key[dg.AssetKey("raw_payments_quarantine")].metadata["dagster/column_schema"]
        assert [c.name for c in columns.columns][-3:] == ["_rules_broken", "_batch_id", "_quarantined_at"]
        selected = defs.resolve_job_def("raw_payments_downstream_job").asset_layer.asset_graph.asset_check_keys
        assert {key.name for key in selected} >= {"positive", "paid"}  # its live job evaluates them


def test_a_key_field_that_is_not_a_field_of_the_value_names_the_file_and_the_fields(sandbox: DefsFolderSandbox) -> None:
    path = _declare(sandbox, "payments", {"topic": "payments", "value_schema": "payment_value.avsc", "key_field": "id"})

    with pytest.raises(Exception) as raised, sandbox.build_all_defs():
        pass

    message = _messages(raised.value)
    assert f"{path}/defs.yaml: key_field 'id' is not a field of the value schema" in message
    assert "(its fields: payment_id, paid_at, amount)" in message


@pytest.mark.parametrize("field", ["topic", "table"])
def test_a_topic_or_table_declared_twice_names_both_files(sandbox: DefsFolderSandbox, field: str) -> None:
    first = _declare(sandbox, "payments", {"topic": "payments", "value_schema": "payment_value.avsc"})
    second_attributes = {"topic": "payments", "value_schema": "payment_value.avsc", "table": "raw_payments_again"}
    if field == "table":
        second_attributes = {"topic": "refunds", "value_schema": "payment_value.avsc", "table": "raw_payments"}
    second = _declare(sandbox, "payments_again", second_attributes)

    with pytest.raises(Exception) as raised, sandbox.build_all_defs():
        pass

    message = _messages(raised.value)
    value = "payments" if field == "topic" else "raw_payments"
    assert f"{field} {value!r} is declared by another KafkaDeltaSource too" in message
    assert str(first) in message
    assert str(second) in message


def test_without_resources_a_source_binds_none_for_the_project_s_definitions_to_bind(
    sandbox: DefsFolderSandbox,
) -> None:
    path = _declare(sandbox, "payments", {"topic": "payments", "value_schema": "payment_value.avsc"})

    with sandbox.load_component_and_build_defs(defs_path=path) as (_component, defs):
        assert not defs.resources
        assert defs.get_assets_def("raw_payments").required_resource_keys - {"io_manager"} == {
            "kafka",
            "lakehouse",
            "schema_registry",
            "spark",
        }


def test_resources_bound_by_two_sources_names_both_and_the_way_out(sandbox: DefsFolderSandbox) -> None:
    bound = {"value_schema": "payment_value.avsc", "resources": "from_environment"}
    first = _declare(sandbox, "payments", {"topic": "payments", **bound})
    second = _declare(sandbox, "refunds", {"topic": "refunds", **bound})

    with pytest.raises(Exception) as raised, sandbox.build_all_defs():
        pass

    message = _messages(raised.value)
    assert "`resources: from_environment` is set by more than one KafkaDeltaSource" in message
    assert f"({first}, {second})" in message
    assert "keep it on one source and delete it from the others" in message


def _messages(error: BaseException) -> str:
    """The error and every error it was raised from (Dagster wraps the component's own)."""
    return "\n".join(str(e) for e in error_chain(error))


# ---------------------------------------------------------------- table topics (mode: upsert)

ACCOUNT_KEY = {
    "type": "record",
    "name": "PaymentKey",
    "namespace": "example.payments",
    "fields": [{"name": "payment_id", "type": "long", "doc": "The payment's key."}],
}


def _declare_table_topic(sandbox: DefsFolderSandbox, attributes: dict[str, Any], key: Any = ACCOUNT_KEY) -> Path:
    path = _declare(sandbox, "payments", {"topic": "payments", "value_schema": "payment_value.avsc", **attributes})
    (path / "payment_key.avsc").write_text(json.dumps(key))
    return path


def test_scaffold_with_mode_upsert_writes_a_table_topic_with_an_example_key_that_loads(
    sandbox: DefsFolderSandbox,
) -> None:
    path = sandbox.scaffold_component(
        component_cls=KafkaDeltaSource, defs_path="accounts", scaffold_params={"mode": "upsert"}
    )

    text = (path / "defs.yaml").read_text()
    declared = yaml.safe_load(text)["attributes"]
    assert declared == {
        "topic": "accounts",
        "mode": "upsert",
        "key_schema": "key.avsc",
        "value_schema": "value.avsc",
    }
    for optional in ("# history: true", "# valid_from_field: created_at", "# table: accounts"):
        assert optional in text
    assert [f["name"] for f in json.loads((path / "key.avsc").read_text())["fields"]] == ["id"]
    with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
        assert isinstance(component, KafkaDeltaSource) and component.source.is_table_topic
        assert [c.name for c in component.source.key_columns] == ["id"]


def test_a_table_topic_builds_its_table_its_history_in_one_step_and_checks_that_allow_compaction(
    sandbox: DefsFolderSandbox,
) -> None:
    path = _declare_table_topic(
        sandbox,
        {"key_schema": "payment_key.avsc", "mode": "upsert", "history": True, "valid_from_field": "paid_at"},
    )
    with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
        assets = defs.get_assets_def("raw_payments")
        assert assets is defs.get_assets_def("raw_payments_history")  # one run writes both
        columns = {
            key.to_user_string(): [c.name for c in spec.metadata["dagster/column_schema"].columns]
            for key, spec in assets.specs_by_key.items()
        }
        assert columns == {
            "raw_payments": ["payment_id", "paid_at", "amount", *KAFKA_COLUMNS],
            "raw_payments_history": [
                "payment_id",
                "paid_at",
                "amount",
                *KAFKA_COLUMNS,
                "valid_from",
                "valid_to",
                "is_current",
            ],
        }
        assert assets.specs_by_key[dg.AssetKey("raw_payments_history")].deps[0].asset_key == dg.AssetKey("raw_payments")
        checks = {key.name for check in defs.asset_checks or [] for key in check.check_keys}
        assert checks == {"reconciles_with_kafka_offsets", "one_row_per_key", "consumer_lag_below_bound"}


@pytest.mark.parametrize(
    ("attributes", "key", "expected"),
    [
        ({"mode": "upsert"}, ACCOUNT_KEY, "`mode: upsert` keeps one row per key: set `key_schema`"),
        ({"history": True}, ACCOUNT_KEY, "`history` and `valid_from_field` are for a table topic; set `mode: upsert`"),
        (
            {"mode": "upsert", "key_schema": "payment_key.avsc"},
            {"type": "long"},
            "payments/payment_key.avsc: a source's key schema must be an Avro record",
        ),
        (
            {"mode": "upsert", "key_schema": "payment_key.avsc", "valid_from_field": "paid_at"},
            ACCOUNT_KEY,
            "`valid_from_field` is for the history table: set `history: true`",
        ),
        (
            {"mode": "upsert", "key_schema": "payment_key.avsc", "history": True, "valid_from_field": "amount"},
            ACCOUNT_KEY,
            "valid_from_field 'amount' is not a timestamp field of the value schema",
        ),
    ],
)
def test_a_table_topic_that_does_not_fit_together_names_the_file_and_the_way_out(
    sandbox: DefsFolderSandbox, attributes: dict[str, Any], key: Any, expected: str
) -> None:
    path = _declare_table_topic(sandbox, attributes, key)

    with pytest.raises(Exception) as raised, sandbox.build_all_defs():
        pass

    message = _messages(raised.value)
    assert f"{path}/defs.yaml: " in message and expected in message
