"""`StreamingTable` in a defs folder of its own (Dagster's component sandbox) beside a `KafkaDeltaSource`: what its
SQL reads, what one declaration builds, each refusal `dg check defs` gives (naming the file and the fault), what
`dg scaffold defs` writes; then each shape run on the session's Spark, twice over the same lakehouse (each row
once), and the unit-test helper on rows the test gives. Expected rows are computed here from the input rows."""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster.components.testing import DefsFolderSandbox, create_defs_folder_sandbox

from streaming_pipeline.components import StreamingTable
from streaming_pipeline.components.streaming_table.checks import not_behind_sources_check
from streaming_pipeline.lakehouse.engine.source_lag import source_lag
from streaming_pipeline.lakehouse.errors import StreamingTableStateError
from streaming_pipeline.lakehouse.streaming_sql import StreamingSqlError, read_sql
from streaming_pipeline_tests.avro_examples import PAYMENT_VALUE
from streaming_pipeline_tests.error_helpers import error_chain


def _messages(error: BaseException) -> str:
    return "\n".join(str(e) for e in error_chain(error))


@pytest.fixture()
def sandbox() -> Iterator[DefsFolderSandbox]:
    with create_defs_folder_sandbox() as sandbox:
        source = sandbox.defs_folder_path / "payments"
        source.mkdir(parents=True)
        (source / "payment_value.avsc").write_text(json.dumps(PAYMENT_VALUE))
        (source / "defs.yaml").write_text(
            yaml.safe_dump(
                {
                    "type": "streaming_pipeline.components.KafkaDeltaSource",
                    "attributes": {"topic": "payments", "value_schema": "payment_value.avsc"},
                }
            )
        )
        accounts = sandbox.defs_folder_path / "accounts"  # a table topic: updated in place
        accounts.mkdir()
        (accounts / "key.avsc").write_text(json.dumps(ACCOUNT_KEY))
        (accounts / "value.avsc").write_text(json.dumps(ACCOUNT_VALUE))
        (accounts / "defs.yaml").write_text(
            yaml.safe_dump(
                {
                    "type": "streaming_pipeline.components.KafkaDeltaSource",
                    "attributes": {
                        "topic": "accounts",
                        "mode": "upsert",
                        "key_schema": "key.avsc",
                        "value_schema": "value.avsc",
                    },
                }
            )
        )
        yield sandbox


ACCOUNT_KEY = {"type": "record", "name": "AccountKey", "fields": [{"name": "account", "type": "string"}]}
ACCOUNT_VALUE = {
    "type": "record",
    "name": "Account",
    "fields": [{"name": "account", "type": "string"}, {"name": "owner", "type": "string"}],
}


def _declare(sandbox: DefsFolderSandbox, folder: str, attributes: dict[str, Any]) -> Path:
    path = sandbox.defs_folder_path / folder
    path.mkdir(parents=True)
    (path / "defs.yaml").write_text(
        yaml.safe_dump(
            {"type": "streaming_pipeline.components.StreamingTable", "attributes": attributes}, sort_keys=False
        )
    )
    return path


def _rule(name: str, expect: str, on_violation: str = "warn") -> dict[str, str]:
    return {"name": name, "expect": expect, "on_violation": on_violation}


# --- the SQL --------------------------------------------------------------------------------------------------------


def test_the_sql_names_what_it_streams_what_it_reads_as_it_is_and_runs_as_written() -> None:
    sql = (
        "SELECT /*+ BROADCAST(a) */ p.payment_id, a.owner\n"
        "FROM STREAM( raw_payments ) p JOIN `accounts` a ON p.account = a.id\n"
        "WHERE p.amount > ${min_amount} AND p.note RLIKE '{x}'"
    )
    read = read_sql(sql, {"min_amount": 10})
    assert (read.streamed, read.static, read.parameters, read.aggregates) == (
        ("raw_payments",),
        ("accounts",),
        ("min_amount",),
        False,
    )
    text, arguments = read.with_arguments()
    assert text == (
        "SELECT /*+ BROADCAST(a) */ p.payment_id, a.owner\nFROM {stream_0} p JOIN {table_1} a ON p.account = a.id\n"
        "WHERE p.amount > 10 AND p.note RLIKE '{{x}}'"
    )
    assert arguments == {"stream_0": ("raw_payments", True), "table_1": ("accounts", False)}
    windows = read_sql(
        "WITH s AS (SELECT * FROM STREAM(raw_payments)) "
        "SELECT window(paid_at, '1 hour') AS w, account, count(*) AS n FROM s GROUP BY window(paid_at, '1 hour'), "
        "account",
        {},
    )
    # the plain columns it groups by sort a complete table's preview
    assert (windows.reads, windows.aggregates, windows.grouped_by) == (("raw_payments",), True, ("account",))


