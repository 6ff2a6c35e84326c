"""The NYC TLC taxi-zone lookup (public reference data, 265 zones): where it is, how Spark reads it, and the taxi_zones
table loaded from it.

The package ships the lookup (`streaming_pipeline/lakehouse/data/taxi_zone_lookup.csv`) so enrichment works with no
setup; TAXI_ZONES_CSV points at another copy. Spark reads it with `spark.read.csv` only (no Py4J, no RDDs), so the same
code runs on a classic session and over Spark Connect.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from streaming_pipeline.lakehouse.tables import TAXI_ZONES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from streaming_pipeline.lakehouse.connections import Lakehouse

#: The TLC header's columns, in file order. Applied by position: TLC has shipped the header in more than one
#: letter case (`LocationID,Borough,...` and `"locationid","borough",...`).
LOOKUP_SCHEMA_DDL = "LocationID INT, Borough STRING, Zone STRING, service_zone STRING"


def shipped_taxi_zones_csv() -> str:
    """The TLC lookup shipped with the package (the default of the taxi_zones asset's `csv_path`)."""
    return str(resources.files("streaming_pipeline.lakehouse") / "data" / "taxi_zone_lookup.csv")


def read_taxi_zones(spark: SparkSession, path: str) -> DataFrame:
    """The lookup as `location_id int, borough string, zone string, service_zone string`.

    An explicit schema spares an inference pass; FAILFAST makes a malformed row (a non-numeric id, a missing
    column) an error instead of a zone silently lost from every join.
    """
    from streaming_pipeline.lakehouse.silver.transformations import taxi_zones_from_lookup

    raw = spark.read.schema(LOOKUP_SCHEMA_DDL).option("header", "true").option("mode", "FAILFAST").csv(path)
    return taxi_zones_from_lookup(raw)


#: Who wrote a version of taxi_zones, in its commit's userMetadata, with the SHA-256 of the lookup file it loaded.
TAXI_ZONES_WRITER = "taxi_zones"


def refresh_taxi_zones(spark: SparkSession, lakehouse: Lakehouse, csv_path: str) -> bool:
    """Load the zone lookup at `csv_path` into its Delta table unless the table's newest version was loaded from a
    file of the same content (the SHA-256 its commit records); True when it wrote.

    An unchanged lookup writes nothing and costs no Spark job, so re-running leaves the table's version as it is.
    """
    import hashlib
    import json

    from streaming_pipeline.lakehouse.engine.delta_log import commits

    path = lakehouse.table_path(TAXI_ZONES.name)
    marker = {"writer": TAXI_ZONES_WRITER, "source_sha256": hashlib.sha256(Path(csv_path).read_bytes()).hexdigest()}
    newest = next(iter(commits(path) or []), None)
    if newest is not None and newest.user_metadata == marker:
        return False
    zones = read_taxi_zones(spark, csv_path)
    (
        zones.write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("userMetadata", json.dumps(marker, sort_keys=True))
        .save(path)
    )
    return True
