"""The NYC TLC taxi-zone lookup (public reference data, 265 zones): where it is and how Spark reads it.

The package ships the lookup (`streaming_pipeline/lakehouse/data/taxi_zone_lookup.csv`) so enrichment works with no
setup; TAXI_ZONES_CSV points at another copy. Spark reads it with `spark.read.csv` only (no Py4J, no RDDs), so the same
code runs on a classic session and over Spark Connect.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
