"""Bronze decoding, as pure Spark transformations (DataFrame in, DataFrame out; no session, no I/O): Kafka
records in the Confluent wire format split into schema id and Avro body, decoded with their writer schemas,
and sorted into bronze rows and dead letters.

They work the same on static DataFrames (unit tests) and on streaming DataFrames (the bronze handler).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

CONFLUENT_HEADER_BYTES = 5


def _byte_at(value: Column, position: int, length: int) -> Column:
    """Unsigned big-endian integer of `length` bytes starting at 1-based `position`."""
    return F.conv(F.hex(F.substring(value, position, length)), 16, 10).cast("long")


def split_confluent_frames(kafka_records: DataFrame, column: str = "value") -> DataFrame:
    """Split Kafka `value`s (or `key`s: `column`) in Confluent wire format into schema id and Avro body.

    Input: the Kafka source's columns (key, value, topic, partition, offset, timestamp).
    Output adds `schema_id` (int), `avro_body` (binary) and `frame_error` (null when the frame is well formed).
    """
    value = F.col(column)
    length = F.length(value)
    magic = _byte_at(value, 1, 1)
    raw_schema_id = _byte_at(value, 2, 4)
    null_error = (
        "message value is null (tombstone); expected a Confluent Avro frame"
        if column == "value"
        else f"message {column} is null; expected a Confluent Avro frame"
    )
    frame_error = (
        F.when(value.isNull(), F.lit(null_error))
        .when(
            length < CONFLUENT_HEADER_BYTES + 1,
            F.format_string(
                f"message {column} is %d bytes; a Confluent Avro frame has a 5-byte header and a body", length
            ),
        )
        .when(magic != 0, F.format_string("wrong magic byte %d; the Confluent wire format starts with 0", magic))
        .when(
            raw_schema_id > 2**31 - 1,
            F.format_string("unknown schema id %d: outside the registry's id range", raw_schema_id),
        )
    )
    return kafka_records.select(
        "*",
        F.when(frame_error.isNull(), raw_schema_id.cast("int")).alias("schema_id"),
        F.when(frame_error.isNull(), F.expr(f"substring({column}, {CONFLUENT_HEADER_BYTES + 1})")).alias("avro_body"),
        frame_error.alias("frame_error"),
    )


def reader_schema_of(writer_schemas: Mapping[int, str], latest: str) -> str:
    """The schema every record of a subject is decoded into: the `latest` version, plus each field that only earlier
    versions have, made nullable with a null default (after the latest's fields, in the order the versions added
    them).

    Avro's schema resolution drops a writer's field that the reader lacks, so decoding into the latest version
    alone would lose the values of a field that a later version dropped while an older producer still writes it.
    A field whose type differs between versions takes the latest version's type. `latest` itself when no field is
    missing from it, so the usual case decodes with the very text the registry holds.
    """
    schema = json.loads(latest)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return latest
    names = {f["name"] for f in schema["fields"]}
    extra: list[dict[str, object]] = []
    for _, text in sorted(writer_schemas.items()):
        older = json.loads(text)
        if not isinstance(older, dict) or older.get("type") != "record":
            continue
        for found in older["fields"]:
            if found["name"] in names:
                continue
            names.add(found["name"])
            kept = {k: v for k, v in found.items() if k not in ("type", "default")}
            extra.append({**kept, "type": _nullable(found["type"]), "default": None})
    if not extra:
        return latest
    return json.dumps({**schema, "fields": [*schema["fields"], *extra]})


def _nullable(avro_type: object) -> object:
    """`avro_type` as a union whose first branch is null (so that null is a valid default)."""
    branches = avro_type if isinstance(avro_type, list) else [avro_type]
    return ["null", *[b for b in branches if b != "null"]]


def decode_avro_frames(frames: DataFrame, writer_schemas: Mapping[int, str], reader_schema: str) -> DataFrame:
    """Decode each frame's body with its own writer schema, resolved to `reader_schema`.

    `writer_schemas` maps every schema id the registry knows to its schema text; an id missing from
    it is unknown. Output: the frame columns plus `payload` (struct of the reader schema) and `error`
    (why the record cannot be used, null for good records).
    """
    return classify_decoded(attach_avro_payload(frames, writer_schemas, reader_schema), writer_schemas, reader_schema)


def attach_avro_payload(frames: DataFrame, writer_schemas: Mapping[int, str], reader_schema: str) -> DataFrame:
    """Add `payload`: the body decoded in the JVM by `from_avro` with the frame's writer schema."""
    payload: Column | None = None
    for schema_id, writer_schema in sorted(writer_schemas.items()):
        decoded = from_avro(F.col("avro_body"), writer_schema, {"mode": "PERMISSIVE", "avroSchema": reader_schema})
        condition = F.col("schema_id") == schema_id
        payload = F.when(condition, decoded) if payload is None else payload.when(condition, decoded)
    if payload is None:  # no known writer schema: a typed null of the reader schema
        payload = F.when(F.lit(False), from_avro(F.col("avro_body"), reader_schema, {"mode": "PERMISSIVE"}))
    # explode(array(x)) yields x once per row from a Generate node, which the optimizer cannot inline
    # into the projections above it: without it every `payload.<field>` would decode the body again.
    return frames.select("*", F.explode(F.array(payload)).alias("payload"))


