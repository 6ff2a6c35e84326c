"""Kafka -> Delta bronze ingestion: a bronze table's streaming query, and one availableNow run of it.

Exactly once: Spark keeps the Kafka offsets in the query checkpoint, and the foreachBatch handler
(`bronze.batches.BronzeBatchWriter`) appends every micro-batch idempotently. Every run first checks that
table, checkpoint and topic still agree (offsets.check_bronze_state, offsets.topic_problems): a reset
checkpoint, a recreated table or a topic whose offsets went backwards stops the run with an error naming
`streaming-pipeline replay`, instead of losing or duplicating records. After the run, what the handler did is
read back from the Delta log (the markers of the commits it made, which are recent).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.bronze.batches import BronzeBatchWriter, bronze_app_id, dead_letter_app_id
from streaming_pipeline.lakehouse.bronze.offsets import (
    BronzeStateError,
    check_bronze_state,
    checkpoint_id,
    position_offsets,
    topic_problems,
)
from streaming_pipeline.lakehouse.bronze.table_batches import TableBatchWriter, marker_counts
from streaming_pipeline.lakehouse.connections import KafkaConnection, Lakehouse, SchemaRegistryConnection
from streaming_pipeline.lakehouse.engine.delta_log import BatchCounts, commits_since, latest_version
from streaming_pipeline.lakehouse.engine.streams import Log, StreamQuery, StreamRunReport, run_available_now
from streaming_pipeline.lakehouse.schemas import avro_columns, load_schema
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import DataStreamWriter


@dataclass
class BronzeRunResult:
    report: StreamRunReport
    batches: list[BatchCounts] = field(default_factory=list)
    dead_letter_batches: list[BatchCounts] = field(default_factory=list)

    @property
    def rows_written(self) -> int:
        """Rows appended (a stream), or inserted and updated (a table topic: its batches' markers count them)."""
        markers = [b.marker for b in self.batches]
        if any("rows_inserted" in m for m in markers):
            return marker_counts(markers, "rows_inserted") + marker_counts(markers, "rows_updated")
        return sum(b.rows for b in self.batches)

    @property
    def rows_deleted(self) -> int:
        """A table topic's rows deleted by tombstones; 0 for a stream."""
        return marker_counts([b.marker for b in self.batches], "rows_deleted")

    @property
    def dead_letters(self) -> int:
        return sum(b.rows for b in self.dead_letter_batches)

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


def bronze_query(
    spark: SparkSession,
    kafka: KafkaConnection,
    registry: SchemaRegistryConnection,
    lakehouse: Lakehouse,
    *,
    source: SourceTopic,
) -> StreamQuery:
    """The streaming query of the source's bronze table: Kafka -> the foreachBatch handler -> the bronze table and
    the dead-letter table.

    Each start of the query first creates the topic when absent and checks that table, checkpoint and topic agree
    (BronzeStateError when not). Building the query asks nothing of Kafka, so that a continuous run that starts
    while the broker is away waits for it like a query that failed (with back-off), instead of failing."""
    topic, asset_name = source.topic, source.bronze_table
    table_path = lakehouse.table_path(asset_name)
    checkpoint_dir = lakehouse.checkpoint_path(asset_name)
    handler = batch_writer(registry, lakehouse, source)
    tables = (asset_name, DEAD_LETTER_RECORDS.name, *(table.name for table in source.tables[1:]))

    def start_writer() -> DataStreamWriter:
        kafka.ensure_topic(topic, cleanup_policy=source.cleanup_policy)
        starting_offsets = _starting_offsets(kafka, table_path, checkpoint_dir, source)
        reader = (
            spark.readStream.format("kafka")
            .options(**kafka.spark_options())
            .option("subscribe", topic)
            .option("startingOffsets", starting_offsets)
            .option("maxOffsetsPerTrigger", lakehouse.max_offsets_per_trigger)
        )
        if source.is_table_topic:
            # A compacted topic has gaps in its offsets and loses superseded records before they are read: for a
            # table topic that is what compaction is for, not data loss (the newest record of each key stays).
            reader = reader.option("failOnDataLoss", "false")
        return reader.load().writeStream.foreachBatch(handler).option("checkpointLocation", checkpoint_dir)

    return StreamQuery(asset_name, start_writer, tables=tables)


def batch_writer(
    registry: SchemaRegistryConnection, lakehouse: Lakehouse, source: SourceTopic
) -> BronzeBatchWriter | TableBatchWriter:
    """The foreachBatch handler of the source's table: a stream's appends every record, a table topic's MERGEs the
    latest value of each key."""
    asset_name = source.bronze_table
    common: dict[str, Any] = {
        "registry_url": registry.url,
        "registry_auth": registry.basic_auth_user_info,
        "registry_ca": registry.ssl_ca_location,
        "registry_keystore": registry.ssl_keystore_location,
        "table_path": lakehouse.table_path(asset_name),
        "dead_letter_path": lakehouse.table_path(DEAD_LETTER_RECORDS.name),
        "asset_name": asset_name,
        "checkpoint_dir": lakehouse.checkpoint_path(asset_name),
    }
    if not source.is_table_topic:
        quarantine = source.quarantine
        return BronzeBatchWriter(
            subject=source.value_subject,
            fallback_reader_schema=load_schema(source.value_schema),
            expectations=source.expectations,
            quarantine_path=lakehouse.table_path(quarantine.name) if quarantine else None,
            **common,
        )
    assert source.key_schema is not None
    history = source.history_table
    return TableBatchWriter(
        key_subject=source.key_subject,
        value_subject=source.value_subject,
        fallback_key_schema=load_schema(source.key_schema),
        fallback_value_schema=load_schema(source.value_schema),
        key_fields=tuple(c.name for c in source.key_columns),
        value_fields=tuple(c.name for c in avro_columns(load_schema(source.value_schema))),
        history_path=lakehouse.table_path(history.name) if history else None,
        valid_from_field=source.valid_from_field,
        **common,
    )


def ingest_topic(
    spark: SparkSession,
    kafka: KafkaConnection,
    registry: SchemaRegistryConnection,
    lakehouse: Lakehouse,
    *,
    source: SourceTopic,
    log: Log | None = None,
) -> BronzeRunResult:
    """Drain everything new in the source's topic into its bronze table and the dead-letter table, exactly once.

    Args:
        spark: the engine's session (Spark Connect or in-process).
        kafka: the brokers and client settings the Kafka source reads with.
        registry: the schema registry the handler decodes writer schemas with.
        lakehouse: where the tables and checkpoints are.
        source: the topic and its bronze table.
        log: where the run's progress goes (a Dagster run's log, or none).

    Returns:
        The run's micro-batches, and the bronze and dead-letter commits they made."""
    asset_name = source.bronze_table
    table_path = lakehouse.table_path(asset_name)
    dead_letter_path = lakehouse.table_path(DEAD_LETTER_RECORDS.name)
    query = bronze_query(spark, kafka, registry, lakehouse, source=source)
    table_before = latest_version(table_path)
    dead_before = latest_version(dead_letter_path)
    report = run_available_now(query.name, query.start_writer, log=log)
    result = BronzeRunResult(report=report)
    if report.batches:
        app_id = bronze_app_id(asset_name, checkpoint_id(lakehouse.checkpoint_path(asset_name)))
        result.batches = commits_since(table_path, table_before, app_id)
        result.dead_letter_batches = commits_since(dead_letter_path, dead_before, dead_letter_app_id(app_id))
    return result


def _starting_offsets(kafka: KafkaConnection, table_path: str, checkpoint_dir: str, source: SourceTopic) -> str:
    """Check that table, checkpoint and topic agree; the `startingOffsets` of a query with a new checkpoint.

    A new checkpoint starts at the earliest offsets, or where a replay said the rebuilt table starts. (A query
    with a checkpoint ignores the option and goes on from the checkpoint.)
    """
    asset_name, topic = source.bronze_table, source.topic
    position = check_bronze_state(table_path, checkpoint_dir, asset_name)
    consumed = position_offsets(position, table_path, checkpoint_dir, asset_name, topic)
    problems = topic_problems(
        asset_name, topic, consumed, kafka.watermark_offsets(topic), table_topic=source.is_table_topic
    )
    if problems:
        raise BronzeStateError(problems.message())
    if checkpoint_id(checkpoint_dir) is None and consumed:
        return json.dumps({topic: {str(p): o for p, o in sorted(consumed.items())}})
    return "earliest"
