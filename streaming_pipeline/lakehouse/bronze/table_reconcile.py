"""Whether a table topic's table holds exactly the latest value of each key that Kafka holds, up to the offsets the
table has consumed: the reconciliation of a table topic, where counting rows against offsets cannot work (a key's
records collapse into one row, and a compacted topic has gaps).

The expectation is computed from the topic itself, read by Spark's Kafka source in a batch: the records in
[where the table starts, what it has consumed), less those set aside as dead letters; per key (its bytes, as Kafka's
compaction keys records), the one of the highest offset; less the tombstones. The table's rows must be those records,
by their Kafka coordinates. What compaction removed is superseded by a newer record of the same key, which is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streaming_pipeline.lakehouse.bronze.offsets import Offsets, consumed_offsets, table_start_offsets
from streaming_pipeline.lakehouse.engine.delta_tables import read_table, table_exists
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from streaming_pipeline.lakehouse.connections import KafkaConnection, Lakehouse
    from streaming_pipeline.lakehouse.sources import SourceTopic


@dataclass(frozen=True)
class TableTopicReconcile:
    rows: int
    expected_rows: int
    #: Kafka coordinates "partition:offset" of records that should be a row and are not (a few), and of rows that
    #: should not be there (a few).
    missing: list[str]
    unexpected: list[str]
    consumed: Offsets

    @property
    def passed(self) -> bool:
        return not self.missing and not self.unexpected and self.rows == self.expected_rows


def reconcile_table_topic(
    spark: SparkSession, kafka: KafkaConnection, lakehouse: Lakehouse, source: SourceTopic, *, shown: int = 10
) -> TableTopicReconcile:
    """Compare the table topic's table with the latest decodable record per key that the topic holds below the
    offsets the table has consumed (a batch writes its dead letters and MERGEs before its transaction says it
    consumed them, so both are final there, also while a query runs)."""
    name, topic = source.bronze_table, source.topic
    table, checkpoint = lakehouse.table_path(name), lakehouse.checkpoint_path(name)
    consumed = consumed_offsets(table, checkpoint, name, topic)
    if not consumed or not table_exists(table):
        return TableTopicReconcile(0, 0, [], [], consumed)
    start = table_start_offsets(table, checkpoint, name, topic)
    expected = _expected_records(spark, kafka, lakehouse, topic, start, consumed)
    rows = read_table(spark, table).select("kafka_partition", "kafka_offset")
    missing = expected.exceptAll(rows)
    unexpected = rows.exceptAll(expected)

    def listed(frame: DataFrame) -> list[str]:
        return [f"{r['kafka_partition']}:{r['kafka_offset']}" for r in frame.limit(shown).collect()]

    return TableTopicReconcile(rows.count(), expected.count(), listed(missing), listed(unexpected), consumed)


def _expected_records(
    spark: SparkSession, kafka: KafkaConnection, lakehouse: Lakehouse, topic: str, start: Offsets, until: Offsets
) -> DataFrame:
    """(kafka_partition, kafka_offset) of the latest decodable record per key in [start, until), tombstones left
    out."""
    # Imported here, not at the top: the bronze checks import this module, and the sensors and checks load without
    # Spark's client (streaming_pipeline_tests/test_import_weight.py).
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    records = (
        spark.read.format("kafka")
        .options(**kafka.spark_options())
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {str(p): start.get(p, -2) for p in sorted(until)}}))
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in sorted(until.items())}}))
        .option("failOnDataLoss", "false")
        .load()
        .select("key", "value", F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"))
    )
    dead_letter_path = lakehouse.table_path(DEAD_LETTER_RECORDS.name)
    if table_exists(dead_letter_path):
        dead = (
            read_table(spark, dead_letter_path)
            .where(F.col("kafka_topic") == topic)
            .select("kafka_partition", "kafka_offset")
        )
        records = records.join(dead, ["kafka_partition", "kafka_offset"], "left_anti")
    newest_first = Window.partitionBy("key").orderBy(F.col("kafka_offset").desc())
    latest = records.withColumn("_rank", F.row_number().over(newest_first)).where(F.col("_rank") == 1)
    return latest.where(F.col("value").isNotNull()).select("kafka_partition", "kafka_offset")
