"""Kafka -> Delta bronze ingestion: decode Confluent Avro per micro-batch, dead-letter what cannot be decoded.

Exactly once: Spark keeps the Kafka offsets in the query checkpoint, and every Delta append of a
micro-batch carries (txnAppId, txnVersion=batch id), so a batch replayed after a crash is skipped by
the tables that already have it.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from streaming_pipeline.delta_tables import table_exists
from streaming_pipeline.resources.kafka import KafkaResource
from streaming_pipeline.resources.lakehouse import LakehouseResource
from streaming_pipeline.resources.schema_registry import SchemaRegistryResource
from streaming_pipeline.schemas import TOPIC_SCHEMA_FILES, load_schema, value_subject
from streaming_pipeline.streaming import StreamRunReport, run_available_now
from streaming_pipeline.transformations import (
    bronze_rows,
    dead_letter_rows,
    decode_avro_frames,
    split_confluent_frames,
)

DEAD_LETTER_TABLE = "dead_letter_records"


@dataclass
class BatchCounts:
    batch_id: int
    rows_written: int
    dead_letters: int
    writer_schema_ids: list[int]


@dataclass
class BronzeBatchWriter:
    """The foreachBatch handler of one bronze table.

    One pass decodes the micro-batch and appends the good rows while an Observation counts the
    rest; only a batch with undecodable records is decoded again, for the dead letters. Writer
    schemas are the versions of the topic's value subject (topic name strategy); a record whose
    schema id is not one of them is a dead letter.
    """

    registry: SchemaRegistryResource
    subject: str
    fallback_reader_schema: str
    table_path: str
    dead_letter_path: str
    app_id: str
    log: Any = None
    batches: list[BatchCounts] = field(default_factory=list)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        writer_schemas = self.registry.subject_schemas(self.subject)
        latest = self.registry.latest(self.subject)
        reader_schema = latest[1] if latest else self.fallback_reader_schema
        decoded = decode_avro_frames(split_confluent_frames(batch), writer_schemas, reader_schema)
        dead_letter_app_id = f"{self.app_id}->{DEAD_LETTER_TABLE}"
        committed = committed_txn_version(spark, self.table_path, self.app_id)
        if committed is not None and committed >= batch_id:
            # A replay after a crash between the two appends: the good rows are in already; Delta
            # skips the dead letters too if they made it, and writes them otherwise.
            self._append(dead_letter_rows(decoded), self.dead_letter_path, dead_letter_app_id, batch_id)
            self.batches.append(BatchCounts(batch_id, 0, 0, sorted(writer_schemas)))
            return
        observation = Observation(f"{self.app_id}:{batch_id}:{uuid.uuid4().hex}")
        observed = decoded.observe(
            observation,
            F.count(F.lit(1)).alias("records"),
            F.count(F.when(F.col("error").isNull(), 1)).alias("good"),
        )
        self._append(bronze_rows(observed), self.table_path, self.app_id, batch_id, merge_schema=True)
        metrics = observation.get
        good_count = int(metrics["good"])
        dead_count = int(metrics["records"]) - good_count
        if dead_count:
            self._append(dead_letter_rows(decoded), self.dead_letter_path, dead_letter_app_id, batch_id)
            if self.log is not None:
                self.log.warning(f"micro-batch {batch_id}: {dead_count} record(s) sent to {DEAD_LETTER_TABLE}")
        self.batches.append(BatchCounts(batch_id, good_count, dead_count, sorted(writer_schemas)))

    @staticmethod
    def _append(frame: DataFrame, path: str, app_id: str, batch_id: int, merge_schema: bool = False) -> None:
        writer = (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
        )
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        writer.save(path)


@dataclass
class BronzeRunResult:
    report: StreamRunReport
    batches: list[BatchCounts]

    @property
    def rows_written(self) -> int:
        return sum(b.rows_written for b in self.batches)

    @property
    def dead_letters(self) -> int:
        return sum(b.dead_letters for b in self.batches)

    def kafka_offset_ranges(self) -> dict[str, Any]:
        """{partition: {"from": first offset read, "until": next offset}} from Spark's progress."""
        ranges: dict[str, Any] = {}
        for source in self.report.source_offsets():
            start, end = source["start"] or {}, source["end"] or {}
            for topic, partitions in (end or {}).items():
                for partition, until in partitions.items():
                    begin = (start.get(topic) or {}).get(partition, 0) if isinstance(start, dict) else 0
                    ranges[f"{topic}[{partition}]"] = {"from": begin, "until": until}
        return ranges


def committed_txn_version(spark: SparkSession, path: str, app_id: str) -> int | None:
    """The last txnVersion Delta recorded for `app_id` in the table at `path` (None if none).

    Delta skips an append whose txnVersion is not newer, without running its query; knowing that
    beforehand lets the handler wait for the Observation only when the write really runs.
    """
    if not table_exists(spark, path):
        return None
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    snapshot = delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    version = snapshot.transactions().get(app_id)
    return int(version.get()) if version.isDefined() else None


def ingest_topic(
    spark: SparkSession,
    kafka: KafkaResource,
    registry: SchemaRegistryResource,
    lakehouse: LakehouseResource,
    *,
    topic: str,
    asset_name: str,
    log: logging.Logger | Any = None,
) -> BronzeRunResult:
    """Drain everything new in `topic` into the Delta table of `asset_name` and the dead-letter table."""
    kafka.ensure_topic(topic)
    _, value_file = TOPIC_SCHEMA_FILES[topic]
    handler = BronzeBatchWriter(
        registry=registry,
        subject=value_subject(topic),
        fallback_reader_schema=load_schema(value_file),
        table_path=lakehouse.table_path(asset_name),
        dead_letter_path=lakehouse.table_path(DEAD_LETTER_TABLE),
        app_id=f"bronze:{asset_name}",
        log=log,
    )

    def start_writer():
        source = (
            spark.readStream.format("kafka")
            .options(**kafka.spark_options())
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", lakehouse.max_offsets_per_trigger)
            .load()
        )
        return source.writeStream.foreachBatch(handler).option(
            "checkpointLocation", lakehouse.checkpoint_path(asset_name)
        )

    report = run_available_now(asset_name, start_writer, log=log)
    return BronzeRunResult(report=report, batches=handler.batches)


def dead_letter_schema_ddl() -> str:
    return (
        "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, raw_key BINARY, raw_value BINARY, "
        "error STRING, failed_at TIMESTAMP"
    )


def checkpoint_kafka_offsets(checkpoint_dir: str) -> dict[str, dict[int, int]]:
    """Kafka offsets up to which a bronze query has committed, read from its checkpoint.

    Spark writes `offsets/<batch>` before a micro-batch and `commits/<batch>` after it; the newest
    batch with a commit file tells what is durably in Delta. Returns {topic: {partition: next offset}};
    {} when nothing was committed yet. Local paths only.
    """
    root = Path(checkpoint_dir.removeprefix("file:"))
    commits = root / "commits"
    if not commits.is_dir():
        return {}
    done = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True)
    for batch in done:
        offset_file = root / "offsets" / str(batch)
        if not offset_file.is_file():
            continue
        lines = offset_file.read_text().splitlines()
        for line in lines[2:]:
            offsets = json.loads(line)
            return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in offsets.items()}
    return {}
