"""Kafka -> Delta bronze ingestion: decode Confluent Avro per micro-batch, dead-letter what cannot be decoded.

Exactly once: Spark keeps the Kafka offsets in the query checkpoint, and every Delta append of a
micro-batch carries (txnAppId, txnVersion=batch id), so a batch replayed after a crash is skipped by
the tables that already have it. The txnAppId names the checkpoint (`bronze:<asset>:<checkpoint id>`), and
every run first checks that table, checkpoint and topic still agree (offsets.check_bronze_state,
offsets.topic_problems): a reset checkpoint, a recreated table or a topic whose offsets went backwards
stops the run with an error naming `streaming-pipeline replay`, instead of losing or duplicating records.

The foreachBatch handler runs where Spark calls it: in this process for an in-process session, in a
Python worker of the Spark Connect server otherwise. So it holds plain data only (no resource, session,
client or logger), and what it did comes back through the Delta log: each commit carries a marker
(`userMetadata`) naming the writer and the batch, and its row count.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streaming_pipeline.delta_tables import Commit, table_history, table_version
from streaming_pipeline.errors import RegistryUnavailableError
from streaming_pipeline.offsets import (
    BronzeStateError,
    bronze_app_prefix,
    checkpoint_batch_offsets,
    checkpoint_id,
    delta_markers,
    check_bronze_state,
    topic_problems,
)
from streaming_pipeline.resources.kafka import KafkaResource
from streaming_pipeline.resources.lakehouse import LakehouseResource
from streaming_pipeline.resources.schema_registry import SchemaRegistryResource
from streaming_pipeline.schemas import TOPIC_SCHEMA_FILES, load_schema, value_subject
from streaming_pipeline.streaming import StreamRunReport, run_available_now

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEAD_LETTER_TABLE = "dead_letter_records"
DEAD_LETTER_SCHEMA_DDL = (
    "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, raw_key BINARY, raw_value BINARY, "
    "error STRING, failed_at TIMESTAMP"
)

_REGISTRIES: dict[tuple[str, str | None], SchemaRegistryResource] = {}


def _registry(url: str, basic_auth_user_info: str | None) -> SchemaRegistryResource:
    """One registry client per worker process, reused across micro-batches (its schema cache too)."""
    key = (url, basic_auth_user_info)
    if key not in _REGISTRIES:
        _REGISTRIES[key] = SchemaRegistryResource(url=url, basic_auth_user_info=basic_auth_user_info)
    return _REGISTRIES[key]


@dataclass
class BronzeBatchWriter:
    """The foreachBatch handler of one bronze table.

    One pass decodes the micro-batch and appends the good rows while an Observation counts the rest; only
    a batch with undecodable records is decoded again, for the dead letters. Writer schemas are the versions
    of the topic's value subject (topic name strategy), looked up per batch so that a version registered
    mid-run is read with its own fields; a record whose schema id is not one of them is a dead letter.
    """

    registry_url: str
    registry_auth: str | None
    subject: str
    fallback_reader_schema: str
    table_path: str
    dead_letter_path: str
    asset_name: str
    checkpoint_dir: str

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        from streaming_pipeline.transformations import (
            bronze_rows,
            dead_letter_rows,
            decode_avro_frames,
            split_confluent_frames,
        )

        registry = _registry(self.registry_url, self.registry_auth)
        cp_id = checkpoint_id(self.checkpoint_dir)
        app_id = bronze_app_id(self.asset_name, cp_id)
        written = _committed_batch(self.table_path, app_id, batch_id)
        if written is not None and "writer_schema_ids" in written:
            # A batch replayed after a crash, whose rows are in the table already: its dead letters must come from
            # the same decoding as its rows (the schemas of that attempt), not from what the registry holds today.
            writer_schemas, reader_schema = self._schemas_of(registry, written, batch_id)
        else:
            writer_schemas, reader_schema = self._current_schemas(registry, batch, batch_id)
        # The marker records the checkpoint, this batch's end offsets (what the table has consumed, readable from
        # the Delta log by the sensor and the checks on any storage) and the schemas its records were decoded with.
        extra = {
            "checkpoint_id": cp_id,
            "kafka_offsets": checkpoint_batch_offsets(self.checkpoint_dir, batch_id),
            "writer_schema_ids": sorted(writer_schemas),
            "reader_schema_id": _schema_id_of(writer_schemas, reader_schema),
        }
        decoded = decode_avro_frames(split_confluent_frames(batch), writer_schemas, reader_schema)
        attempt = uuid.uuid4().hex
        observation = Observation(f"bronze-{batch_id}-{attempt}")
        observed = decoded.observe(
            observation,
            F.count(F.lit(1)).alias("records"),
            F.count(F.when(F.col("error").isNull(), 1)).alias("good"),
        )
        written_now = append_once(
            bronze_rows(observed), self.table_path, app_id, batch_id, attempt, extra=extra, merge_schema=True
        )
        # Delta skips an append whose txnVersion it already has (a batch replayed after a crash) without running
        # the query; the Observation is only read when this very attempt committed.
        if written_now:
            metrics = observation.get
            if int(metrics["records"]) == int(metrics["good"]):
                return
        append_once(dead_letter_rows(decoded), self.dead_letter_path, dead_letter_app_id(app_id), batch_id, attempt, extra=extra)

    def _current_schemas(self, registry: SchemaRegistryResource, batch: DataFrame, batch_id: int) -> tuple[dict[int, str], str]:
        """The versions of the subject now (writer schemas by id) and the latest one (the reader schema)."""
        writer_schemas = registry.subject_schemas(self.subject)
        if not writer_schemas and not batch.isEmpty():
            # An emptied or wrong registry would turn every record into a dead letter while the checkpoint
            # moves on: stop the stream instead, before anything of this batch is written.
            raise RegistryUnavailableError(
                f"the schema registry at {self.registry_url} has no versions of subject {self.subject!r}, so no "
                f"record of micro-batch {batch_id} could be decoded; check SCHEMA_REGISTRY_URL, or register the "
                "schema (`streaming-pipeline produce` does). Nothing was written and the batch will be read again."
            )
        latest = registry.latest(self.subject)
        return writer_schemas, latest[1] if latest else self.fallback_reader_schema

    def _schemas_of(self, registry: SchemaRegistryResource, marker: dict[str, Any], batch_id: int) -> tuple[dict[int, str], str]:
        """The writer and reader schemas a committed batch was decoded with, by their ids (ids never change meaning)."""
        ids = [int(i) for i in marker["writer_schema_ids"]]
        reader_id = marker.get("reader_schema_id")
        texts = {i: registry.schema_by_id(i) for i in {*ids, *([int(reader_id)] if reader_id is not None else [])}}
        missing = sorted(i for i, text in texts.items() if text is None)
        if missing:
            raise RegistryUnavailableError(
                f"micro-batch {batch_id} of {self.asset_name} is being replayed after a crash and was decoded with "
                f"schema ids {missing}, which the schema registry at {self.registry_url} no longer knows; its dead "
                "letters cannot be derived as its rows were. Restore those schemas (or the registry's data) and run again."
            )
        writer_schemas = {i: str(texts[i]) for i in ids}
        return writer_schemas, str(texts[int(reader_id)]) if reader_id is not None else self.fallback_reader_schema


def _committed_batch(table_path: str, app_id: str, batch_id: int) -> dict[str, Any] | None:
    """The marker of batch `batch_id` of writer `app_id` when the table has it already (a replay), else None.
    Reads the newest commits of the Delta log until the writer's latest one (its batches commit in order)."""
    for marker in delta_markers(table_path) or []:
        if marker.metadata.get("app_id") == app_id:
            return marker.metadata if marker.metadata.get("batch_id") == batch_id else None
    return None


