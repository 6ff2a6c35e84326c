"""A table topic's records as pure Spark transformations (DataFrame in, DataFrame out; no session, no I/O): keys and
values decoded, the latest record of each key (what the current table holds), and every version of each key with
its validity interval (the history table, SCD type 2).

A table topic is a changelog: the record with the highest offset of a key is the key's value now, and a record whose
value is null (a tombstone) deletes the key. A key lives on one partition (Kafka's default partitioner hashes the key
bytes), so offsets order a key's records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from streaming_pipeline.lakehouse.bronze.decode import decode_avro_frames, split_confluent_frames

#: The Kafka source's columns a table topic's handler keeps through decoding.
_KAFKA_SOURCE_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp"]
#: True for a tombstone among the decoded records: a null value, which deletes its key.
TOMBSTONE = "_tombstone"


def decode_keyed_records(
    kafka_records: DataFrame,
    key_schemas: Mapping[int, str],
    key_reader_schema: str,
    value_schemas: Mapping[int, str],
    value_reader_schema: str,
) -> DataFrame:
    """Decode each record's key and value (Confluent Avro, each with its writer schema).

    Output: the Kafka source's columns, `key_payload` (struct of the key's reader schema), `payload` (the value's;
    null for a tombstone), `schema_id` (the value's writer schema id), `_tombstone`, and `error`: why the record
    cannot be used (a key that cannot be decoded, or a value that is neither null nor decodable), null when good.
    """
    keys = decode_avro_frames(split_confluent_frames(kafka_records, column="key"), key_schemas, key_reader_schema)
    keyed = keys.select(
        *_KAFKA_SOURCE_COLUMNS, F.col("payload").alias("key_payload"), F.col("error").alias("key_error")
    )
    values = decode_avro_frames(split_confluent_frames(keyed), value_schemas, value_reader_schema)
    tombstone = F.col("value").isNull()
    error = F.when(F.col("key_error").isNotNull(), F.concat(F.lit("key: "), F.col("key_error"))).when(
        ~tombstone & F.col("error").isNotNull(), F.col("error")
    )
    return values.select(
        *_KAFKA_SOURCE_COLUMNS,
        "key_payload",
        F.when(~tombstone, F.col("payload")).alias("payload"),
        F.when(~tombstone, F.col("schema_id")).alias("schema_id"),
        tombstone.alias(TOMBSTONE),
        error.alias("error"),
    )


def keyed_rows(decoded: DataFrame, key_fields: Sequence[str], value_fields: Sequence[str]) -> DataFrame:
    """The good records of `decode_keyed_records` as table rows: the key's fields, the value's other fields (null for
    a tombstone), the Kafka coordinates and writer schema id, and `_tombstone`."""
    return decoded.where(F.col("error").isNull()).select(
        *[F.col(f"key_payload.{name}").alias(name) for name in key_fields],
        *[F.col(f"payload.{name}").alias(name) for name in value_fields if name not in key_fields],
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("schema_id"),
        F.col(TOMBSTONE),
    )


def latest_per_key(rows: DataFrame, key_fields: Sequence[str]) -> DataFrame:
    """The record with the highest offset of each key among `rows` (tombstones included: a key whose latest record
    is a tombstone is deleted)."""
    newest_first = Window.partitionBy(*key_fields).orderBy(F.col("kafka_offset").desc())
    return rows.withColumn("_rank", F.row_number().over(newest_first)).where(F.col("_rank") == 1).drop("_rank")


def key_versions(rows: DataFrame, key_fields: Sequence[str], valid_from: Column | None = None) -> DataFrame:
    """Every version that `rows` gives a key, oldest first: each record that is not a tombstone, with `valid_from`
    (`valid_from`, default the Kafka timestamp), `valid_to` (the next record of its key's `valid_from`, a tombstone's
    too; null for the newest) and `is_current` (no record of its key follows). A tombstone's time is its Kafka
    timestamp."""
    by_offset = Window.partitionBy(*key_fields).orderBy("kafka_offset")
    timed = rows.withColumn("valid_from", _since(valid_from)).withColumn(
        "valid_to", F.lead("valid_from").over(by_offset)
    )
    return timed.where(~F.col(TOMBSTONE)).withColumn("is_current", F.col("valid_to").isNull())


def first_change_per_key(rows: DataFrame, key_fields: Sequence[str], valid_from: Column | None = None) -> DataFrame:
    """For each key among `rows`: the offset and time of its first record (which ends the key's current version in
    the history table), as `kafka_offset` and `valid_from`."""
    return rows.groupBy(*key_fields).agg(
        F.min("kafka_offset").alias("kafka_offset"),
        F.min_by(_since(valid_from), F.col("kafka_offset")).alias("valid_from"),
    )


def _since(valid_from: Column | None) -> Column:
    """The time a record's version is valid from: `valid_from` (the declared field) when set, else (and for a
    tombstone, whose fields are null) the Kafka timestamp."""
    kafka_time = F.col("kafka_timestamp")
    return kafka_time if valid_from is None else F.coalesce(valid_from, kafka_time)
