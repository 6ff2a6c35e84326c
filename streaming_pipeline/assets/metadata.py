"""Materialization metadata shared by the assets: Delta version, row count, preview."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dagster as dg

from streaming_pipeline.delta_tables import preview_markdown, read_table, table_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OWNERS = ["team:data-platform"]


def checkpoint_pool(asset_name: str) -> str:
    """The Dagster concurrency pool of the streaming query that owns this asset's checkpoint.

    The instance's dagster.yaml (written by `stack up`) limits every pool to one run at a time, so two
    queries never share a checkpoint, whoever started the runs.
    """
    return f"checkpoint_{asset_name}"


def delta_table_metadata(spark: SparkSession, path: str, *, preview_order: list[str] | None = None) -> dict[str, Any]:
    """Path, version, row count (from Delta's statistics) and a preview of 10 rows.

    `preview_order` sorts the preview, which scans the table: only for tables that stay small. Large tables
    preview any 10 rows, so that a run's cost follows its new data, not the table's history.
    """
    version = table_version(spark, path)
    if version is None:
        return {"table_path": dg.MetadataValue.path(path), "delta_version": dg.MetadataValue.text("table not created yet"), "dagster/row_count": 0}
    frame = read_table(spark, path)
    ordered = frame.orderBy(*preview_order) if preview_order else frame
    return {
        "table_path": dg.MetadataValue.path(path),
        "delta_version": dg.MetadataValue.int(version),
        "dagster/row_count": dg.MetadataValue.int(frame.count()),
        "preview": dg.MetadataValue.md(preview_markdown(ordered)),
    }
