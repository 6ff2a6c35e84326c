"""The lakehouse's tables in Spark's catalog, by name (`<layer>.<table>`: `bronze.raw_rides`, `gold.vendor_counts`):
each an external Delta table whose location is the table's path, so the catalog holds its name and place and the
Delta log stays the one truth about its columns and rows (dropping a name deletes no file).

A name is registered when the run that created its table first reports it, and registered again only when it
points elsewhere (a lakehouse moved, a table rebuilt at another path). A persistent catalog is the engine's Hive
metastore (`spark.sql.catalogImplementation=hive`: the development stack's engine keeps one, docs/sql.md); an
engine without one (an in-process driver per run) keeps names only for its session, so runs register nothing
there, and `streaming-pipeline sql` registers what it queries.

Plain Spark SQL, so the same code runs over Spark Connect and in-process.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CATALOG_IMPLEMENTATION = "spark.sql.catalogImplementation"
METASTORE_URL = "spark.hadoop.javax.jdo.option.ConnectionURL"


def embedded_metastore_conf(directory: Path) -> dict[str, str]:
    """The settings of an engine that keeps its catalog in a Hive metastore of its own: Spark's built-in Hive client
    on an embedded Derby database in `directory` (pyspark ships both). One engine at a time opens it."""
    return {
        CATALOG_IMPLEMENTATION: "hive",
        METASTORE_URL: f"jdbc:derby:;databaseName={directory / 'metastore_db'};create=true",
    }


def has_persistent_catalog(spark: SparkSession) -> bool:
    """Whether the engine's catalog outlives the session (a Hive metastore), rather than Spark's in-memory one."""
    return spark.conf.get(CATALOG_IMPLEMENTATION, "in-memory") == "hive"


def quoted_name(name: str) -> str:
    """`layer`.`table` with each part quoted for SQL."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


def registered_location(spark: SparkSession, name: str) -> str | None:
    """Where the catalog's table `name` (`layer.table`) lives; None when the catalog has no such table. Two lookups
    in the metastore, neither of which loads the table (a DESCRIBE would read its Delta log)."""
    schema, table = name.split(".", 1)
    if not spark.catalog.databaseExists(schema):  # asked first: a SHOW in a missing schema logs a page of error
        return None
    pattern = table.replace("'", "")
    rows = spark.sql(f"SHOW TABLE EXTENDED IN {quoted_name(schema)} LIKE '{pattern}'").collect()
    for row in rows:
        if row["tableName"] == table and not row["isTemporary"]:  # SHOW lists the session's temporary views too
            lines = str(row["information"]).splitlines()
            return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Location:")), "")
    return None


def register(spark: SparkSession, name: str, path: str) -> bool:
    """Make `name` (`layer.table`) the catalog's name of the Delta table at `path`; True when it was (re)registered,
    False when it already named that table."""
    from pyspark.errors import AnalysisException

    location = registered_location(spark, name)
    if location is not None and same_location(location, path):
        return False
    schema = name.split(".", 1)[0]
    if not spark.catalog.databaseExists(schema):  # asked first: Hive logs an error for a schema that exists
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quoted_name(schema)}")
    if location is not None:
        spark.sql(f"DROP TABLE IF EXISTS {quoted_name(name)}")  # an external table: its files stay where they are
    quoted_path = path.replace("\\", "\\\\").replace("'", "\\'")
    try:
        spark.sql(f"CREATE TABLE {quoted_name(name)} USING DELTA LOCATION '{quoted_path}'")
    except AnalysisException as exc:  # another session registered it in between: fine if at the same path
        now = registered_location(spark, name) if "ALREADY_EXISTS" in str(exc) else None
        if now is None or not same_location(now, path):
            raise
        return False
    return True


def unregister(spark: SparkSession, name: str) -> None:
    """Drop the catalog's name `name`, if it has it; the table's files stay."""
    spark.sql(f"DROP TABLE IF EXISTS {quoted_name(name)}")


def same_location(location: str, path: str) -> bool:
    """Whether the catalog's `location` is `path` (the catalog writes a local path as `file:/...`)."""

    def plain(text: str) -> str:
        text = text.rstrip("/")
        return text.removeprefix("file://") if text.startswith("file:///") else text.removeprefix("file:")

    return plain(location) == plain(path)