def _schema_id_of(writer_schemas: dict[int, str], reader_schema: str) -> int | None:
    """The id of the reader schema: one of the writer schemas (the latest version), else None (the fallback)."""
    matches = [schema_id for schema_id, text in writer_schemas.items() if text == reader_schema]
    return max(matches) if matches else None


def bronze_app_id(asset_name: str, checkpoint: str | None) -> str:
    """The Delta txnAppId of a bronze query: one per checkpoint, so a new checkpoint never inherits the
    batch ids of an old one."""
    return f"{bronze_app_prefix(asset_name)}{checkpoint}"


def dead_letter_app_id(app_id: str) -> str:
    return f"{app_id}->{DEAD_LETTER_TABLE}"


def append_once(
    frame: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    attempt: str,
    *,
    extra: dict[str, Any] | None = None,
    merge_schema: bool = False,
) -> bool:
    """Append `frame` as batch `batch_id` of writer `app_id`, at most once; True when this attempt committed.

    Delta keeps the last txnVersion per txnAppId and skips an append that is not newer. The commit carries a
    marker (`userMetadata`: writer, batch, attempt, `extra`) by which readers of the table's history know what
    each commit was, and this attempt knows whether the commit is its own.
    """
    marker = {"app_id": app_id, "batch_id": batch_id, "attempt": attempt, **(extra or {})}
    writer = (
        frame.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
        .option("userMetadata", json.dumps(marker, sort_keys=True))
    )
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    writer.save(path)
    history = table_history(frame.sparkSession, path, limit=1) or []
    return bool(history) and history[0].user_metadata == marker


