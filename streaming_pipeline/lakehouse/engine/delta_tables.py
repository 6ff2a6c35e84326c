"""Delta tables through Spark SQL and DataFrames, so the same code runs over Spark Connect and in-process.

No DeltaTable handles and no Py4J: a Spark Connect client has no JVM, and Delta's SQL (MERGE INTO
delta.`path`) and DataFrame options (txnAppId, userMetadata) work everywhere. Versions and commit markers are
read from the Delta log's files (`delta_log`), which costs no Spark job.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.engine import table_snapshot
from streaming_pipeline.lakehouse.engine.delta_log import commits, latest_version
from streaming_pipeline.lakehouse.errors import SchemaEvolutionError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from streaming_pipeline.lakehouse.engine.row_filters import RowFilter


def delta_path_sql(path: str) -> str:
    """`delta.\\`path\\`` with the path quoted for SQL (backticks doubled)."""
    return "delta.`" + path.replace("`", "``") + "`"


def table_exists(path: str) -> bool:
    return latest_version(path) is not None


def create_if_missing(session: SparkSession, path: str, ddl: str) -> None:
    """Create an empty Delta table of schema `ddl` at `path` unless one is there.

    Two writers that both find no table and create it race for its first commit, and Delta fails the loser
    (DELTA_PROTOCOL_CHANGED: "multiple writers are writing to an empty directory"), as two runs' steps that report
    the same table did. A creation that failed while a table appeared at `path` lost that race: the table it was
    to create is there. Any other failure is raised. (Delta's exception reaches a Spark Connect client as an
    UnknownException and an in-process driver's caller as a Py4JJavaError: what tells the race is the table.)"""
    if table_exists(path):
        return
    try:
        session.createDataFrame([], ddl).write.format("delta").mode("append").save(path)
    except Exception:
        if not table_exists(path):
            raise


def append_once(
    frame: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    attempt: str,
    *,
    extra: dict[str, Any] | None = None,
    merge_schema: bool = False,
) -> bool:
    """Append `frame` as batch `batch_id` of writer `app_id`, at most once; True when this attempt committed.

    Delta's idempotent writes: Delta keeps the last txnVersion per txnAppId and skips an append that is not
    newer. The commit carries a marker (`userMetadata`: writer, batch, attempt, `extra`) by which readers of the
    table's history know what each commit was, and this attempt knows whether a commit after the version it
    started from is its own (another writer may commit in between).
    """
    marker = {"app_id": app_id, "batch_id": batch_id, "attempt": attempt, **(extra or {})}
    text = json.dumps(marker, sort_keys=True)
    writer = (
        frame.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
        .option("userMetadata", text)
    )
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    before = latest_version(path)
    try:
        writer.save(path)
    except Exception as exc:
        reason = _schema_mismatch(exc)
        if reason is None:
            raise
        raise SchemaEvolutionError(
            f"micro-batch {batch_id} of {app_id} cannot be appended to the Delta table at {path}: {reason}. A new "
            "column joins a table, but a column cannot change its type in place. Nothing of this micro-batch was "
            "written, and it is read again on the next run, which fails the same way. To take the new type, "
            "rebuild the bronze table and everything downstream with it: `streaming-pipeline replay <bronze table> "
            "--from earliest` (the old versions stay readable; docs/schema-evolution.md)"
        ) from exc
    # The marker as the log holds it (JSON: integer keys such as Kafka partitions come back as strings).
    stored = json.loads(text)
    return any(commit.user_metadata == stored for commit in commits(path, after=before) or [])


#: Delta's error classes for a write whose columns the table cannot take.
_SCHEMA_MISMATCH_ERRORS = (
    "DELTA_FAILED_TO_MERGE_FIELDS",
    "DELTA_MERGE_INCOMPATIBLE_DATATYPE",
    "DELTA_METADATA_MISMATCH",
)


def _schema_mismatch(exc: BaseException) -> str | None:
    """Delta's reason, on one line, when `exc` is a write refused for its columns (a column's type changed);
    else None."""
    text = str(exc)
    if not any(code in text for code in _SCHEMA_MISMATCH_ERRORS):
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reasons = [line for line in lines if any(code in line for code in _SCHEMA_MISMATCH_ERRORS)]
    return " ".join(reasons[:2] or lines[:1])[:600]


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """The Delta table at `path`, as it is now or at `version`."""
    reader = spark.read.format("delta")
    return (reader.option("versionAsOf", version) if version is not None else reader).load(path)


def markdown_table(sample: pd.DataFrame) -> str:
    """A small pandas frame as a Markdown table (binary cells in hex), for Dagster's metadata panel."""
    if sample.empty:
        return "_empty_"
    for column in sample.columns:
        if sample[column].dtype == object:
            sample[column] = sample[column].map(lambda v: v.hex() if isinstance(v, (bytes, bytearray)) else v)
    return str(sample.to_markdown(index=False))


def count_rows(
    spark: SparkSession, path: str, condition: RowFilter | None = None, *, version: int | None = None
) -> int:
    """Rows of the table at `path` (those matching `condition`), as it is now or at `version`; 0 when there is no
    table, or at version -1 (before its first commit). Without a condition, from the files' `numRecords`
    statistics; with one, from the columns it names (`table_snapshot`); by a Spark job where delta-rs cannot tell."""
    at = _version(path, version)
    if at is None:
        return 0
    if condition is None:
        found = table_snapshot.row_count(path, at)
    else:
        found = table_snapshot.matching_rows(path, at, condition)
    if found is not None:
        return found
    frame = read_table(spark, path, at)
    return (frame.where(condition.spark()) if condition is not None else frame).count()


def count_duplicate_keys(spark: SparkSession, path: str, key: list[str], *, version: int | None = None) -> int:
    """Values of `key` that more than one row of the table at `path` holds (now, or at `version`); 0 when there
    is no table."""
    from pyspark.sql import functions as F

    at = _version(path, version)
    if at is None:
        return 0
    found = table_snapshot.duplicate_keys(path, at, key)
    if found is not None:
        return found
    return read_table(spark, path, at).groupBy(*key).count().where(F.col("count") > 1).count()


def sum_columns(spark: SparkSession, path: str, columns: list[str], *, version: int | None = None) -> dict[str, int]:
    """The sum of each integer column of `columns` over the table at `path` (now, or at `version`); zeros when
    there is no table."""
    from pyspark.sql import functions as F

    at = _version(path, version)
    if at is None:
        return dict.fromkeys(columns, 0)
    found = table_snapshot.column_sums(path, at, columns)
    if found is not None:
        return found
    row = read_table(spark, path, at).agg(*(F.sum(c).alias(c) for c in columns)).collect()[0]
    return {column: int(row[column] or 0) for column in columns}


def small_table(spark: SparkSession, path: str, *, version: int | None = None) -> pd.DataFrame | None:
    """Every row of the table at `path` (now, or at `version`) as pandas, for a table that stays small (a few
    rows per window or key); None when there is no table."""
    at = _version(path, version)
    if at is None:
        return None
    found = table_snapshot.all_rows(path, at)
    return found if found is not None else read_table(spark, path, at).toPandas()


def _version(path: str, version: int | None) -> int | None:
    """The version to read: `version`, or the latest; None when there is nothing to read (no table, or version -1,
    before its first commit)."""
    if version is not None:
        return version if version >= 0 and table_exists(path) else None
    return latest_version(path)
