"""Pure Spark transformations: DataFrame in, DataFrame out; no session, no I/O.

They work the same on static DataFrames (unit tests) and on streaming DataFrames (the assets).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

#: Columns every bronze table carries besides the decoded Avro fields.
KAFKA_COLUMNS = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "schema_id"]
DEAD_LETTER_COLUMNS = ["kafka_topic", "kafka_partition", "kafka_offset", "raw_key", "raw_value", "error", "failed_at"]
CONFLUENT_HEADER_BYTES = 5


def _byte_at(value: Column, position: int, length: int) -> Column:
    """Unsigned big-endian integer of `length` bytes starting at 1-based `position`."""
    return F.conv(F.hex(F.substring(value, position, length)), 16, 10).cast("long")


def split_confluent_frames(kafka_records: DataFrame) -> DataFrame:
    """Split Kafka `value`s in Confluent wire format into schema id and Avro body.

    Input: the Kafka source's columns (key, value, topic, partition, offset, timestamp).
    Output adds `schema_id` (int), `avro_body` (binary) and `frame_error` (null when the frame is well formed).
    """
    value = F.col("value")
    length = F.length(value)
    magic = _byte_at(value, 1, 1)
    raw_schema_id = _byte_at(value, 2, 4)
    frame_error = (
        F.when(value.isNull(), F.lit("message value is null (tombstone); expected a Confluent Avro frame"))
        .when(
            length < CONFLUENT_HEADER_BYTES + 1,
            F.format_string("message value is %d bytes; a Confluent Avro frame has a 5-byte header and a body", length),
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
        F.when(frame_error.isNull(), F.expr(f"substring(value, {CONFLUENT_HEADER_BYTES + 1})")).alias("avro_body"),
        frame_error.alias("frame_error"),
    )


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
    length = record_length(writer_schemas, decodable=F.col("frame_error").isNull() & known & ~undecodable)
    with_length = with_payload.select("*", F.explode(F.array(length)).alias("_record_length"))
    return with_length.withColumn("error", error).drop("_record_length")


# ------------------------------------------------------------------ trailing bytes


def record_length(writer_schemas: Mapping[int, str], decodable: Column) -> Column:
    """Per row, the bytes of the record in `avro_body` as its writer schema (`schema_id`) encodes it; null for
    rows that are not `decodable` (encoding a corrupt record's nulls would fail).

    Spark's from_avro stops reading where the record ends and ignores what follows, so a body with bytes after
    its record decodes as good. Avro's binary encoding is canonical for a given schema (one encoding per value:
    zig-zag varints of minimal length, fixed-width numbers, length-prefixed strings and bytes), so the record
    decoded with its writer schema and encoded again with it has the length of the record itself. (A body whose
    writer chose a longer form, such as arrays split into several blocks, is longer too, and set aside as well.)
    The root is encoded as the union ["null", record] so that the encoder accepts Spark's nullable struct; the
    union index takes one byte, subtracted.
    """
    length: Column | None = None
    for schema_id, writer_schema in sorted(writer_schemas.items()):
        parsed = json.loads(writer_schema)
        if isinstance(parsed, list):  # a union at the root cannot be wrapped in another: not checked
            continue
        record = from_avro(F.col("avro_body"), writer_schema)  # FAILFAST: nullable where Avro is, and decodable
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


def vendor_counts(rides: DataFrame) -> DataFrame:
    """Running number of rides per vendor."""
    return rides.groupBy("vendor_id").agg(F.count(F.lit(1)).alias("trip_count"))


def ride_window_aggregates(rides: DataFrame, window_duration: str, watermark_delay: str | None = None) -> DataFrame:
    """Rides and revenue per vendor in tumbling event-time windows of `window_duration` on pickup time.

    With `watermark_delay` (streaming), windows are finalized once the watermark passes their end and
    later rides are left out of the aggregate (they are counted by `late_ride_counts`).
    """
    if watermark_delay is not None:
        rides = rides.withWatermark("pickup_datetime", watermark_delay)
    return (
        rides.groupBy(F.window("pickup_datetime", window_duration), F.col("vendor_id"))
        .agg(
            F.count(F.lit(1)).alias("trip_count"),
            # Money in cents: a running sum of doubles drifts (3798.040000000002).
            F.round(F.sum("total_amount"), 2).alias("total_amount_sum"),
            F.max("pickup_datetime").alias("max_pickup_datetime"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "vendor_id",
            "trip_count",
            "total_amount_sum",
            "max_pickup_datetime",
        )
    )


def window_late_counts(all_rides_per_window: DataFrame, aggregates: DataFrame) -> DataFrame:
    """For each window of `all_rides_per_window`, the rides the streaming aggregate left out (arrived after the
    watermark): every ride of the window minus those counted on time, 0 when none.

    `all_rides_per_window`: `ride_window_aggregates(...)` of ingested rides (batch, no watermark), all of them or
    those of some windows. `aggregates`: rows of the `ride_window_aggregates` table (their `trip_count` are the
    on-time rides). Output: window_start, window_end, vendor_id, late_trip_count, and, when `aggregates` has a
    `late_trip_count`, previous_late_trip_count (0 for a window it lacks). A window missing from `aggregates`
    had only late rides.
    """
    everything = all_rides_per_window.select(
        "window_start", "window_end", "vendor_id", F.col("trip_count").alias("all_trip_count")
    )
    previous = "late_trip_count" in aggregates.columns
    on_time = aggregates.select(
        F.col("window_start").alias("a_window_start"),
        F.col("vendor_id").alias("a_vendor_id"),
        F.col("trip_count").alias("on_time_trip_count"),
        *([F.col("late_trip_count").alias("a_late_trip_count")] if previous else []),
    )
    joined = everything.join(
        on_time,
        (F.col("window_start") == F.col("a_window_start")) & F.col("vendor_id").eqNullSafe(F.col("a_vendor_id")),
        "left",
    )
    late = F.greatest(F.col("all_trip_count") - F.coalesce(F.col("on_time_trip_count"), F.lit(0)), F.lit(0))
    before = [F.coalesce(F.col("a_late_trip_count"), F.lit(0)).cast("long").alias("previous_late_trip_count")]
    return joined.select(
        "window_start",
        "window_end",
        "vendor_id",
        late.cast("long").alias("late_trip_count"),
        *(before if previous else []),
    )


def late_ride_counts(all_rides_per_window: DataFrame, aggregates: DataFrame) -> DataFrame:
    """The windows of `window_late_counts` that have late rides."""
    late = window_late_counts(all_rides_per_window, aggregates).where(F.col("late_trip_count") > 0)
    return late.select("window_start", "window_end", "vendor_id", "late_trip_count")


def ride_pickup_joins(
    rides: DataFrame, pickups: DataFrame, max_gap: str, watermark_delay: str | None = None
) -> DataFrame:
    """Pair a ride that dropped off at zone L at time d with each pickup at L at time p, |p - d| <= max_gap.

    The bound is inclusive. With `watermark_delay` (streaming) both sides carry an event-time
    watermark, so Spark can drop join state that no future event can match.
    """
    ride_side = rides.select(
        F.col("vendor_id"),
        F.col("do_location_id").alias("ride_location_id"),
        F.col("dropoff_datetime"),
        *[F.col(c).alias(f"ride_{c}") for c in ("kafka_partition", "kafka_offset") if c in rides.columns],
    )
    pickup_side = pickups.select(
        F.col("pu_location_id").alias("location_id"),
        F.col("pickup_datetime"),
        *[F.col(c).alias(f"pickup_{c}") for c in ("kafka_partition", "kafka_offset") if c in pickups.columns],
    )
    if watermark_delay is not None:
        ride_side = ride_side.withWatermark("dropoff_datetime", watermark_delay)
        pickup_side = pickup_side.withWatermark("pickup_datetime", watermark_delay)
    gap = F.expr(f"INTERVAL {max_gap}")
    condition = (
        (F.col("ride_location_id") == F.col("location_id"))
        & (F.col("pickup_datetime") >= F.col("dropoff_datetime") - gap)
        & (F.col("pickup_datetime") <= F.col("dropoff_datetime") + gap)
    )
    joined = ride_side.join(pickup_side, condition, "inner")
    extra = [c for c in joined.columns if c.startswith(("ride_kafka", "pickup_kafka"))]
    return joined.select("vendor_id", "location_id", "pickup_datetime", "dropoff_datetime", *extra)


def high_amount_rides(rides: DataFrame, threshold: float) -> DataFrame:
    """Rides with total_amount >= threshold; a null amount is neither high nor low."""
    return rides.where(F.col("total_amount") >= F.lit(threshold))


def low_amount_rides(rides: DataFrame, threshold: float) -> DataFrame:
    """Rides with total_amount < threshold; a null amount is neither high nor low."""
    return rides.where(F.col("total_amount") < F.lit(threshold))


def taxi_zones_from_lookup(lookup: DataFrame) -> DataFrame:
    """The TLC lookup (`LocationID, Borough, Zone, service_zone`) under the lakehouse's snake_case names.

    A row without an id cannot match any ride, so it is not a zone.
    """
    return lookup.select(
        F.col("LocationID").cast("int").alias("location_id"),
        F.col("Borough").cast("string").alias("borough"),
        F.col("Zone").cast("string").alias("zone"),
        F.col("service_zone").cast("string").alias("service_zone"),
    ).where(F.col("location_id").isNotNull())


def enrich_rides_with_zones(rides: DataFrame, zones: DataFrame) -> DataFrame:
    """Every ride once, plus pu_borough, pu_zone, do_borough and do_zone.

    Left joins, so a ride whose location id is unknown keeps its row, with nulls. The zone table is small and
    static: broadcasting it avoids shuffling the rides, and with it on the right of a left join this is a
    supported stream-static join when `rides` is streaming. One zone per id, so a duplicated id in a custom
    lookup cannot duplicate rides.
    """
    unique_zones = zones.dropDuplicates(["location_id"])

    def side(prefix: str) -> DataFrame:
        return F.broadcast(
            unique_zones.select(
                F.col("location_id").alias(f"_{prefix}_zone_id"),
                F.col("borough").alias(f"{prefix}_borough"),
                F.col("zone").alias(f"{prefix}_zone"),
            )
        )

    return (
        rides.join(side("pu"), F.col("pu_location_id") == F.col("_pu_zone_id"), "left")
        .join(side("do"), F.col("do_location_id") == F.col("_do_zone_id"), "left")
        .drop("_pu_zone_id", "_do_zone_id")
    )
