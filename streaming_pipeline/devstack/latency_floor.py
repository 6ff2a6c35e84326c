"""The latency floor of `bench live --floor`: the least a Kafka -> Delta stream with a chained count can do on the
engine, measured beside the pipeline in the same run.

Two streaming queries on the Spark Connect engine, with nothing of the pipeline (no dead letters, no batch markers,
no registry look-ups, no Dagster):
- Kafka -> strip the 5-byte Confluent header -> `from_avro` with the rides' schema -> a foreachBatch append to a
  Delta table with Delta's idempotent-write options (`txnAppId`/`txnVersion`), every `FLOOR_TRIGGER` (500 ms);
- that table's Delta stream -> count by vendor -> a Delta table in complete mode, at the same trigger.

The tables are named as the pipeline's (`raw_rides`, `vendor_counts`, with the Kafka partition and offset of each
ride) so that the bench reads and checks them as it reads the pipeline's. This module imports nothing at its top
but the standard library: the engine's foreachBatch worker imports it to run `append_once`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

#: The floor's trigger interval: the continuous mode's bronze and vendor_counts trigger.
FLOOR_TRIGGER = "500 milliseconds"

#: Delta's idempotent-write id of the floor's append (`txnAppId`).
FLOOR_APP_ID = "bench-latency-floor"


def append_once(table: str, batch: Any, batch_id: int) -> None:
    """The floor's foreachBatch handler: a Delta append that a replayed micro-batch leaves as it is."""
    (
        batch.write.format("delta")
        .mode("append")
        .option("txnAppId", FLOOR_APP_ID)
        .option("txnVersion", batch_id)
        .save(table)
    )


def start_floor_queries(
    spark: Any, bootstrap_servers: str, topic: str, starting_offsets: dict[int, int], lakehouse: Path
) -> list[Any]:
    """Start the floor's two queries on `spark` (a Spark Connect session), reading `topic` from `starting_offsets`
    (partition -> offset) into `lakehouse`/raw_rides and `lakehouse`/vendor_counts; checkpoints under
    `lakehouse`/_checkpoints."""
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from streaming_pipeline.lakehouse.schemas import load_schema
    from streaming_pipeline.lakehouse.tables import RAW_RIDES

    raw = lakehouse / RAW_RIDES.name
    counts = lakehouse / "vendor_counts"
    checkpoints = lakehouse / "_checkpoints"
    rides = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in starting_offsets.items()}}))
        .load()
        .select(
            from_avro(F.expr("substring(value, 6)"), load_schema("ride_value.avsc")).alias("ride"),
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
        )
        .select("ride.*", "kafka_partition", "kafka_offset")
    )
    # The table exists before either query starts, so the counting query's Delta stream can start with it.
    spark.createDataFrame([], rides.schema).write.format("delta").mode("ignore").save(str(raw))
    raw_query = (
        rides.writeStream.queryName("latency_floor_raw_rides")
        .foreachBatch(functools.partial(append_once, str(raw)))
        .option("checkpointLocation", str(checkpoints / "raw_rides"))
        .trigger(processingTime=FLOOR_TRIGGER)
        .start()
    )
    counts_query = (
        spark.readStream.format("delta")
        .load(str(raw))
        .groupBy("vendor_id")
        .agg(F.count(F.lit(1)).alias("trip_count"))
        .writeStream.queryName("latency_floor_vendor_counts")
        .format("delta")
        .outputMode("complete")
        .option("checkpointLocation", str(checkpoints / "vendor_counts"))
        .trigger(processingTime=FLOOR_TRIGGER)
        .start(str(counts))
    )
    return [raw_query, counts_query]