def classify_decoded(with_payload: DataFrame, writer_schemas: Mapping[int, str], reader_schema: str) -> DataFrame:
    """Add `error` to the output of `attach_avro_payload`: why a record cannot be used, null when good.

    Cache the result when it is used more than once, so that each body is decoded once.
    """
    reader_fields = json.loads(reader_schema)["fields"]
    required = [f["name"] for f in reader_fields if not _is_nullable(f["type"])]
    # In PERMISSIVE mode Spark turns a body it cannot decode into a struct of nulls, so one required
    # field tells; with none, a record whose fields are all null counts as undecodable. Few payload
    # references keep the generated code small (each one may repeat the decoding).
    if required:
        undecodable = F.col("payload").isNull() | F.col(f"payload.{required[0]}").isNull()
    else:
        undecodable = F.col("payload").isNull() | ~reduce(
            lambda a, b: a | b, [F.col(f"payload.{f['name']}").isNotNull() for f in reader_fields]
        )
    known = F.col("schema_id").isin(list(writer_schemas)) if writer_schemas else F.lit(False)
    body_length = F.length("avro_body")
    record_bytes = F.col("_record_length")
    error = (
        F.when(F.col("frame_error").isNotNull(), F.col("frame_error"))
        .when(
            ~known,
            F.format_string(
                "unknown schema id %d: not a registered schema of this topic's subject", F.col("schema_id")
            ),
        )
        .when(
            undecodable,
            F.format_string(
                "Avro body (%d bytes) cannot be decoded with writer schema id %d (truncated or corrupt)",
                F.length("avro_body"),
                F.col("schema_id"),
            ),
        )
        .when(
            body_length != record_bytes,
            F.format_string(
                "Avro body (%d bytes) is longer than the record it holds (%d bytes with writer schema id %d): "
                "%d trailing byte(s); a frame carries exactly one record",
                body_length,
                record_bytes,
                F.col("schema_id"),
                body_length - record_bytes,
            ),
        )
    )
    # The record's length from a Generate node of its own (see attach_avro_payload): computed once per row,
    # although `error` uses it twice, and only for records that decode.
    decodable = F.col("frame_error").isNull() & known & ~undecodable
    length = record_length(writer_schemas, decodable, reader_schema=reader_schema)
    with_length = with_payload.select("*", F.explode(F.array(length)).alias("_record_length"))
    return with_length.withColumn("error", error).drop("_record_length")


# ------------------------------------------------------------------ trailing bytes


def record_length(writer_schemas: Mapping[int, str], decodable: Column, reader_schema: str | None = None) -> Column:
    """Per row, the bytes of the record in `avro_body` as its writer schema (`schema_id`) encodes it; null for
    rows that are not `decodable` (encoding a corrupt record's nulls would fail).

    Spark's from_avro stops reading where the record ends and ignores what follows, so a body with bytes after
    its record decodes as good. Avro's binary encoding is canonical for a given schema (one encoding per value:
    zig-zag varints of minimal length, fixed-width numbers, length-prefixed strings and bytes), so the record
    decoded with its writer schema and encoded again with it has the length of the record itself. (A body whose
    writer chose a longer form, such as arrays split into several blocks, is longer too, and set aside as well.)
    The root is encoded as the union ["null", record] so that the encoder accepts Spark's nullable struct; the
    union index takes one byte, subtracted.

    A record whose writer schema is the `reader_schema` (the usual case: produced with the latest version) is
    encoded from `payload`, which `attach_avro_payload` decoded with that very schema, so its body is decoded once.
    """
    length: Column | None = None
    for schema_id, writer_schema in sorted(writer_schemas.items()):
        parsed = json.loads(writer_schema)
        if isinstance(parsed, list):  # a union at the root cannot be wrapped in another: not checked
            continue
        # FAILFAST decoding gives the struct Avro's nullability; `payload` (PERMISSIVE) is nullable throughout,
        # which the encoder accepts for the decodable rows this is evaluated on.
        record = F.col("payload") if writer_schema == reader_schema else from_avro(F.col("avro_body"), writer_schema)
        nullable_root = json.dumps(["null", parsed])
        computed = F.length(to_avro(record, nullable_root)) - 1
        condition = (F.col("schema_id") == schema_id) & decodable
        length = F.when(condition, computed) if length is None else length.when(condition, computed)
    return length if length is not None else F.lit(None).cast("int")


def _is_nullable(avro_type: object) -> bool:
    return isinstance(avro_type, list) and "null" in avro_type


def bronze_rows(decoded: DataFrame) -> DataFrame:
    """Good records: the Avro fields as columns plus their Kafka coordinates and writer schema id."""
    return decoded.where(F.col("error").isNull()).select(
        "payload.*",
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("schema_id"),
    )


def dead_letter_rows(decoded: DataFrame, failed_at: Column | None = None) -> DataFrame:
    """Records that cannot be decoded, with their raw bytes, coordinates and the reason."""
    return decoded.where(F.col("error").isNotNull()).select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("key").alias("raw_key"),
        F.col("value").alias("raw_value"),
        F.col("error"),
        (failed_at if failed_at is not None else F.current_timestamp()).alias("failed_at"),
    )
