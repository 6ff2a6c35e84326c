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

from collections.abc import Sequence
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


SITE_FILE = "hive-site.xml"


def metastore_model_classes() -> list[str]:
    """Every class of the Hive metastore's model, as the metastore client pyspark ships declares them (the
    `package.jdo` of its hive-metastore jar)."""
    import re
    import zipfile

    from streaming_pipeline.lakehouse.engine.jars import pyspark_home

    jar = next((pyspark_home() / "jars").glob("hive-metastore-*.jar"))
    with zipfile.ZipFile(jar) as archive:
        text = archive.read("package.jdo").decode()
    package = re.search(r'<package name="([^"]+)"', text)
    assert package is not None, f"{jar}: package.jdo names no package"
    return [f"{package.group(1)}.{name}" for name in re.findall(r'<class name="([^"]+)"', text)]


def write_shared_metastore_site(directory: Path, jdbc_url: str, user: str, password: str) -> Path:
    """`directory/hive-site.xml` (mode 0600) for a metastore in the database at `jdbc_url`, which several engines
    share; `directory`, which goes on each driver's classpath (`shared_metastore_conf`), so that the password is
    in no command line and no Spark UI.

    The metastore's tables are created when an engine first opens it, every one of them (DataNucleus's
    `autoStartMechanism=Classes` over the whole model): created one by one as first needed, the one for table
    privileges waits forever in PostgreSQL for the lock the first CREATE TABLE's own transaction holds."""
    from xml.sax.saxutils import escape

    properties = {
        "javax.jdo.option.ConnectionURL": jdbc_url,
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": user,
        "javax.jdo.option.ConnectionPassword": password,
        "datanucleus.schema.autoCreateAll": "true",
        "datanucleus.autoStartMechanism": "Classes",
        "datanucleus.autoStartMechanismMode": "Checked",
        "datanucleus.autoStartClassNames": ",".join(metastore_model_classes()),
        "hive.metastore.schema.verification": "false",
    }
    body = "".join(
        f"  <property><name>{escape(name)}</name><value>{escape(value)}</value></property>\n"
        for name, value in properties.items()
    )
    directory.mkdir(parents=True, exist_ok=True)
    site = directory / SITE_FILE
    temporary = site.with_suffix(".tmp")
    temporary.touch(mode=0o600)
    temporary.chmod(0o600)
    temporary.write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
    temporary.replace(site)
    return directory


def shared_metastore_conf(site_directory: Path, jdbc_jars: Sequence[Path]) -> dict[str, str]:
    """The settings of a driver whose catalog is the shared metastore `write_shared_metastore_site` describes: Hive's
    catalog, with the site's directory and the JDBC driver on the driver's classpath."""
    classpath = ":".join([str(site_directory), *(str(jar) for jar in jdbc_jars)])
    return {CATALOG_IMPLEMENTATION: "hive", "spark.driver.extraClassPath": classpath}


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