@dataclass
class BatchCounts:
    """One commit a writer made: its batch, the rows it added and its marker."""

    batch_id: int
    rows: int
    marker: dict[str, Any] = field(default_factory=dict)


@dataclass
class BronzeRunResult:
    report: StreamRunReport
    batches: list[BatchCounts] = field(default_factory=list)
    dead_letter_batches: list[BatchCounts] = field(default_factory=list)

    @property
    def rows_written(self) -> int:
        return sum(b.rows for b in self.batches)

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


def commits_since(spark: SparkSession, path: str, version: int | None, app_id: str) -> list[BatchCounts]:
    """Batches `app_id` committed to the table at `path` after `version`, oldest first.

    Reads only the commits after `version` (DESCRIBE HISTORY with a LIMIT), so that a run's cost follows its own
    commits, not the table's history; all of it again only when another writer committed in between.
    """
    history: list[Commit]
    if version is None:
        history = table_history(spark, path) or []
    else:
        latest = table_version(spark, path)
        if latest is None or latest <= version:
            return []
        history = table_history(spark, path, limit=latest - version) or []
        if not history or history[-1].version > version + 1:  # another writer committed in between
            history = table_history(spark, path) or []
    found = [
        BatchCounts(int(c.user_metadata["batch_id"]), c.output_rows, c.user_metadata)
        for c in history
        if (version is None or c.version > version) and c.user_metadata and c.user_metadata.get("app_id") == app_id
    ]
    return sorted(found, key=lambda b: b.batch_id)


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
    table_path = lakehouse.table_path(asset_name)
    checkpoint_dir = lakehouse.checkpoint_path(asset_name)
    dead_letter_path = lakehouse.table_path(DEAD_LETTER_TABLE)
    starting_offsets = _starting_offsets(kafka, table_path, checkpoint_dir, asset_name, topic)
    handler = BronzeBatchWriter(
        registry_url=registry.url,
        registry_auth=registry.basic_auth_user_info,
        subject=value_subject(topic),
        fallback_reader_schema=load_schema(value_file),
        table_path=table_path,
        dead_letter_path=dead_letter_path,
        asset_name=asset_name,
        checkpoint_dir=checkpoint_dir,
    )
    table_before = table_version(spark, table_path)
    dead_before = table_version(spark, dead_letter_path)

    def start_writer():  # type: ignore[no-untyped-def]
        source = (
            spark.readStream.format("kafka")
            .options(**kafka.spark_options())
            .option("subscribe", topic)
            .option("startingOffsets", starting_offsets)
            .option("maxOffsetsPerTrigger", lakehouse.max_offsets_per_trigger)
            .load()
        )
        return source.writeStream.foreachBatch(handler).option("checkpointLocation", checkpoint_dir)

    report = run_available_now(asset_name, start_writer, log=log)
    result = BronzeRunResult(report=report)
    if report.batches:
        app_id = bronze_app_id(asset_name, checkpoint_id(checkpoint_dir))
        result.batches = commits_since(spark, table_path, table_before, app_id)
        result.dead_letter_batches = commits_since(spark, dead_letter_path, dead_before, dead_letter_app_id(app_id))
    return result


def _starting_offsets(kafka: KafkaResource, table_path: str, checkpoint_dir: str, asset_name: str, topic: str) -> str:
    """Check that table, checkpoint and topic agree; the `startingOffsets` of a query with a new checkpoint.

    A new checkpoint starts at the earliest offsets, or where a replay said the rebuilt table starts. (A query
    with a checkpoint ignores the option and goes on from the checkpoint.)
    """
    position = check_bronze_state(table_path, checkpoint_dir, asset_name)
    consumed = position.consumed(topic)
    problems = topic_problems(asset_name, topic, consumed, kafka.watermark_offsets(topic))
    if problems:
        raise BronzeStateError(problems.message())
    if checkpoint_id(checkpoint_dir) is None and consumed:
        return json.dumps({topic: {str(p): o for p, o in sorted(consumed.items())}})
    return "earliest"
