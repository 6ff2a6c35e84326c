"""Reading Delta tables back, through Spark SQL only, so the same code runs over Spark Connect and in-process.

No DeltaTable handles and no Py4J: a Spark Connect client has no JVM, and Delta's SQL (DESCRIBE HISTORY,
MERGE INTO delta.`path`) works everywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def delta_path_sql(path: str) -> str:
    """`delta.\\`path\\`` with the path quoted for SQL (backticks doubled)."""
    return "delta.`" + path.replace("`", "``") + "`"


@dataclass(frozen=True)
class Commit:
    """One entry of a Delta table's history."""

    version: int
    operation: str
    output_rows: int
    user_metadata: dict[str, Any] | None


def table_history(spark: SparkSession, path: str, limit: int | None = None) -> list[Commit] | None:
    """Newest first; None when there is no Delta table at `path`."""
    from pyspark.errors import AnalysisException

    query = f"DESCRIBE HISTORY {delta_path_sql(path)}" + (f" LIMIT {int(limit)}" if limit else "")
    try:
        rows = spark.sql(query).select("version", "operation", "operationMetrics", "userMetadata").collect()
    except AnalysisException:
        return None
    commits = []
    for row in rows:
        metrics = row["operationMetrics"] or {}
        commits.append(
            Commit(
                version=int(row["version"]),
                operation=str(row["operation"]),
                output_rows=int(metrics.get("numOutputRows") or 0),
                user_metadata=_json_or_none(row["userMetadata"]),
            )
        )
    return commits


def _json_or_none(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def table_version(spark: SparkSession, path: str) -> int | None:
    history = table_history(spark, path, limit=1)
    return history[0].version if history else None


def table_exists(spark: SparkSession, path: str) -> bool:
    return table_version(spark, path) is not None


def read_table(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.format("delta").load(path)


def preview_markdown(frame: DataFrame, rows: int = 10) -> str:
    """A small Markdown table of the first rows, for Dagster's metadata panel."""
    sample = frame.limit(rows).toPandas()
    if sample.empty:
        return "_empty_"
    for column in sample.columns:
        if sample[column].dtype == object:
            sample[column] = sample[column].map(lambda v: v.hex() if isinstance(v, (bytes, bytearray)) else v)
    return str(sample.to_markdown(index=False))
