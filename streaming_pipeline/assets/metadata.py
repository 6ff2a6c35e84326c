"""Materialization metadata shared by the assets: Delta version, row count, preview."""

from __future__ import annotations

from typing import Any

import dagster as dg
from pyspark.sql import SparkSession

from streaming_pipeline.delta_tables import preview_markdown, read_table, table_exists, table_version

OWNERS = ["team:data-platform"]


def delta_table_metadata(spark: SparkSession, path: str, *, preview_order: list[str] | None = None) -> dict[str, Any]:
    if not table_exists(spark, path):
        return {"table_path": dg.MetadataValue.path(path), "delta_version": dg.MetadataValue.text("table not created yet"), "dagster/row_count": 0}
    frame = read_table(spark, path)
    ordered = frame.orderBy(*preview_order) if preview_order else frame
    return {
        "table_path": dg.MetadataValue.path(path),
        "delta_version": dg.MetadataValue.int(table_version(spark, path) or 0),
        "dagster/row_count": dg.MetadataValue.int(frame.count()),
        "preview": dg.MetadataValue.md(preview_markdown(ordered)),
    }
