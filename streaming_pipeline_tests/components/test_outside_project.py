"""A streaming lakehouse of a user's own: a new `dg` project in a temporary folder (its own package, `defs/` and
`pyproject.toml`, written by `create-dagster project`, its `definitions.py` unchanged), with this package installed,
declares an append topic and a table topic with `dg scaffold defs ... KafkaDeltaSource`, three SQL tables with
`dg scaffold defs ... StreamingTable` (a filter with a parameter, a stream-static join with the table topic, an
aggregation in `complete` mode) and one Python table (`streaming_table`, an upsert by key). Records produced with
Confluent's serializer, on the session's secured stack (Kafka's three nodes over SASL_SSL, the registry over HTTPS
with basic auth) with the session's engine, reach every table:

1. by `dagster asset materialize` (with a record that cannot be decoded);
2. by the offset sensors of `dagster dev` (its daemon launching the live jobs), with a later schema version;
3. by the continuous run of `dagster dev` with LIVE_MODE=continuous, whose process is SIGKILLed while records
   arrive and which its sensor launches again;
4. by `streaming-pipeline replay` of the append topic's table, which rebuilds it and everything downstream.

After each, every table's rows equal what the test computes from the records it sent: each row once."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from streaming_pipeline.devstack.embedded.dagster_dev import DagsterDev
from streaming_pipeline.devstack.embedded.stack import StackInfo
from streaming_pipeline_tests.cli_helpers import environment_without_pipeline_settings
from streaming_pipeline_tests.kafka_helpers import REPO_ROOT, clients_of
from streaming_pipeline_tests.live_helpers import wait_until
from streaming_pipeline_tests.session_stack import SessionStack

pytestmark = [pytest.mark.slow, pytest.mark.integration]

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
ORDER_KEY = {"type": "long"}
ORDER_VALUE = {
    "type": "record",
    "name": "Order",
    "namespace": "example.shop",
    "fields": [
        {"name": "order_id", "type": "long", "doc": "The shop's order number."},
        {"name": "customer_id", "type": "long", "doc": "Who ordered."},
        {"name": "total", "type": "double", "doc": "Total, EUR."},
        {"name": "ordered_at", "type": {"type": "long", "logicalType": "timestamp-micros"}, "doc": "When."},
    ],
}
#: The column docs of large_orders: its own for total, raw_orders' (the Avro docs) for those it passes through.
LARGE_ORDERS_DOCS = {"order_id": "The shop's order number.", "customer_id": "Who ordered.", "total": "Total, EUR."}
#: A later version of the value schema, registered by a producer, not declared in the defs.yaml.
ORDER_VALUE_V2 = {
    **ORDER_VALUE,
    "fields": [*ORDER_VALUE["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],  # type: ignore[list-item]
}
CUSTOMER_KEY = {"type": "record", "name": "CustomerKey", "fields": [{"name": "id", "type": "long"}]}
CUSTOMER_VALUE = {
    "type": "record",
    "name": "Customer",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string", "doc": "The customer's name."}],
}
#: Customers 0 to 2 exist; customer 3 orders too, and is never a row of raw_customers.
CUSTOMERS = {0: "Ann", 1: "Bob", 2: "Cy"}
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
#: The SQL tables, as a user writes them; ${min_total} is set by LARGE_ORDER_MIN_TOTAL (60) over its default (50).
SQL_TABLES = {
    "silver/large_orders": {
        "name": "large_orders",
        "sql": "SELECT order_id, customer_id, total FROM STREAM(raw_orders) WHERE total > ${min_total}",
        "parameters": {"min_total": {"default": "50", "env": "LARGE_ORDER_MIN_TOTAL"}},
        "columns": {"total": "Total, EUR."},
        "expectations": [
            {"name": "known_customer", "expect": "customer_id < 3", "on_violation": "warn"},
            {"name": "below_90", "expect": "total < 90", "on_violation": "drop"},
            {"name": "even_order", "expect": "order_id % 2 = 0", "on_violation": "drop"},
            {"name": "below_1000", "expect": "total < 1000", "on_violation": "fail"},
        ],
    },
    "silver/orders_named": {
        "name": "orders_named",
        "sql": "SELECT o.order_id, c.name, o.total\n"
        "FROM STREAM(raw_orders) o JOIN raw_customers c ON o.customer_id = c.id",
    },
    "gold/customer_totals": {
        "name": "customer_totals",
        "group": "gold",
        "mode": "complete",
        "sql": "SELECT customer_id, count(*) AS orders, sum(total) AS total\n"
        "FROM STREAM(raw_orders) GROUP BY customer_id",
    },
}
#: The source's rules, on every decoded order: orders 0, 29 and 43 (a total below 4) are set aside.
SOURCE_EXPECTATIONS = [
    {"name": "customer_below_3", "expect": "customer_id < 3"},
    {"name": "total_at_least_4", "expect": "total >= 4", "on_violation": "drop"},
]
PYTHON_TABLE = '''\
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_pipeline.components import streaming_table


@streaming_table(streams=["raw_orders"], mode="upsert", keys=["customer_id"], group="gold")
def last_orders(raw_orders: DataFrame) -> DataFrame:
    """Each customer's latest order."""
    return raw_orders.groupBy("customer_id").agg(F.max("order_id").alias("last_order_id"))
