"""Dagster asset helpers shared by the layers: owners, concurrency pools, step priorities, the column schema
shown in the UI (from `tables`), materialization metadata (Delta version, row count, preview) and where a check
compares a table with the raw_rides version it was computed from."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict

import dagster as dg

from streaming_pipeline.lakehouse import tables
from streaming_pipeline.lakehouse.engine.catalog import has_persistent_catalog, register
from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.engine.delta_tables import count_rows, markdown_table, read_table, table_exists
from streaming_pipeline.lakehouse.engine.sink_position import (
    SinkPosition,
    checkpoint_last_commit,
    checkpoint_query_id,
    delta_sink_position,
)
from streaming_pipeline.lakehouse.engine.table_snapshot import columns as snapshot_columns
from streaming_pipeline.lakehouse.engine.table_snapshot import first_rows, row_count
from streaming_pipeline.lakehouse.settings import LiveSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming_pipeline.lakehouse.engine.streams import StreamRunReport
    from streaming_pipeline.resources.lakehouse import LakehouseResource

OWNERS = ["team:data-platform"]
#: The kinds (UI badges) of a table Spark writes to Delta, and of one it reads from Kafka.
SPARK_KINDS = {"spark", "delta"}
KAFKA_KINDS = {"kafka", *SPARK_KINDS}


class TableArgs(TypedDict):
    """The arguments every table's asset or spec takes from `tables`, passed as `**table_args(...)` to
    `dg.asset` or `dg.AssetSpec` (which take the name or key separately)."""

    group_name: str
    deps: list[str]
    kinds: set[str]
    owners: list[str]
    tags: dict[str, str]
    metadata: dict[str, Any]
    automation_condition: dg.AutomationCondition[Any] | None
    freshness_policy: dg.FreshnessPolicy | None


def table_args(
    table: tables.Table,
    *,
    kinds: set[str],
    live: LiveSettings,
    deps: list[str] | None = None,
    automation_condition: dg.AutomationCondition[Any] | None = None,
    metadata: dict[str, Any] | None = None,
    streamed: bool = True,
) -> TableArgs:
    """Group, owners, layer tag and the UI's column schema of `table`; in triggered mode (`live`) a table
    streamed from others (`deps`) follows them eagerly unless `automation_condition` says otherwise (in continuous
    mode the continuous run streams it, and a run of the automation sensor would only wait for its checkpoint). In
    continuous mode a `streamed` table has a freshness policy: the run reports it when it has new rows, and when it
    is caught up with its sources, so the UI shows it late only when data waits and no commit comes (its query, or
    one upstream, failing, stuck or stopped)."""
    if automation_condition is None and deps and not live.continuous:
        automation_condition = dg.AutomationCondition.eager()
    return TableArgs(
        group_name=table.layer,
        deps=deps or [],
        kinds=kinds,
        owners=OWNERS,
        tags=layer_tags(table.layer),
        metadata={
            # a table declared by its query has its columns once it is written
            **({} if table.columns_from_query else {"dagster/column_schema": column_schema(table)}),
            "dagster/table_name": table.catalog_name,
            **(metadata or {}),
        },
        automation_condition=automation_condition,
        freshness_policy=continuous_freshness_policy(live) if streamed and live.continuous else None,
    )


def continuous_freshness_policy(live: LiveSettings) -> dg.FreshnessPolicy:
    """Late after `CONTINUOUS_FRESHNESS_SECONDS` without a report of the continuous run, a warning after half."""
    return dg.FreshnessPolicy.time_window(
        fail_window=timedelta(seconds=live.freshness_seconds), warn_window=timedelta(seconds=live.freshness_seconds / 2)
    )


def column_schema(table: tables.Table) -> dg.TableSchema:
    """The table's columns as the Dagster UI shows them (`dagster/column_schema` metadata)."""
    return dg.TableSchema(columns=[dg.TableColumn(c.name, c.type, description=c.description) for c in table.columns])


def layer_tags(layer: str) -> dict[str, str]:
    return {"layer": layer}


def checkpoint_pool(asset_name: str) -> str:
    """The Dagster concurrency pool of the streaming query that owns this asset's checkpoint.

    The instance's dagster.yaml (written by `stack up`) limits every pool to one step at a time, so two
    queries never share a checkpoint, whoever started the runs.
    """
    return f"checkpoint_{asset_name}"


def step_priority(priority: int) -> dict[str, str]:
    """The op tags that give a step its place in a run: Dagster runs the ready step with the higher
    `dagster/priority` first (after bronze, the live job reaches the cheap running counts before the slower silver
    tables and the windows)."""
    return {"dagster/priority": str(priority)}


class StreamStepArgs(TypedDict):
    pool: str
    op_tags: dict[str, str]


def stream_step_args(step_name: str, *, priority: int) -> StreamStepArgs:
    """The pool of the step's checkpoint and its priority in a run, for a step that streams from other tables."""
    return StreamStepArgs(pool=checkpoint_pool(step_name), op_tags=step_priority(priority))


PREVIEW_ROWS = 10
EVOLVED_COLUMN = "Added by schema evolution: a later version of the source's value schema has this field."