@pytest.mark.parametrize(
    ("sql", "fault"),
    [
        ("SELECT * FROM STREAM(raw_payments) WHERE", "the SQL does not parse: line 1, column"),
        ("SELECT * FROM STREAM raw_payments", "write STREAM(raw_payments), with parentheses"),
        ("SELECT * FROM finance.accounts", "name a table of the lakehouse by its asset name (accounts)"),
        ("SELECT 1; SELECT 2", "2 statements"),
        ("DELETE FROM raw_payments", "not a query"),
    ],
)
def test_sql_that_cannot_be_a_streaming_table_is_refused_naming_the_fault(sql: str, fault: str) -> None:
    with pytest.raises(StreamingSqlError, match=None) as raised:
        read_sql(sql, {})
    assert fault in str(raised.value)


# --- one declaration ------------------------------------------------------------------------------------------------


def test_a_declaration_builds_an_asset_that_depends_on_what_its_sql_reads_with_its_parameters_as_config(
    sandbox: DefsFolderSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LARGE_PAYMENT_MIN", "250")
    path = _declare(
        sandbox,
        "large_payments",
        {
            "name": "large_payments",
            "sql": "SELECT payment_id, amount FROM STREAM(raw_payments) WHERE amount > ${min_amount}",
            "parameters": {
                "min_amount": {"default": 100, "type": "number", "env": "LARGE_PAYMENT_MIN", "description": "Smallest"}
            },
            "group": "gold",
            "description": "Payments over the threshold.",
            "columns": {"amount": "Dollars."},
            "owners": ["team:finance"],
        },
    )
    with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
        assert isinstance(component, StreamingTable)
        asset = defs.get_assets_def("large_payments")
        spec = asset.specs_by_key[dg.AssetKey("large_payments")]
        assert (spec.group_name, spec.description, spec.owners) == (
            "gold",
            "Payments over the threshold.",
            ["team:finance"],
        )
        assert [dep.asset_key for dep in spec.deps] == [dg.AssetKey("raw_payments")]
        assert spec.metadata["dagster/table_name"] == "gold.large_payments"
        config = asset.op.config_schema.as_field().default_value
        assert config == {"min_amount": 250.0}  # the environment's, read when the definitions load
        assert "dagster/column_schema" not in spec.metadata  # no types: the columns are the query's, once written


def test_columns_with_a_type_each_declare_the_schema_the_ui_shows_before_the_first_run(
    sandbox: DefsFolderSandbox,
) -> None:
    columns = {"payment_id": {"type": "BIGINT"}, "amount": {"type": "double", "description": "Dollars."}}
    path = _declare(
        sandbox,
        "payments_copy",
        {"name": "payments_copy", "sql": "SELECT payment_id, amount FROM STREAM(raw_payments)", "columns": columns},
    )
    with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
        spec = defs.get_assets_def("payments_copy").specs_by_key[dg.AssetKey("payments_copy")]
        assert spec.metadata["dagster/column_schema"] == dg.TableSchema(
            columns=[dg.TableColumn("payment_id", "bigint"), dg.TableColumn("amount", "double", description="Dollars.")]
        )


@pytest.mark.parametrize(
    ("attributes", "fault"),
    [
        ({"sql": "SELECT * FROM STREAM(raw_payments) WHERE"}, "the SQL does not parse"),
        ({"sql": "SELECT * FROM STREAM(raw_refunds)"}, "reads raw_refunds, which no declaration of the project writes"),
        (
            {"sql": "SELECT account, count(*) AS n FROM STREAM(raw_payments) GROUP BY account"},
            "an aggregation in `mode: append` emits a group once its watermark passes",
        ),
        (
            {"sql": "SELECT account, count(*) AS n FROM STREAM(raw_payments) GROUP BY account", "mode": "upsert"},
            "`mode: upsert` merges rows by key: set `keys`",
        ),
        ({"sql": "SELECT * FROM STREAM(raw_payments)", "mode": "complete"}, "the SQL does not aggregate"),
        ({"sql": "SELECT * FROM STREAM(raw_payments)", "sequence_by": "paid_at"}, "are for `mode: upsert`"),
        ({"sql": "SELECT * FROM STREAM(raw_payments) WHERE amount > ${m}"}, "declare each under `parameters`"),
        (
            {
                "sql": "SELECT * FROM STREAM(raw_payments) WHERE amount > ${m}",
                "parameters": {"m": {"default": "lots", "type": "number"}},
            },
            "parameter m: default 'lots' is not a number",
        ),
        ({"sql": "SELECT * FROM raw_payments"}, "it streams no table: mark the table it streams from STREAM"),
        ({"name": "raw_payments", "sql": "SELECT * FROM STREAM(raw_payments)"}, "declared more than once"),
        (
            {
                "sql": "SELECT * FROM STREAM(raw_payments)",
                "watermarks": {"raw_payments": {"column": "a", "delay": "x"}},
            },
            "payments_out: the watermark delay of raw_payments",
        ),
        (
            {
                "sql": "SELECT * FROM STREAM(raw_payments)",
                "watermarks": {"raw_payments": {"column": "paid_at", "delay": "${lateness}"}},
            },
            "the watermark delay of raw_payments uses ${lateness}: declare it under `parameters`",
        ),
        (
            {"sql": "SELECT * FROM STREAM(raw_payments)", "late_rows_table": "late_payments"},
            "`late_rows_table` records the rows its watermark drops: declare `watermarks`",
        ),
        (
            {"sql": "SELECT * FROM STREAM(raw_accounts)"},
            "streams raw_accounts, which is updated in place (a table topic",
        ),
        (
            {"sql": "SELECT * FROM STREAM(raw_payments)", "columns": {"a": {"type": "int"}, "b": "B."}},
            "gives the type of some columns and not of b",
        ),
        (
            {"sql": "SELECT * FROM STREAM(raw_payments)", "expectations": [_rule("paid", "amount >= 0")] * 2},
            "expectation 'paid' is declared twice",
        ),
        (
            {"sql": "SELECT * FROM STREAM(raw_payments)", "expectations": [_rule("paid", "amount >= 0", "ignore")]},
            "on_violation",
        ),
        (
            {"sql": "SELECT * FROM STREAM(raw_payments)", "expectations": [_rule("paid", "amount + 1")]},
            "expectation 'paid': 'amount + 1' is not a boolean expression",
        ),
        (
            {"sql": "SELECT * FROM STREAM(raw_payments)", "expectations": [_rule("paid", "amount >=")]},
            "expectation 'paid': 'amount >=' does not parse",
        ),
        (
            {"sql": "SELECT * FROM STREAM(raw_payments)", "expectations": [_rule("paid", "count(*) > 0")]},
            "aggregates; a rule reads one row at a time",
        ),
        (
            {
                "sql": "SELECT payment_id, amount FROM STREAM(raw_payments)",
                "expectations": [_rule("a", "account > ''")],
            },
            "names account, not a column of the table (its columns: payment_id, amount)",
        ),
        (
            {
                "sql": "SELECT account, count(*) AS n FROM STREAM(raw_payments) GROUP BY account",
                "mode": "complete",
                "expectations": [_rule("some", "n > 0", "drop")],
            },
            "only an append table can set aside (this one is `mode: complete`)",
        ),
        (
            {
                "sql": "SELECT * FROM STREAM(raw_payments)",
                "quarantine_table": "q",
                "expectations": [_rule("a", "true")],
            },
            "`quarantine_table` takes the rows that `drop` rules set aside, and it has none",
        ),
    ],
)
def test_a_declaration_that_cannot_run_is_refused_naming_its_file_and_the_fault(
    sandbox: DefsFolderSandbox, attributes: dict[str, Any], fault: str
) -> None:
    path = _declare(sandbox, "payments_out", {"name": "payments_out", **attributes})
    with pytest.raises(Exception) as raised, sandbox.build_all_defs():
        pass
    chain = _messages(raised.value)
    assert str(path / "defs.yaml") in chain and fault in chain, chain


def test_each_expectation_is_an_asset_check_and_drop_rules_bring_a_quarantine_table_downstream(
    sandbox: DefsFolderSandbox,
) -> None:
    rules = [
        _rule("known_account", "account IS NOT NULL"),
        _rule("non_negative", "amount >= 0", "drop"),
        _rule("below_limit", "amount < 1000000", "fail"),
    ]
    path = _declare(
        sandbox, "checked", {"name": "checked", "sql": "SELECT * FROM STREAM(raw_payments)", "expectations": rules}
    )
    with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
        asset = defs.get_assets_def("checked")
        assert sorted(key.name for key in asset.check_keys) == ["below_limit", "known_account", "non_negative"]
        assert all(key.asset_key == dg.AssetKey("checked") for key in asset.check_keys)
        quarantine = asset.specs_by_key[dg.AssetKey("checked_quarantine")]
        assert sorted(dep.asset_key.path[-1] for dep in quarantine.deps) == ["checked", "raw_payments"]
        assert "non_negative (amount >= 0)" in (quarantine.description or "")


def test_a_parameter_without_a_default_is_refused_naming_the_field(sandbox: DefsFolderSandbox) -> None:
    path = _declare(
        sandbox,
        "payments_out",
        {
            "name": "payments_out",
            "sql": "SELECT * FROM STREAM(raw_payments) WHERE amount > ${m}",
            "parameters": {"m": {"env": "M"}},
        },
    )
    with pytest.raises(Exception) as raised, sandbox.load_component_and_build_defs(defs_path=path):
        pass
    chain = _messages(raised.value)
    assert "default" in chain and "m" in chain and str(path / "defs.yaml") in chain, chain


_PYTHON_TABLE = """
from pyspark.sql import functions as F

from streaming_pipeline.components import streaming_table


@streaming_table(streams=["raw_payments"], tables=["raw_accounts"], group="gold", owners=["team:finance"])
def payment_owners(raw_payments, raw_accounts, parameters):
    \"\"\"Each payment with its account's owner.\"\"\"
    return raw_payments.join(raw_accounts, "account").select("payment_id", "owner")
"""


def test_a_python_function_declares_a_table_with_the_same_attributes(sandbox: DefsFolderSandbox) -> None:
    (sandbox.defs_folder_path / "payment_owners.py").write_text(_PYTHON_TABLE)
    with sandbox.build_all_defs() as defs:
        spec = defs.get_assets_def("payment_owners").specs_by_key[dg.AssetKey("payment_owners")]
        assert (spec.group_name, spec.description, spec.owners) == (
            "gold",
            "Each payment with its account's owner.",
            ["team:finance"],
        )
        assert sorted(dep.asset_key.to_user_string() for dep in spec.deps) == ["raw_accounts", "raw_payments"]


def test_the_same_table_declared_twice_is_refused(sandbox: DefsFolderSandbox) -> None:
    for folder in ("one", "two"):
        _declare(sandbox, folder, {"name": "payments_out", "sql": "SELECT * FROM STREAM(raw_payments)"})
    with pytest.raises(Exception) as raised, sandbox.build_all_defs():
        pass
    assert "table 'payments_out' is declared more than once" in _messages(raised.value)


def test_scaffold_writes_a_table_that_streams_the_projects_source_and_loads(sandbox: DefsFolderSandbox) -> None:
    path = sandbox.scaffold_component(component_cls=StreamingTable, defs_path="gold/payments_copy")
    declared = yaml.safe_load((path / "defs.yaml").read_text())["attributes"]
    assert declared == {
        "name": "payments_copy",
        "sql": "SELECT *\nFROM STREAM(raw_payments)\n",
        "mode": "append",
        "group": "gold",
    }
    with sandbox.build_all_defs() as defs:
        spec = defs.get_assets_def("payments_copy").specs_by_key[dg.AssetKey("payments_copy")]
        assert [dep.asset_key for dep in spec.deps] == [dg.AssetKey("raw_payments")]
        assert sorted(defs.resources or {}) == ["kafka", "lakehouse", "schema_registry", "spark"]


# --- on Spark -------------------------------------------------------------------------------------------------------

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
PAYMENTS = "payment_id long, account string, amount double, paid_at timestamp"


def _payments(first: int, count: int) -> list[tuple[int, str, float, dt.datetime]]:
    return [(i, f"a{i % 3}", float(i * 10), T0 + dt.timedelta(minutes=i)) for i in range(first, first + count)]


def test_each_shape_streams_each_row_once_over_two_runs_and_the_helper_runs_the_query_on_given_rows(
    spark: Any, tmp_path: Path
) -> None:
    from streaming_pipeline.lakehouse.engine.streams import run_once
    from streaming_pipeline.lakehouse.streaming_sql import read_sql as read
    from streaming_pipeline.lakehouse.streaming_tables import SqlTransformation, StreamingTableQuery, Watermark
    from streaming_pipeline.resources import LakehouseResource

    lakehouse = LakehouseResource(root=str(tmp_path / "lakehouse"))

    def append_payments(rows: list[tuple[int, str, float, dt.datetime]]) -> None:
        frame = spark.createDataFrame(rows, PAYMENTS)
        frame.write.format("delta").mode("append").save(lakehouse.table_path("raw_payments"))

    def declared(name: str, sql: str, mode: str = "append", **extra: Any) -> StreamingTableQuery:
        sql_read = read(sql, {"min_amount": 0})
        return StreamingTableQuery(name, sql_read.streamed, sql_read.static, SqlTransformation(sql), mode, **extra)

    owners = lakehouse.table_path("accounts")
    tables = {
        "large": declared("large", "SELECT payment_id, amount FROM STREAM(raw_payments) WHERE amount > ${min_amount}"),
        "owned": declared(
            "owned",
            "SELECT p.payment_id, a.owner FROM STREAM(raw_payments) p JOIN accounts a ON p.account = a.account",
        ),
        "totals": declared(
            "totals",
            "SELECT account, count(*) AS n, sum(amount) AS total FROM STREAM(raw_payments) GROUP BY account",
            "complete",
        ),
        "latest": declared(
            "latest",
            "SELECT account, max(payment_id) AS last_id FROM STREAM(raw_payments) GROUP BY account",
            "upsert",
            keys=("account",),
        ),
        "everything": declared("everything", "SELECT * FROM STREAM(raw_payments)"),
        "owners_now": declared(
            "owners_now",
            "SELECT * FROM STREAM(account_changes)",
            "upsert",
            keys=("account",),
            sequence_by="version",
        ),
        "per_10_minutes": declared(
            "per_10_minutes",
            "SELECT window(paid_at, '10 minutes').start AS start, count(*) AS n FROM STREAM(raw_payments) "
            "GROUP BY window(paid_at, '10 minutes')",
            watermarks={"raw_payments": Watermark("paid_at", "0 seconds")},
        ),
    }
    parameters = {"min_amount": "95"}
    first, second = _payments(0, 12), _payments(12, 18)
    append_payments(first)
    spark.createDataFrame([("a0", "Ann"), ("a1", "Bob")], "account string, owner string").write.format("delta").save(
        owners
    )
    changes = lakehouse.table_path("account_changes")
    change = "account string, version long, owner string"
    # a0's version 3 comes before its version 2, in an earlier micro-batch; a1's two versions in one micro-batch
    spark.createDataFrame([("a0", 1, "Ann"), ("a0", 3, "Ann3"), ("a1", 2, "Bob")], change).write.format("delta").save(
        changes
    )
    for table in tables.values():
        run_once(table.query(spark, lakehouse, parameters))
    # The second runs' sources have a column more (a new field of their schema): it joins the tables that select it.
    later_change = f"{change}, note string"
    spark.createDataFrame(
        [("a0", 2, "Old", "n2"), ("a1", 5, "Bob5", "n5"), ("a1", 4, "Bob4", "n4")], later_change
    ).write.format("delta").mode("append").option("mergeSchema", "true").save(changes)
    spark.createDataFrame([(*p, "late") for p in second], f"{PAYMENTS}, note string").write.format("delta").mode(
        "append"
    ).option("mergeSchema", "true").save(lakehouse.table_path("raw_payments"))
    spark.createDataFrame([("a2", "Cy")], "account string, owner string").write.format("delta").mode("append").save(
        owners
    )
    for table in tables.values():  # twice: a run with nothing new writes nothing
        run_once(table.query(spark, lakehouse, parameters))
        run_once(table.query(spark, lakehouse, parameters))

    def rows(name: str) -> list[tuple[Any, ...]]:
        return sorted(tuple(r) for r in spark.read.format("delta").load(lakehouse.table_path(name)).collect())

    every = first + second
    names = {"a0": "Ann", "a1": "Bob", "a2": "Cy"}
    assert rows("large") == [(i, a) for i, _, a, _ in every if a > 95]
    # the accounts as they were at each micro-batch: a2 had no owner for the first run's payments
    assert rows("owned") == sorted(
        [(i, names[acc]) for i, acc, _, _ in first if acc != "a2"] + [(i, names[acc]) for i, acc, _, _ in second]
    )
    by_account = {acc: [p for p in every if p[1] == acc] for acc in names}
    assert rows("totals") == [(acc, len(ps), sum(p[2] for p in ps)) for acc, ps in sorted(by_account.items())]
    assert rows("latest") == [(acc, max(p[0] for p in ps)) for acc, ps in sorted(by_account.items())]
    # sequence_by: each account's highest version, whatever the order its versions arrived in
    assert rows("owners_now") == [("a0", 3, "Ann3", None), ("a1", 5, "Bob5", "n5")]
    assert rows("everything") == sorted(
        [(*p[:3], p[3].replace(tzinfo=None), None) for p in first]
        + [(*p[:3], p[3].replace(tzinfo=None), "late") for p in second]
    )
    # append: a window is written once, with every payment of it, after a micro-batch's watermark (the latest
    # paid_at before it) passed its end; Spark emits it one micro-batch later than the one that closed it.
    latest = max(p[3] for p in every)
    starts = sorted({T0 + dt.timedelta(minutes=10 * (p[0] // 10)) for p in every})
    closed = {
        s.replace(tzinfo=None): sum(1 for p in every if s <= p[3] < s + dt.timedelta(minutes=10))
        for s in starts
        if s + dt.timedelta(minutes=10) <= latest
    }
    written = rows("per_10_minutes")
    assert written and all(closed.get(start) == n for start, n in written), (written, closed)
    assert written[0] == (T0.replace(tzinfo=None), 10)

    # Not behind its sources: each query has read raw_payments' newest version; a commit no run has read yet is
    # unread, since its commit time (the table's history, as Spark reads it).
    caught_up = spark.sql(f"DESCRIBE HISTORY delta.`{lakehouse.table_path('raw_payments')}`").first()
    lag = source_lag(lakehouse.checkpoint_path("totals"), "raw_payments", lakehouse.table_path("raw_payments"))
    assert (lag.read_version, lag.latest_version, lag.oldest_unread_at) == (caught_up.version, caught_up.version, None)
    append_payments(_payments(30, 1))
    unread = spark.sql(f"DESCRIBE HISTORY delta.`{lakehouse.table_path('raw_payments')}`").first()
    lag = source_lag(lakehouse.checkpoint_path("totals"), "raw_payments", lakehouse.table_path("raw_payments"))
    assert (lag.read_version, lag.latest_version) == (caught_up.version, unread.version)
    commit = Path(lakehouse.table_path("raw_payments")) / "_delta_log" / f"{unread.version:020d}.json"
    (info,) = [line["commitInfo"] for line in map(json.loads, commit.read_text().splitlines()) if "commitInfo" in line]
    assert lag.oldest_unread_at == info["timestamp"] / 1000
    for tolerance, passed in ((3600.0, True), (0.0, False)):
        result = not_behind_sources_check("totals", ["raw_payments"], tolerance)(lakehouse=lakehouse)
        assert (result.passed, result.severity) == (passed, dg.AssetCheckSeverity.WARN)
        assert result.metadata["raw_payments_read_version"].value == caught_up.version

    # An append table whose checkpoint is gone is refused, and gains no row: a new query would append every row of
    # its sources again.
    shutil.rmtree(lakehouse.checkpoint_path("large"))
    kept = rows("large")
    with pytest.raises(
        StreamingTableStateError, match=r"large holds \d+ row\(s\) but its checkpoint .* does not exist"
    ):
        run_once(tables["large"].query(spark, lakehouse, parameters))
    assert rows("large") == kept

    # The helper for unit tests: a declaration's query on rows the test gives, no lakehouse.
    given = spark.createDataFrame(_payments(0, 5), PAYMENTS)
    declaration = StreamingTable(
        name="totals",
        mode="complete",
        sql="SELECT account, count(*) AS n, sum(amount) AS total FROM STREAM(raw_payments) GROUP BY account",
    )
    helped = declaration.table_query().rows_for(spark, {"raw_payments": given})
    assert sorted(tuple(r) for r in helped.collect()) == [("a0", 2, 30.0), ("a1", 2, 50.0), ("a2", 1, 20.0)]


RULES = (
    ("known_account", "account IS NOT NULL", "warn"),
    ("non_negative", "amount >= 0", "drop"),
    ("whole", "amount = floor(amount)", "drop"),
    ("below_limit", "amount < 1000000", "fail"),
)


def _defective_payments(first: int, count: int) -> list[tuple[int, str | None, float]]:
    """Payments, some without an account, some negative, some negative and not whole (breaking three rules)."""
    return [
        (i, None if i % 4 == 1 else f"a{i % 3}", -1.5 if i % 6 == 5 else (-float(i) if i % 5 == 3 else float(i * 10)))
        for i in range(first, first + count)
    ]


def _broken(payment: tuple[int, str | None, float]) -> list[str]:
    """The rules a payment breaks, in their order, computed in Python."""
    _, account, amount = payment
    holds = {
        "known_account": account is not None,
        "non_negative": amount >= 0,
        "whole": amount == math.floor(amount),
        "below_limit": amount < 1_000_000,
    }
    return [name for name, _, _ in RULES if not holds[name]]


def test_expectations_warn_drop_and_fail_and_each_row_is_written_once_across_a_crash_between_the_two_writes(
    spark: Any, tmp_path: Path
) -> None:
    from streaming_pipeline.lakehouse.engine.streams import run_once
    from streaming_pipeline.lakehouse.errors import ExpectationError, StreamingRunError
    from streaming_pipeline.lakehouse.expectations import Expectation, counts_of
    from streaming_pipeline.lakehouse.streaming_tables import SqlTransformation, StreamingTableQuery
    from streaming_pipeline.resources import LakehouseResource

    lakehouse = LakehouseResource(root=str(tmp_path / "lakehouse"))
    schema = "payment_id long, account string, amount double"
    sql = "SELECT payment_id, account, amount FROM STREAM(raw_payments)"

    def table(rules: tuple[tuple[str, str, str], ...] = RULES) -> StreamingTableQuery:
        expectations = tuple(Expectation(name, constraint, action) for name, constraint, action in rules)  # type: ignore[arg-type]
        return StreamingTableQuery(
            "checked",
            ("raw_payments",),
            (),
            SqlTransformation(sql),
            expectations=expectations,
            quarantine_table="checked_quarantine",
        )

    def send(payments: list[tuple[int, str | None, float]]) -> None:
        frame = spark.createDataFrame(payments, schema)
        frame.write.format("delta").mode("append").save(lakehouse.table_path("raw_payments"))

    def rows(name: str) -> list[tuple[Any, ...]]:
        frame = spark.read.format("delta").load(lakehouse.table_path(name))
        frame = frame.drop("_quarantined_at") if "_quarantined_at" in frame.columns else frame
        return sorted(tuple(r) for r in frame.collect())

    def expected(payments: list[tuple[int, str | None, float]]) -> tuple[list[Any], list[Any]]:
        dropped = {"non_negative", "whole"}
        kept = sorted(p for p in payments if not dropped & set(_broken(p)))
        return kept, sorted((*p, _broken(p)) for p in payments if dropped & set(_broken(p)))

    def counted(payments: list[tuple[int, str | None, float]]) -> tuple[int, dict[str, int], int]:
        violations = {name: sum(name in _broken(p) for p in payments) for name, _, _ in RULES}
        return len(payments), violations, len(expected(payments)[1])

    first, second = _defective_payments(0, 12), _defective_payments(12, 12)
    assert _broken(first[5]) == ["known_account", "non_negative", "whole"]  # rows breaking several rules are sent
    send(first)
    run = run_once(table().query(spark, lakehouse, {}))
    counts = counts_of(run.report.progresses, table().expectations)
    assert (counts.rows, dict(counts.violations), counts.dropped) == counted(first)
    violating = [f'{{"amount":{p[2]}}}' for p in first if "non_negative" in _broken(p)]
    assert len(counts.samples["non_negative"]) == min(len(violating), 5)
    assert set(counts.samples["non_negative"]) <= set(violating)
    kept, quarantined = expected(first)
    assert rows("checked") == kept
    assert [r[:4] for r in rows("checked_quarantine")] == quarantined
    assert {r[4] for r in rows("checked_quarantine")} == {0}  # the micro-batch that set each aside

    # A crash between the table's write and the quarantine's: the quarantine's place is taken by a file.
    send(second)
    quarantine = Path(lakehouse.table_path("checked_quarantine"))
    quarantine.rename(tmp_path / "aside")
    quarantine.write_text("in the way")
    with pytest.raises(StreamingRunError):
        run_once(table().query(spark, lakehouse, {}))
    assert rows("checked") == expected(first + second)[0]  # the table's write came before the crash
    quarantine.unlink()
    (tmp_path / "aside").rename(quarantine)
    run = run_once(table().query(spark, lakehouse, {}))  # the micro-batch again: its quarantine only is written
    counts = counts_of(run.report.progresses, table().expectations)
    assert (counts.rows, dict(counts.violations), counts.dropped) == counted(second)  # the crashed attempt: uncounted
    kept, quarantined = expected(first + second)
    assert rows("checked") == kept
    assert [r[:4] for r in rows("checked_quarantine")] == quarantined

    # fail: nothing of the micro-batch is written, the error names the table, the rule and the values, and the next
    # run reads the same records again.
    third = [(24, "a0", 5_000_000.0), (25, "a1", -2.0)]
    send(third)
    for _ in range(2):
        with pytest.raises(StreamingRunError) as failed:
            run_once(table().query(spark, lakehouse, {}))
        assert "checked: micro-batch 2 broke the expectation(s) 'below_limit' (amount < 1000000)" in str(failed.value)
        assert '{"amount":5000000.0}' in str(failed.value)
        assert (rows("checked"), [r[:4] for r in rows("checked_quarantine")]) == (kept, quarantined)
    relaxed = tuple(
        (name, constraint, "warn" if name == "below_limit" else action) for name, constraint, action in RULES
    )
    run_once(table(relaxed).query(spark, lakehouse, {}))
    kept, quarantined = expected(first + second + third)
    assert (rows("checked"), [r[:4] for r in rows("checked_quarantine")]) == (kept, quarantined)

    # The unit-test helper: the same rules on rows a test gives, with no lakehouse.
    helped = table().checked_rows_for(spark, {"raw_payments": spark.createDataFrame(first, schema)})
    kept, quarantined = expected(first)
    assert sorted(tuple(r) for r in helped.kept.collect()) == kept
    assert sorted(tuple(r) for r in helped.quarantined.collect()) == quarantined
    assert (helped.counts.rows, dict(helped.counts.violations), helped.counts.dropped) == counted(first)
    with pytest.raises(ExpectationError, match=r"checked: .*'below_limit' .* \{\"amount\":5000000.0\}"):
        table().checked_rows_for(spark, {"raw_payments": spark.createDataFrame(third, schema)})

    # A complete table with a fail rule writes each micro-batch's whole result once, until a group breaks it.
    grouped = "SELECT account, count(*) AS n FROM STREAM(raw_payments) GROUP BY account"
    totals = StreamingTableQuery(
        "totals",
        ("raw_payments",),
        (),
        SqlTransformation(grouped),
        "complete",
        expectations=(Expectation("fewer_than_20", "n < 20", "fail"),),
    )
    run_once(totals.query(spark, lakehouse, {}))
    sent = first + second + third
    per_account = list(Counter(p[1] for p in sent).items())  # None, a missing account, is a group too

    def totals_now() -> list[tuple[Any, ...]]:
        return sorted(
            (tuple(r) for r in spark.read.format("delta").load(lakehouse.table_path("totals")).collect()), key=str
        )

    assert totals_now() == sorted(per_account, key=str)
    send([(100 + i, "a0", 1.0) for i in range(20)])
    with pytest.raises(StreamingRunError, match=r"totals: micro-batch 1 broke the expectation\(s\) 'fewer_than_20'"):
        run_once(totals.query(spark, lakehouse, {}))
    assert totals_now() == sorted(per_account, key=str)


def test_the_first_source_brings_the_maintenance_of_every_table_of_the_project(sandbox: DefsFolderSandbox) -> None:
    _declare(sandbox, "payments_out", {"name": "payments_out", "sql": "SELECT * FROM STREAM(raw_payments)"})
    with sandbox.build_all_defs() as defs:
        (job,) = [job for job in defs.jobs or [] if job.name == "table_maintenance_job"]
        pools = {node.tags["table"]: node.pool for node in job.all_node_defs}
    # each table's op in the pool of the query that writes it; the dead letters, which every source writes, in none
    assert pools == {
        "raw_accounts": "checkpoint_raw_accounts",
        "raw_payments": "checkpoint_raw_payments",
        "dead_letter_records": None,
        "payments_out": "checkpoint_payments_out",
    }
