"""`KafkaDeltaSource` used from outside: a new `dg` project in a temporary folder (its own package, `defs/` and
`pyproject.toml`, written by `create-dagster project`, its `definitions.py` unchanged), with this package installed,
declares a topic of its own with `dg scaffold defs` and a schema the test writes. `dg check defs` passes, and
records produced with Confluent's serializer reach its bronze table exactly once through `dagster asset
materialize` on the session's secured stack (its settings and secrets from `stack env`: Kafka's three nodes over
SASL_SSL, the registry over HTTPS with basic auth) with the session's engine; the materialization's columns carry
the schema's `doc`s, and only the field a later schema version adds is marked as evolved; the project lists a
dead-letter asset of its own, in which an undecodable record lands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from streaming_pipeline.devstack.embedded.stack import StackInfo
from streaming_pipeline_tests.cli_helpers import environment_without_pipeline_settings
from streaming_pipeline_tests.kafka_helpers import REPO_ROOT, clients_of
from streaming_pipeline_tests.session_stack import SessionStack

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ORDER_KEY = {"type": "long"}
ORDER_VALUE = {
    "type": "record",
    "name": "Order",
    "namespace": "example.shop",
    "fields": [
        {"name": "order_id", "type": "long", "doc": "The shop's order number."},
        {"name": "customer", "type": "string", "doc": "Who ordered."},
        {"name": "total", "type": ["null", "double"], "default": None, "doc": "Total, EUR."},
    ],
}
#: A later version of the value schema, registered by a producer, not declared in the defs.yaml.
ORDER_VALUE_V2 = {
    **ORDER_VALUE,
    "fields": [*ORDER_VALUE["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],  # type: ignore[list-item]
}
#: The bronze table's Kafka columns and their descriptions (streaming_pipeline.lakehouse.table_model.KAFKA_COLUMNS,
#: written out).
KAFKA_COLUMN_DOCS = {
    "kafka_topic": "Source topic.",
    "kafka_partition": "Source partition.",
    "kafka_offset": "Offset within the partition; (topic, partition, offset) is unique.",
    "kafka_timestamp": "Kafka record timestamp (UTC).",
    "schema_id": "Registry id of the writer schema the record was encoded with.",
}
EVOLVED = "Added by schema evolution: a later version of the source's value schema has this field."
BIN = Path(sys.executable).parent


def _orders(first: int, count: int) -> list[dict[str, object]]:
    return [
        {"order_id": i, "customer": f"c{i % 3}", "total": None if i % 4 == 0 else i * 1.5}
        for i in range(first, first + count)
    ]


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 300, stdout_only: bool = False) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout if stdout_only else done.stdout + done.stderr


def _latest_materialization(dagster_home: Path | None, asset: str) -> dict[str, Any]:
    """The metadata of the asset's latest materialization, read from the project's Dagster instance."""
    import dagster as dg

    assert dagster_home is not None
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    assert event is not None and event.asset_materialization is not None, f"{asset} was never materialized"
    return dict(event.asset_materialization.metadata)


def _column_docs(dagster_home: Path | None, asset: str) -> dict[str, str | None]:
    """Each column's description in the asset's latest materialization (what the UI's Columns tab shows)."""
    schema = _latest_materialization(dagster_home, asset)["dagster/column_schema"].value
    return {column.name: column.description for column in schema.columns}


def _produce(
    stack: StackInfo,
    orders: list[dict[str, object]],
    raw: list[bytes],
    value_schema: dict[str, object] = ORDER_VALUE,
) -> None:
    """`orders` with Confluent's Avro serializer and `value_schema` (schemas registered under topic name strategy),
    then `raw` values as they are."""
    from confluent_kafka import Producer, SerializingProducer
    from confluent_kafka.schema_registry.avro import AvroSerializer

    kafka, registry_client = clients_of(stack)  # the secured stack's settings, as `stack env` gives them
    registry = registry_client.client()
    producer = SerializingProducer(
        {
            **kafka.client_config(),
            "key.serializer": AvroSerializer(registry, json.dumps(ORDER_KEY)),
            "value.serializer": AvroSerializer(registry, json.dumps(value_schema)),
        }
    )
    for order in orders:
        producer.produce("orders", key=order["order_id"], value=order)
    assert producer.flush(30) == 0
    plain = Producer(kafka.client_config())
    for value in raw:
        plain.produce("orders", value=value)
    assert plain.flush(30) == 0


def test_a_new_dg_project_ingests_its_own_topic_exactly_once_with_the_component(
    session_stack: SessionStack, secured_stack: StackInfo, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    assert REPO_ROOT not in tmp_path.parents
    info = session_stack.clear_secured(secured_stack, tmp_path / "dagster_home")
    project = tmp_path / "orders_demo"
    lakehouse = tmp_path / "lakehouse"
    env = {
        **environment_without_pipeline_settings(),
        **info.env(),
        "LAKEHOUSE_DIR": str(lakehouse),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        # the new project's package, as `pip install -e .` or `uv sync` would make it importable
        "PYTHONPATH": str(project / "src"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    _run([str(BIN / "create-dagster"), "project", str(project), "--no-uv-sync"], tmp_path, env)
    definitions = project / "src" / "orders_demo" / "definitions.py"
    written = definitions.read_text()
    assert "load_from_defs_folder" in written and "streaming_pipeline" not in written

    listed = _run([str(BIN / "dg"), "list", "components", "--json"], project, env)
    assert "streaming_pipeline.components.KafkaDeltaSource" in listed
    _run(
        [str(BIN / "dg"), "scaffold", "defs", "streaming_pipeline.components.KafkaDeltaSource", "orders"], project, env
    )
    folder = project / "src" / "orders_demo" / "defs" / "orders"
    (folder / "order_key.avsc").write_text(json.dumps(ORDER_KEY))
    (folder / "order_value.avsc").write_text(json.dumps(ORDER_VALUE))
    declaration = yaml.safe_load((folder / "defs.yaml").read_text())
    assert declaration == {
        "type": "streaming_pipeline.components.KafkaDeltaSource",
        # the project's first source binds the resources, its definitions.py being create-dagster's
        "attributes": {"topic": "orders", "value_schema": "value.avsc", "resources": "from_environment"},
    }
    declaration["attributes"].update(value_schema="order_value.avsc", key_schema="order_key.avsc")
    (folder / "defs.yaml").write_text(yaml.safe_dump(declaration))
    (folder / "value.avsc").unlink()
    _run([str(BIN / "dg"), "check", "defs"], project, env)
    listed_defs = json.loads(_run([str(BIN / "dg"), "list", "defs", "--json"], project, env, stdout_only=True))
    assets = {asset["asset_key"]: asset for asset in listed_defs["assets"]}
    assert sorted(assets) == ["dead_letter_records", "raw_orders"]
    assert assets["dead_letter_records"]["dependency_keys"] == ["raw_orders"]
    assert assets["dead_letter_records"]["group_name"] == "bronze"
    assert [job["name"] for job in listed_defs["jobs"]] == ["raw_orders_downstream_job"]

    materialize = [
        str(BIN / "dagster"),
        "asset",
        "materialize",
        "-m",
        "orders_demo.definitions",
        "--select",
        "raw_orders",
    ]
    _produce(info, _orders(0, 20), [])
    _run(materialize, project, env)
    _produce(info, _orders(20, 10), [b"not avro"])
    _run(materialize, project, env)
    columns = _column_docs(info.dagster_home, "raw_orders")
    assert columns == {**{f["name"]: f["doc"] for f in ORDER_VALUE["fields"]}, **KAFKA_COLUMN_DOCS}  # type: ignore[union-attr]

    # A producer moves on to a later version of the value schema, with a field the declaration does not have.
    _produce(info, _orders(30, 5), [], ORDER_VALUE_V2)
    _run([*materialize[:-1], "*"], project, env)  # every asset of the project: raw_orders, then its dead letters
    columns = _column_docs(info.dagster_home, "raw_orders")
    assert [name for name, doc in columns.items() if doc == EVOLVED] == ["coupon"]
    assert {name: doc for name, doc in columns.items() if name != "coupon"} == {
        **{f["name"]: f["doc"] for f in ORDER_VALUE["fields"]},  # type: ignore[union-attr]
        **KAFKA_COLUMN_DOCS,
    }
    dead_letters = _latest_materialization(info.dagster_home, "dead_letter_records")
    assert dead_letters["dead_letters_by_topic"].value == {"orders": 1}

    assert definitions.read_text() == written
    rows = DeltaTable(str(lakehouse / "raw_orders")).to_pyarrow_table().to_pylist()
    assert sorted((r["order_id"], r["customer"], r["total"]) for r in rows) == [
        (o["order_id"], o["customer"], o["total"]) for o in _orders(0, 35)
    ]
    coordinates = [(r["kafka_partition"], r["kafka_offset"]) for r in rows]
    assert len(set(coordinates)) == 35
    dead = [
        r
        for r in DeltaTable(str(lakehouse / "dead_letter_records")).to_pyarrow_table().to_pylist()
        if r["kafka_topic"] == "orders"
    ]
    assert [(r["raw_key"], r["raw_value"]) for r in dead] == [(None, b"not avro")]
