"""SQL over the lakehouse (the course's ksqlDB role): every Delta table under its catalog name (`gold.vendor_counts`,
`engine.catalog`) and under its asset name, answers formatted.

`streaming-pipeline sql "SELECT ..." [--format table|csv|json]` runs on the engine (SPARK_REMOTE when set).
Nothing here uses Py4J or DeltaTable, so it works the same on a classic session and over Spark Connect.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.engine.catalog import register
from streaming_pipeline.lakehouse.errors import QueryError, first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMATS = ("table", "csv", "json")
NULL_IN_TABLE = "NULL"
NON_FINITE_FLOATS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # as Spark prints them


def register_tables(
    spark: SparkSession, table_paths: Mapping[str, str], catalog_names: Mapping[str, str] | None = None
) -> list[str]:
    """A temporary view per existing Delta table, named by its asset, and its name in the catalog (`catalog_names`:
    asset name -> `layer.table`) registered if the catalog lacks it or has it elsewhere; the asset names
    registered, in order.

    A table that was never materialized is skipped, so a query naming it fails with Spark's own "table or view
    not found" rather than this step failing for every query; a view of that name left in the session by an
    earlier call (a table since deleted, another lakehouse) is dropped, not answered from.
    """
    from pyspark.errors import AnalysisException

    registered = []
    for name, path in table_paths.items():
        try:
            # Over Spark Connect `load` is lazy: the missing path only surfaces when the view is created.
            spark.read.format("delta").load(path).createOrReplaceTempView(name)
        except AnalysisException:
            spark.catalog.dropTempView(name)
            continue
        if catalog_names and name in catalog_names:
            register(spark, catalog_names[name], path)
        registered.append(name)
    return registered


def run_sql(
    spark: SparkSession, table_paths: Mapping[str, str], query: str, catalog_names: Mapping[str, str] | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run `query` over the tables of `table_paths` (`register_tables`).

    Top-level timestamps come back as the session time zone's wall clock (UTC in this project): a classic session
    would otherwise convert them to the client machine's local time, and Spark Connect would not.

    Args:
        spark: the session to run it on.
        table_paths: each table's asset name and its Delta path.
        query: Spark SQL naming the tables by their asset's or their catalog name.
        catalog_names: each table's name in the catalog (`gold.vendor_counts`), by asset name.

    Returns:
        (the column names, the rows). A failed query raises QueryError with Spark's reason on one line.
    """
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    register_tables(spark, table_paths, catalog_names)
    try:
        frame = spark.sql(query)
        columns = list(frame.columns)
        # Positional names: a join's answer may repeat a column name, which a select by name could not tell apart.
        positional = frame.toDF(*(f"_{index}" for index in range(len(columns))))
        wall_clock = [
            column.cast("timestamp_ntz") if isinstance(field.dataType, TimestampType) else column
            for column, field in zip(map(F.col, positional.columns), frame.schema.fields, strict=True)
        ]
        rows = [tuple(row) for row in positional.select(*wall_clock).collect()]
    except PySparkException as exc:
        raise QueryError(f"the query failed: {first_line(exc)}") from exc
    return columns, rows


def _json_ready(value: Any) -> Any:
    """The value as JSON can carry it; Decimals stay Decimals, written verbatim by `_json_value`."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, float) and not math.isfinite(value):
        return NON_FINITE_FLOATS[str(value)]  # JSON has no NaN/Infinity literals
    if hasattr(value, "asDict"):  # a struct (pyspark Row)
        return {key: _json_ready(item) for key, item in value.asDict().items()}
    if isinstance(value, Mapping):
        return {str(key): _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(item) for item in value]
    return value


def _json_object(pairs: Iterable[tuple[str, Any]]) -> str:
    """A JSON object from (name, JSON-ready value) pairs; a query may answer two columns of the same name, and a
    dict would silently keep only one of them."""
    return "{" + ", ".join(f"{json.dumps(name)}: {_json_value(value)}" for name, value in pairs) + "}"


def _json_value(value: Any) -> str:
    """JSON text of one JSON-ready value; a Decimal is written as the number it is (3798.04, 1.50), not via float."""
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else json.dumps(str(value))
    if isinstance(value, dict):
        return _json_object(value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_json_value(item) for item in value) + "]"
    return json.dumps(value)


def _text(value: Any) -> str:
    """One cell of the table and csv formats: a datetime as `2020-07-01 00:00:00`, anything else as in json
    (true/false, hex bytes, nested values as JSON), strings as they are."""
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    ready = value if isinstance(value, str) else _json_ready(value)
    return ready if isinstance(ready, str) else _json_value(ready)


def format_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str) -> str:
    """`table`: aligned columns under a header (NULL for null); `csv`: RFC 4180 with a header (empty for null);
    `json`: one object per line (timestamps ISO 8601, decimals as stored, bytes as hex)."""
    if fmt == "json":
        return "".join(
            _json_object((name, _json_ready(value)) for name, value in zip(columns, row, strict=True)) + "\n"
            for row in rows
        )
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)  # the default dialect is RFC 4180: CRLF, quotes doubled, quoted when needed
        writer.writerow(columns)
        writer.writerows([["" if value is None else _text(value) for value in row] for row in rows])
        return out.getvalue()
    if fmt == "table":
        cells = [list(columns)] + [[NULL_IN_TABLE if value is None else _text(value) for value in row] for row in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        lines = [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells
        ]
        lines.insert(1, "  ".join("-" * width for width in widths))
        footer = f"({len(rows)} row{'' if len(rows) == 1 else 's'})"
        return "\n".join([*lines, footer]) + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
