"""Reading Delta tables back for metadata: existence, version, row count, preview."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession


def table_exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


def table_version(spark: SparkSession, path: str) -> int | None:
    if not table_exists(spark, path):
        return None
    return int(DeltaTable.forPath(spark, path).history(1).select("version").collect()[0][0])


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
    return sample.to_markdown(index=False)

