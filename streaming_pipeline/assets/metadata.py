"""Materialization metadata shared by the assets: Delta version, row count, preview."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import dagster as dg

from streaming_pipeline.delta_tables import preview_markdown, read_table, table_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OWNERS = ["team:data-platform"]


class SharedSpecArgs(TypedDict):
    """Keyword arguments that the specs of one multi-asset share, passed to `dg.AssetSpec(..., **shared)`."""

    group_name: str
    deps: list[dg.AssetsDefinition]
    kinds: set[str]
    owners: list[str]
    tags: dict[str, str]
    automation_condition: dg.AutomationCondition[Any]


def checkpoint_pool(asset_name: str) -> str:
    """The Dagster concurrency pool of the streaming query that owns this asset's checkpoint.

    The instance's dagster.yaml (written by `stack up`) limits every pool to one run at a time, so two
    queries never share a checkpoint, whoever started the runs.
    """
    return f"checkpoint_{asset_name}"


# The order in which a run executes the steps that are ready (Dagster runs a higher `dagster/priority` first):
# after bronze, the live job reaches the cheap running counts before the slower silver tables and the windows.
STEP_PRIORITY = {
    "vendor_counts": 40,
    "amount_branches": 30,
    "rides_enriched": 30,
    "ride_pickup_joins": 20,
    "dead_letter_records": 10,
    "ride_window_aggregates": 0,
}


def step_priority(step_name: str) -> dict[str, str]:
    """The op tags that give a step its place in STEP_PRIORITY."""
    return {"dagster/priority": str(STEP_PRIORITY[step_name])}


def delta_table_metadata(spark: SparkSession, path: str, *, preview_order: list[str] | None = None) -> dict[str, Any]:
    """Path, version, row count (from Delta's statistics) and a preview of 10 rows.

    `preview_order` sorts the preview, which scans the table: only for tables that stay small. Large tables
    preview any 10 rows, so that a run's cost follows its new data, not the table's history.
    """
    version = table_version(path)
    if version is None:
        return {
            "table_path": dg.MetadataValue.path(path),
            "delta_version": dg.MetadataValue.text("table not created yet"),
            "dagster/row_count": 0,
        }
    frame = read_table(spark, path)
    ordered = frame.orderBy(*preview_order) if preview_order else frame
    return {
        "table_path": dg.MetadataValue.path(path),
        "delta_version": dg.MetadataValue.int(version),
        "dagster/row_count": dg.MetadataValue.int(frame.count()),
        "preview": dg.MetadataValue.md(preview_markdown(ordered)),
    }
