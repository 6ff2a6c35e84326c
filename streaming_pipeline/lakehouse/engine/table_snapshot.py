"""A Delta table's row count, first rows, filtered counts, duplicate keys and column sums without a Spark job:
delta-rs (`deltalake`) reads the table's snapshot (checkpoint and commits) and the statistics Delta writes with
every file it adds, and pyarrow reads the few columns a count needs from the files it lists.

For the metadata of every materialization and for the checks: a Spark job costs about a second of the warm
engine, this costs milliseconds. A table on an S3 store (s3a://) is read there with delta-rs's own S3 client, from
the variables the code location's other S3 reads take (`engine.object_store`). Each function returns None when
delta-rs cannot answer exactly (another object store's URI, a file written without statistics, deletion vectors,
column mapping), and the caller asks Spark instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    import pandas as pd
    from deltalake import DeltaTable

    from streaming_pipeline.lakehouse.engine.row_filters import RowFilter


def _readable_table(path: str, version: int) -> DeltaTable | None:
    """The table at `path` as of `version`, when `path` is on the local filesystem or an S3 store and the table has
    no deletion vectors and maps no column names."""
    from deltalake import DeltaTable

    from streaming_pipeline.lakehouse.engine.object_store import delta_rs_location, is_object_store

    parsed = urlparse(path)
    if is_object_store(path):
        uri, options = delta_rs_location(path)
        table = DeltaTable(uri, version=version, storage_options=options)
    elif parsed.scheme in ("", "file"):
        table = DeltaTable(parsed.path if parsed.scheme else path, version=version)
    else:
        return None
    if "deletionVectors" in (table.protocol().reader_features or []):
        return None
    if table.metadata().configuration.get("delta.columnMapping.mode", "none") != "none":
        return None  # its files name the columns otherwise
    return table


def row_count(path: str, version: int) -> int | None:
    """The table's rows at `version`, summed from its files' `numRecords` statistics."""
    import pyarrow as pa

    table = _readable_table(path, version)
    if table is None:
        return None
    counts = pa.table(table.get_add_actions(flatten=True)).column("num_records")
    if counts.null_count:
        return None
    return sum(counts.to_pylist())


def matching_rows(path: str, version: int, condition: RowFilter) -> int | None:
    """The table's rows at `version` for which `condition` holds (reading only the columns it names)."""
    table = _readable_table(path, version)
    if table is None:
        return None
    return int(table.to_pyarrow_dataset().count_rows(filter=condition.arrow()))


def duplicate_keys(path: str, version: int, key: list[str]) -> int | None:
    """Values of `key` (nulls alike, as Spark groups them) that more than one row of the table at `version`
    holds."""
    import pyarrow.compute as pc

    table = _readable_table(path, version)
    if table is None:
        return None
    keys = table.to_pyarrow_dataset().to_table(columns=key)
    counts = keys.group_by(key).aggregate([([], "count_all")]).column("count_all")
    return int(pc.sum(pc.greater(counts, 1).cast("int64")).as_py() or 0)


def column_sums(path: str, version: int, columns: list[str]) -> dict[str, int] | None:
    """The sum of each of `columns` (integers; nulls count 0) over the table's rows at `version`."""
    import pyarrow.compute as pc

    table = _readable_table(path, version)
    if table is None:
        return None
    values = table.to_pyarrow_dataset().to_table(columns=columns)
    return {column: int(pc.sum(values.column(column)).as_py() or 0) for column in columns}


def first_rows(path: str, version: int, rows: int, order: list[str] | None = None) -> pd.DataFrame | None:
    """`rows` rows of the table at `version` as pandas, as Spark's toPandas gives them (timestamps naive UTC):
    sorted by `order` (nulls first, as Spark sorts them), which reads the whole table, or any rows otherwise."""
    table = _readable_table(path, version)
    if table is None:
        return None
    dataset = table.to_pyarrow_dataset()
    if order:
        everything = dataset.to_table().to_pandas()
        frame = everything.sort_values(order, na_position="first", kind="stable").head(rows).reset_index(drop=True)
    else:
        frame = dataset.head(rows).to_pandas()
    return _as_spark_gives_it(frame)


def all_rows(path: str, version: int) -> pd.DataFrame | None:
    """Every row of the table at `version` as pandas, as Spark's toPandas gives them: for tables that stay small."""
    table = _readable_table(path, version)
    if table is None:
        return None
    return _as_spark_gives_it(table.to_pyarrow_dataset().to_table().to_pandas())


def _as_spark_gives_it(frame: pd.DataFrame) -> pd.DataFrame:
    """Timestamps naive in UTC, as Spark's toPandas gives them."""
    for column in frame.columns:
        if getattr(frame[column].dtype, "tz", None) is not None:
            frame[column] = frame[column].dt.tz_convert("UTC").dt.tz_localize(None)
    return frame


#: delta-rs's names of Delta's primitive types that Spark SQL names otherwise.
_SPARK_TYPE_NAMES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}


def columns(path: str, version: int) -> list[tuple[str, str]] | None:
    """The table's columns at `version`: name and Spark SQL type (`int`, `bigint`, `string`, ...), as the table's
    metadata holds them now (after schema evolution too)."""
    table = _readable_table(path, version)
    if table is None:
        return None
    found = []
    for field in table.schema().fields:
        name = getattr(field.type, "type", None)
        if not isinstance(name, str):  # a struct, array or map: not a column type of this lakehouse's tables
            return None
        found.append((field.name, _SPARK_TYPE_NAMES.get(name, name)))
    return found