'''
BIN = Path(sys.executable).parent


def _orders(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {"order_id": i, "customer_id": i % 4, "total": float(i * 7 % 100), "ordered_at": T0 + dt.timedelta(minutes=i)}
        for i in range(first, first + count)
    ]


def _broken(order: dict[str, Any]) -> list[str]:
    """The rules of large_orders an order breaks, in their order."""
    holds = {
        "known_customer": order["customer_id"] < 3,
        "below_90": order["total"] < 90,
        "even_order": order["order_id"] % 2 == 0,
        "below_1000": order["total"] < 1000,
    }
    return [name for name, kept in holds.items() if not kept]


def _source_broken(order: dict[str, Any]) -> list[str]:
    """The rules of the source raw_orders an order breaks, in their order."""
    holds = {"customer_below_3": order["customer_id"] < 3, "total_at_least_4": order["total"] >= 4}
    return [name for name, kept in holds.items() if not kept]


def _dropped_by_source(order: dict[str, Any]) -> bool:
    return "total_at_least_4" in _source_broken(order)


def _dropped(order: dict[str, Any]) -> bool:
    return bool({"below_90", "even_order"} & set(_broken(order)))


def _expected(orders: list[dict[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, sorted, from the orders sent (and CUSTOMERS): those the source set aside in its quarantine,
    the others in the tables downstream."""
    quarantined = sorted(
        (o["order_id"], o["customer_id"], o["total"], _source_broken(o)) for o in orders if _dropped_by_source(o)
    )
    orders = [o for o in orders if not _dropped_by_source(o)]
    by_customer: dict[int, list[dict[str, Any]]] = {}
    for order in orders:
        by_customer.setdefault(order["customer_id"], []).append(order)
    large = [o for o in orders if o["total"] > 60]
    return {
        "raw_orders_quarantine": quarantined,
        "large_orders": sorted((o["order_id"], o["customer_id"], o["total"]) for o in large if not _dropped(o)),
        "large_orders_quarantine": sorted(
            (o["order_id"], o["customer_id"], o["total"], _broken(o)) for o in large if _dropped(o)
        ),
        "orders_named": sorted(
            (o["order_id"], CUSTOMERS[o["customer_id"]], o["total"]) for o in orders if o["customer_id"] in CUSTOMERS
        ),
        "customer_totals": sorted((c, len(os_), sum(o["total"] for o in os_)) for c, os_ in by_customer.items()),
        "last_orders": sorted((c, max(o["order_id"] for o in os_)) for c, os_ in by_customer.items()),
    }


def _tables(lakehouse: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every streaming table's rows, sorted (read with delta-rs; a table not written yet has none)."""
    from deltalake import DeltaTable

    columns = {
        "raw_orders_quarantine": ["order_id", "customer_id", "total", "_rules_broken"],
        "large_orders": ["order_id", "customer_id", "total"],
        "large_orders_quarantine": ["order_id", "customer_id", "total", "_rules_broken"],
        "orders_named": ["order_id", "name", "total"],
        "customer_totals": ["customer_id", "orders", "total"],
        "last_orders": ["customer_id", "last_order_id"],
    }
    found = {}
    for table, names in columns.items():
        if not (lakehouse / table / "_delta_log").is_dir():
            found[table] = []
            continue
        rows = DeltaTable(str(lakehouse / table)).to_pyarrow_table().to_pylist()
        found[table] = sorted(tuple(row[name] for name in names) for row in rows)
    return found


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


def _check_evaluation(dagster_home: Path | None, asset: str, check: str) -> tuple[str, Any]:
    """The run and the evaluation of the asset check's latest execution, read from the project's Dagster instance."""
    import dagster as dg

    assert dagster_home is not None
    key = dg.AssetCheckKey(dg.AssetKey(asset), check)
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
    assert record.event is not None and record.event.dagster_event is not None
    return record.run_id, record.event.dagster_event.event_specific_data


def _column_docs(dagster_home: Path | None, asset: str) -> dict[str, str | None]:
    """Each column's description in the asset's latest materialization (what the UI's Columns tab shows)."""
    schema = _latest_materialization(dagster_home, asset)["dagster/column_schema"].value
    return {column.name: column.description for column in schema.columns}


class Producer:
    """Confluent's Avro serializers on the secured stack (the settings `stack env` gives), schemas registered under
    the topic name strategy."""

    def __init__(self, stack: StackInfo) -> None:
        kafka, registry_client = clients_of(stack)
        self.config, self.registry = kafka.client_config(), registry_client.client()

    def customers(self) -> None:
        self._send(
            "customers", CUSTOMER_KEY, CUSTOMER_VALUE, [({"id": i}, {"id": i, "name": n}) for i, n in CUSTOMERS.items()]
        )

    def orders(self, orders: list[dict[str, Any]], value_schema: dict[str, Any] = ORDER_VALUE) -> None:
        self._send("orders", ORDER_KEY, value_schema, [(o["order_id"], o) for o in orders])

    def raw(self, value: bytes) -> None:
        from confluent_kafka import Producer as PlainProducer

        plain = PlainProducer(self.config)
        plain.produce("orders", value=value)
        assert plain.flush(30) == 0

    def _send(self, topic: str, key: Any, value: Any, records: list[tuple[Any, Any]]) -> None:
        from confluent_kafka import SerializingProducer
        from confluent_kafka.schema_registry.avro import AvroSerializer

        producer = SerializingProducer(
            {
                **self.config,
                "key.serializer": AvroSerializer(self.registry, json.dumps(key)),
                "value.serializer": AvroSerializer(self.registry, json.dumps(value)),
            }
        )
        for record_key, record_value in records:
            producer.produce(topic, key=record_key, value=record_value)
        assert producer.flush(30) == 0


def test_a_new_dg_project_declares_its_own_streaming_lakehouse_and_streams_it_exactly_once(
    session_stack: SessionStack, secured_stack: StackInfo, tmp_path: Path
) -> None:
    import dagster as dg
    from deltalake import DeltaTable

    from streaming_pipeline.components.live_runs import run_pid

    assert REPO_ROOT not in tmp_path.parents
    info = session_stack.clear_secured(secured_stack, tmp_path / "dagster_home")
    project = tmp_path / "shop"
    lakehouse = tmp_path / "lakehouse"
    env = {
        **environment_without_pipeline_settings(),
        **info.env(),
        "LAKEHOUSE_DIR": str(lakehouse),
        "LARGE_ORDER_MIN_TOTAL": "60",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        # the new project's package, as `pip install -e .` or `uv sync` would make it importable
        "PYTHONPATH": str(project / "src"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    _run([str(BIN / "create-dagster"), "project", str(project), "--no-uv-sync"], tmp_path, env)
    definitions = project / "src" / "shop" / "definitions.py"
    written = definitions.read_text()
    assert "load_from_defs_folder" in written and "streaming_pipeline" not in written
    listed = _run([str(BIN / "dg"), "list", "components", "--json"], project, env)
    assert "streaming_pipeline.components.KafkaDeltaSource" in listed
    assert "streaming_pipeline.components.StreamingTable" in listed

    # The sources, scaffolded: the first writes the project's resources.py, no scaffold a line to delete.
    scaffold = [str(BIN / "dg"), "scaffold", "defs"]
    _run([*scaffold, "streaming_pipeline.components.KafkaDeltaSource", "orders"], project, env)
    _run([*scaffold, "streaming_pipeline.components.KafkaDeltaSource", "customers", "--mode", "upsert"], project, env)
    defs = project / "src" / "shop" / "defs"
    assert yaml.safe_load((defs / "orders" / "defs.yaml").read_text()) == {
        "type": "streaming_pipeline.components.KafkaDeltaSource",
        "attributes": {"topic": "orders", "value_schema": "value.avsc"},
    }
    assert "@dg.definitions" in (defs / "resources.py").read_text()
    declared = yaml.safe_load((defs / "orders" / "defs.yaml").read_text())
    declared["attributes"]["expectations"] = SOURCE_EXPECTATIONS
    (defs / "orders" / "defs.yaml").write_text(yaml.safe_dump(declared))
    (defs / "orders" / "value.avsc").write_text(json.dumps(ORDER_VALUE))
    (defs / "customers" / "key.avsc").write_text(json.dumps(CUSTOMER_KEY))
    (defs / "customers" / "value.avsc").write_text(json.dumps(CUSTOMER_VALUE))
    # The tables: the scaffold streams the project's append source; each is then what the user wants.
    for path, attributes in SQL_TABLES.items():
        _run([*scaffold, "streaming_pipeline.components.StreamingTable", path], project, env)
        scaffolded = yaml.safe_load((defs / path / "defs.yaml").read_text())
        assert scaffolded["attributes"]["sql"] == "SELECT *\nFROM STREAM(raw_orders)\n"
        scaffolded["attributes"] = attributes
        (defs / path / "defs.yaml").write_text(yaml.safe_dump(scaffolded))
    (defs / "gold" / "last_orders.py").write_text(PYTHON_TABLE)
    _run([str(BIN / "dg"), "check", "defs"], project, env)
    listed_defs = json.loads(_run([str(BIN / "dg"), "list", "defs", "--json"], project, env, stdout_only=True))
    assets = {asset["asset_key"]: asset for asset in listed_defs["assets"]}
    tables = ["customer_totals", "large_orders", "last_orders", "orders_named"]
    assert sorted(assets) == sorted(
        [
            "dead_letter_records",
            "raw_customers",
            "raw_orders",
            "raw_orders_quarantine",
            "large_orders_quarantine",
            *tables,
        ]
    )
    assert {name: sorted(assets[name]["dependency_keys"]) for name in tables} == {
        "customer_totals": ["raw_orders"],
        "large_orders": ["raw_orders"],
        "last_orders": ["raw_orders"],
        "orders_named": ["raw_customers", "raw_orders"],
    }
    assert {name: assets[name]["group_name"] for name in tables} == {
        "customer_totals": "gold",
        "large_orders": "silver",
        "last_orders": "gold",
        "orders_named": "silver",
    }
    assert sorted(job["name"] for job in listed_defs["jobs"]) == [
        "continuous_streams_job",
        "live_checks_job",
        "raw_customers_downstream_job",
        "raw_orders_downstream_job",
        "table_maintenance_job",
    ]

    # 1. `dagster asset materialize`, with a record that cannot be decoded.
    producer = Producer(info)
    materialize = [str(BIN / "dagster"), "asset", "materialize", "-m", "shop.definitions", "--select", "*"]
    sent = _orders(0, 20)
    producer.customers()
    producer.orders(sent)
    producer.raw(b"not avro")
    _run(materialize, project, env)
    assert _tables(lakehouse) == _expected(sent)
    assert _column_docs(info.dagster_home, "raw_orders") == {
        **{f["name"]: f["doc"] for f in ORDER_VALUE["fields"]},  # type: ignore[union-attr]
        **KAFKA_COLUMN_DOCS,
    }
    # its own column's description, and raw_orders' for the columns it passes through
    assert _column_docs(info.dagster_home, "large_orders") == LARGE_ORDERS_DOCS
    # what the source's expectations found in the run's 20 decoded orders, and large_orders' in the orders it read
    source_found = {
        rule: sum(rule in _source_broken(o) for o in sent) for rule in ("customer_below_3", "total_at_least_4")
    }
    assert source_found == {"customer_below_3": 5, "total_at_least_4": 1}
    metadata = _latest_materialization(info.dagster_home, "raw_orders")
    assert (metadata["rows_checked"].value, metadata["rows_quarantined"].value) == (20, 1)
    for rule, violations in source_found.items():
        assert metadata[f"violations_{rule}"].value == violations
        _, evaluation = _check_evaluation(info.dagster_home, "raw_orders", rule)
        assert (evaluation.passed, evaluation.metadata["violations"].value) == (False, violations)
    checked = [o for o in sent if o["total"] > 60]
    found = {rule: sum(rule in _broken(o) for o in checked) for rule in ("known_customer", "below_90", "even_order")}
    assert all(found.values())  # every warn and drop rule is broken by some order, some break two at once
    assert any(len(_broken(o)) >= 2 for o in checked)
    metadata = _latest_materialization(info.dagster_home, "large_orders")
    assert metadata["rows_checked"].value == len(checked)
    assert metadata["rows_quarantined"].value == sum(_dropped(o) for o in checked)
    for rule, violations in {**found, "below_1000": 0}.items():
        assert metadata[f"violations_{rule}"].value == violations
        _, evaluation = _check_evaluation(info.dagster_home, "large_orders", rule)
        assert (evaluation.passed, evaluation.metadata["violations"].value) == (violations == 0, violations)
        severity = dg.AssetCheckSeverity.ERROR if rule == "below_1000" else dg.AssetCheckSeverity.WARN
        assert (evaluation.severity, evaluation.metadata["rows_checked"].value) == (severity, len(checked))
    # 2. The offset sensors of `dagster dev`: the daemon launches raw_orders' live job, with every table downstream.
    dev_env = {**env, "OFFSET_SENSOR_INTERVAL_SECONDS": "5", "OFFSET_SENSOR_RETRY_BACKOFF_SECONDS": "2"}
    target = ["-m", "shop.definitions"]
    log = tmp_path / "dagster-dev-triggered.log"
    with (
        DagsterDev(dev_env, log, target=target, cwd=project),
        dg.DagsterInstance.from_config(str(info.dagster_home)) as instance,
    ):
        # a producer moves on to a later version of the value schema, with a field the declaration does not have
        later = _orders(20, 25)
        producer.orders(later, ORDER_VALUE_V2)
        sent += later
        wait_until("the sensors' runs write every table", lambda: _tables(lakehouse) == _expected(sent), log=log)

        def sensor_runs() -> list[Any]:
            return list(
                instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": "raw_orders_offset_sensor"}))
            )

        wait_until("the sensors' runs end", lambda: all(run.is_finished for run in sensor_runs()), log=log)
        assert sensor_runs() and all(run.status == dg.DagsterRunStatus.SUCCESS for run in sensor_runs())
    columns = _column_docs(info.dagster_home, "raw_orders")
    assert [name for name, doc in columns.items() if doc == EVOLVED] == ["coupon"]
    assert _latest_materialization(info.dagster_home, "dead_letter_records")["dead_letters_by_topic"].value == {
        "orders": 1
    }

    # 3. The continuous run, SIGKILLed while records arrive, and launched again by its sensor.
    log = tmp_path / "dagster-dev-continuous.log"
    with (
        DagsterDev({**dev_env, "LIVE_MODE": "continuous"}, log, target=target, cwd=project),
        dg.DagsterInstance.from_config(str(info.dagster_home)) as instance,
    ):

        def continuous_run() -> Any:
            runs = instance.get_runs(
                filters=dg.RunsFilter(job_name="continuous_streams_job", statuses=[dg.DagsterRunStatus.STARTED])
            )
            return runs[0] if runs else None

        wait_until("a continuous run", lambda: continuous_run() is not None, log=log)
        later = _orders(45, 20)
        producer.orders(later)
        sent += later
        wait_until("the continuous run writes every table", lambda: _tables(lakehouse) == _expected(sent), log=log)
        killed = continuous_run()

        def evaluated_by_the_run(asset: str, check: str) -> bool:
            # a report of the run evaluated the rules on rows it wrote (it reports every few seconds)
            run_id, evaluation = _check_evaluation(info.dagster_home, asset, check)
            return run_id == killed.run_id and evaluation.metadata["rows_checked"].value > 0

        wait_until(
            "the continuous run evaluates the source's and large_orders' expectations",
            lambda: (
                evaluated_by_the_run("raw_orders", "customer_below_3")
                and evaluated_by_the_run("large_orders", "below_90")
            ),
            log=log,
        )
        pid = run_pid(instance, killed.run_id)
        assert pid is not None
        later = _orders(65, 20)
        producer.orders(later[:10])
        os.kill(pid, signal.SIGKILL)
        producer.orders(later[10:])
        sent += later
        wait_until(
            "another continuous run",
            lambda: (run := continuous_run()) is not None and run.run_id != killed.run_id,
            log=log,
        )
        wait_until("the new run writes every table", lambda: _tables(lakehouse) == _expected(sent), log=log)

    # the continuous run's reports describe the SQL table's columns as the materializations do
    assert _column_docs(info.dagster_home, "large_orders") == LARGE_ORDERS_DOCS

    # 4. `streaming-pipeline replay` of the project's source rebuilds it and every table downstream, each row once.
    replayed = _run([str(BIN / "streaming-pipeline"), "replay", "raw_orders", "--project", str(project)], project, env)
    assert "rebuilt downstream" in replayed, replayed
    assert _tables(lakehouse) == _expected(sent)
    assert definitions.read_text() == written
    rows = DeltaTable(str(lakehouse / "raw_orders")).to_pyarrow_table().to_pylist()
    assert sorted(r["order_id"] for r in rows) == [o["order_id"] for o in sent if not _dropped_by_source(o)]
    assert not [c for c, n in Counter((r["kafka_partition"], r["kafka_offset"]) for r in rows).items() if n > 1]
    dead = [
        r
        for r in DeltaTable(str(lakehouse / "dead_letter_records")).to_pyarrow_table().to_pylist()
        if r["kafka_topic"] == "orders"
    ]
    assert [(r["raw_key"], r["raw_value"]) for r in dead] == [(None, b"not avro")]