def delta_table_metadata(
    spark: SparkSession,
    lakehouse: LakehouseResource,
    table: tables.Table,
    *,
    preview_order: list[str] | None = None,
) -> dict[str, Any]:
    """Path, version, row count, the columns (`current_column_schema`) and a preview of 10 rows of `table`; an
    engine with a persistent catalog gets the table's name (`engine.catalog`) the first time it exists.

    The count (from the files' statistics) and the preview are read with delta-rs, which costs no Spark job,
    and with Spark where delta-rs cannot tell. `preview_order` sorts the preview, which reads the whole
    table: only for tables that stay small. Large tables preview any 10 rows, so that a run's cost follows its
    new data, not the table's history.
    """
    path = lakehouse.table_path(table.name)
    version = latest_version(path)
    if version is None:
        return {
            "table_path": dg.MetadataValue.path(path),
            "delta_version": dg.MetadataValue.text("table not created yet"),
            "dagster/row_count": 0,
        }
    if spark is not None and has_persistent_catalog(spark):  # None: a caller that reads with delta-rs only
        register(spark, table.catalog_name, path)
    rows = row_count(path, version)
    sample = first_rows(path, version, PREVIEW_ROWS, preview_order)
    if rows is None or sample is None:
        frame = read_table(spark, path)
        rows = frame.count()
        sample = (frame.orderBy(*preview_order) if preview_order else frame).limit(PREVIEW_ROWS).toPandas()
    return {
        "table_path": dg.MetadataValue.path(path),
        "delta_version": dg.MetadataValue.int(version),
        "dagster/row_count": dg.MetadataValue.int(rows),
        "dagster/column_schema": current_column_schema(spark, path, version, table),
        "preview": dg.MetadataValue.md(markdown_table(sample)),
    }


def current_column_schema(
    spark: SparkSession | None,
    path: str,
    version: int,
    declared: tables.Table,
) -> dg.TableSchema | None:
    """The columns of the table at `path` as its Delta metadata holds them at `version`, which schema evolution may
    have widened beyond the `declared` ones, with the declaration's descriptions (a column it does not have is
    marked `EVOLVED_COLUMN`, unless the declaration takes its columns from its query); read with delta-rs, else with
    Spark (None when neither can: no session given)."""
    found = snapshot_columns(path, version)
    if found is None:
        if spark is None:
            return None
        found = [(f.name, f.dataType.simpleString()) for f in read_table(spark, path, version).schema.fields]
    descriptions = {c.name: c.description for c in declared.columns}
    undeclared = None if declared.columns_from_query else EVOLVED_COLUMN
    return dg.TableSchema(
        columns=[
            dg.TableColumn(name, type_, description=descriptions[name] if name in descriptions else undeclared)
            for name, type_ in found
        ]
    )


def missing_sources(context: dg.AssetExecutionContext, lakehouse: LakehouseResource, *names: str) -> list[str]:
    """The source tables among `names` that do not exist yet (logged as a warning: nothing to stream)."""
    missing = [n for n in names if not table_exists(lakehouse.table_path(n))]
    if missing:
        context.log.warning(f"source table(s) {', '.join(missing)} not created yet: nothing to stream")
    return missing


def stream_metadata(report: StreamRunReport) -> dict[str, Any]:
    """Rows read and micro-batches of a stream run, and where its time went: starting the query (planning, and a
    foreachBatch query's Python worker) and running its micro-batches."""
    return {
        "rows_read": dg.MetadataValue.int(report.input_rows),
        "micro_batches": dg.MetadataValue.int(report.batches),
        "query_start_seconds": dg.MetadataValue.float(round(report.start_seconds, 3)),
        "streaming_seconds": dg.MetadataValue.float(round(report.trigger_seconds(), 3)),
    }


def position_against_raw_rides(
    session: SparkSession, lakehouse: LakehouseResource, table: str, *, empty_metadata: dict[str, int]
) -> SinkPosition | dg.AssetCheckResult:
    """The version of `table` that its check compares with raw_rides, and the raw_rides version it was computed
    from (`engine.sink_position`). When there is nothing to compare, the check's result instead: while `table` does
    not exist, `missing_table_result` (with `empty_metadata` and raw_rides_rows); a warning when none of the newest
    commits of `table` names its raw_rides version."""
    path, checkpoint = lakehouse.table_path(table), lakehouse.checkpoint_path(table)
    if not table_exists(path):
        rides = count_rows(session, lakehouse.table_path(tables.RAW_RIDES.name))
        return missing_table_result(table, checkpoint, rides, {**empty_metadata, "raw_rides_rows": rides})
    position = delta_sink_position(path, checkpoint)
    return unpinned_check_result(table) if position is None else position


def missing_table_result(table: str, checkpoint_dir: str, rides: int, metadata: dict[str, Any]) -> dg.AssetCheckResult:
    """The result of a check comparing `table` with raw_rides while `table` does not exist and raw_rides has `rides`
    rows it should hold: passed when there are none; a warning while the query that writes `table` has created its
    checkpoint and committed no micro-batch (its first one is running, or its run ended before committing one), since
    the table is behind, not wrong; else an error, since its query has never run, or its table is gone."""
    if rides == 0:
        return dg.AssetCheckResult(passed=True, metadata=metadata)
    started = checkpoint_query_id(checkpoint_dir) is not None
    if started and checkpoint_last_commit(checkpoint_dir) is None:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                **metadata,
                "error": f"{table} does not exist yet: its query has started and committed no micro-batch so far "
                f"(checkpoint {checkpoint_dir})",
            },
        )
    why = "its query has committed micro-batches, yet the table is missing" if started else "its query has never run"
    return dg.AssetCheckResult(
        passed=False,
        metadata={
            **metadata,
            "error": f"{table} does not exist while raw_rides has {rides} rows for it: {why} "
            f"(checkpoint {checkpoint_dir})",
        },
    )


def unpinned_check_result(table: str) -> dg.AssetCheckResult:
    """The result of a check comparing `table` with raw_rides when no version of `table` names the raw_rides version
    it was computed from (`engine.sink_position`): a warning, since comparing the tables as they stand would race
    the stream that writes them."""
    return dg.AssetCheckResult(
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "error": f"none of the newest commits of {table} names the raw_rides version it was computed from (its "
            "checkpoint was reset or deleted, or the table has another writer), so it cannot be compared with "
            "raw_rides while the stream writes"
        },
    )
