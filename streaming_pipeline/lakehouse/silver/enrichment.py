"""The taxi_zones table (loaded from the TLC lookup) and the rides_enriched stream (the course's
KStream-GlobalKTable join): every ride with the names of its zones."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from streaming_pipeline.lakehouse.engine.delta_tables import read_table
from streaming_pipeline.lakehouse.engine.streams import StreamQuery, delta_stream
from streaming_pipeline.lakehouse.tables import RAW_RIDES, RIDES_ENRICHED, TAXI_ZONES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streaming_pipeline.lakehouse.connections import Lakehouse


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
    from streaming_pipeline.lakehouse.silver.taxi_zones import read_taxi_zones

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


def rides_enriched_query(spark: SparkSession, lakehouse: Lakehouse) -> StreamQuery:
    """Every ride of raw_rides once, with the boroughs and zones of its pickup and dropoff locations.

    A stream-static join: each micro-batch joins the zone table as it is then (broadcast). Rides already
    enriched keep the zones they were enriched with when the lookup changes later.
    """
    from streaming_pipeline.lakehouse.silver.transformations import enrich_rides_with_zones

    def start_writer() -> DataStreamWriter:
        zones = read_table(spark, lakehouse.table_path(TAXI_ZONES.name))
        enriched = enrich_rides_with_zones(delta_stream(spark, lakehouse, RAW_RIDES.name), zones).observe(
            "enrichment",
            F.count(F.when(F.col("pu_zone").isNull(), 1)).alias("unknown_pickup_zones"),
            F.count(F.when(F.col("do_zone").isNull(), 1)).alias("unknown_dropoff_zones"),
        )
        return (
            enriched.writeStream.format("delta")
            .outputMode("append")
            .option("checkpointLocation", lakehouse.checkpoint_path(RIDES_ENRICHED.name))
            .option("path", lakehouse.table_path(RIDES_ENRICHED.name))
            # A column raw_rides gained (a new field of the value schema) joins the table with its first batch.
            .option("mergeSchema", "true")
        )

    return StreamQuery(RIDES_ENRICHED.name, start_writer, tables=(RIDES_ENRICHED.name,))
