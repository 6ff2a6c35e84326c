"""Unit tests of the layers' pure transformations (`bronze.decode`, `silver.transformations`,
`gold.transformations`) on small static DataFrames.

Every expected row is written by hand or computed in plain Python here, never with the code under test.
Inputs use timezone-aware UTC datetimes; Spark (session time zone UTC) returns naive UTC datetimes.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from collections import defaultdict
from pathlib import Path

import fastavro
import pytest
from pyspark.sql import functions as F

from streaming_pipeline.bronze.decode import bronze_rows, dead_letter_rows, decode_avro_frames, split_confluent_frames
from streaming_pipeline.gold.transformations import (
    late_ride_counts,
    ride_window_aggregates,
    vendor_counts,
    window_late_counts,
)
from streaming_pipeline.silver.transformations import ride_pickup_joins
from streaming_pipeline.tables import DEAD_LETTER_RECORDS
from streaming_pipeline.tables import KAFKA_COLUMN_NAMES as KAFKA_COLUMNS

DEAD_LETTER_COLUMNS = DEAD_LETTER_RECORDS.column_names

UTC = dt.UTC
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
RIDE_V1 = (SCHEMA_DIR / "ride_value.avsc").read_text()
RIDE_V2 = (SCHEMA_DIR / "ride_value_v2.avsc").read_text()
PICKUP = (SCHEMA_DIR / "pickup_location_value.avsc").read_text()

RIDE_V1_ID, RIDE_V2_ID, PICKUP_ID = 1, 2, 5
RIDE_WRITERS = {RIDE_V1_ID: RIDE_V1, RIDE_V2_ID: RIDE_V2}

KAFKA_SOURCE_DDL = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
KAFKA_DDL = "kafka_topic string, kafka_partition int, kafka_offset long, kafka_timestamp timestamp, schema_id int"
RIDE_V2_DDL = (
    "vendor_id int, pickup_datetime timestamp, dropoff_datetime timestamp, passenger_count int, "
    "trip_distance double, rate_code_id int, store_and_fwd_flag string, pu_location_id int, "
    "do_location_id int, payment_type int, fare_amount double, extra double, mta_tax double, "
    "tip_amount double, tolls_amount double, improvement_surcharge double, total_amount double, "
    "congestion_surcharge double, airport_fee double"
)
PICKUP_DDL = "pu_location_id int, pickup_datetime timestamp"
DEAD_LETTER_DDL = (
    "kafka_topic string, kafka_partition int, kafka_offset long, raw_key binary, raw_value binary, "
    "error string, failed_at timestamp"
)
WINDOW_DDL = (
    "window_start timestamp, window_end timestamp, vendor_id int, trip_count long, "
    "total_amount_sum double, max_pickup_datetime timestamp"
)

FAILED_AT = dt.datetime(2024, 3, 10, 12, 0, 0, tzinfo=UTC)
KAFKA_TS = dt.datetime(2024, 3, 10, 9, 30, 0, 123000, tzinfo=UTC)


# ---------------------------------------------------------------- helpers


def at(hour: int, minute: int, second: int = 0, micro: int = 0) -> dt.datetime:
    """An aware UTC datetime on 2024-03-10."""
    return dt.datetime(2024, 3, 10, hour, minute, second, micro, tzinfo=UTC)


def naive(value: dt.datetime | None) -> dt.datetime | None:
    """What Spark returns for an aware datetime: naive, in the session time zone (UTC)."""
    return None if value is None else value.astimezone(UTC).replace(tzinfo=None)


def avro_body(schema_text: str, record: object) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(schema_text)), record)
    return out.getvalue()


def confluent_frame(schema_id: int, body: bytes, magic: int = 0) -> bytes:
    """Confluent wire format: magic byte, 4-byte big-endian schema id, Avro body."""
    return bytes([magic]) + struct.pack(">I", schema_id) + body


def kafka_records(spark, rows):
    """A static DataFrame shaped like the Kafka source: (key, value, topic, partition, offset, timestamp)."""
    return spark.createDataFrame(rows, KAFKA_SOURCE_DDL)


def decode(spark, rows, writers, reader):
    """split + decode, materialized once (the decode plan is expensive to compile; bronze_rows and
    dead_letter_rows then run on the same decoded rows without recompiling it)."""
    decoded = decode_avro_frames(split_confluent_frames(kafka_records(spark, rows)), writers, reader)
    return decoded.localCheckpoint(eager=True)


def _plain(value):
    if isinstance(value, dt.datetime):
        return naive(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _sort_key(row) -> tuple:
    # None sorts first; every other value compares with values of its own column
    return tuple((value is not None, value if value is not None else 0) for value in row)


def assert_exact(spark, actual, expected_rows, ddl: str) -> list[tuple]:
    """`actual` has exactly the columns and types of `ddl` and, in any order, exactly `expected_rows`
    (no float tolerance; aware datetimes in `expected_rows` are compared as naive UTC). Returns the rows.

    (pyspark.testing.assertDataFrameEqual imports pyspark.pandas, which fails with the installed pandas.)
    """
    expected_schema = spark.createDataFrame([], ddl).schema
    assert [(f.name, f.dataType) for f in actual.schema] == [(f.name, f.dataType) for f in expected_schema]
    got = sorted((tuple(_plain(v) for v in r) for r in actual.collect()), key=_sort_key)
    want = sorted((tuple(_plain(v) for v in r) for r in expected_rows), key=_sort_key)
    assert got == want
    return got


def field_names(schema_text: str) -> list[str]:
    return [f["name"] for f in json.loads(schema_text)["fields"]]


def ride_v1(**overrides) -> dict:
    record = {
        "vendor_id": 1,
        "pickup_datetime": at(8, 1, 2, 345678),
        "dropoff_datetime": at(8, 20, 0),
        "passenger_count": 2,
        "trip_distance": 3.25,
        "rate_code_id": 1,
        "store_and_fwd_flag": "N",
        "pu_location_id": 161,
        "do_location_id": 236,
        "payment_type": 1,
        "fare_amount": 15.5,
        "extra": 1.0,
        "mta_tax": 0.5,
        "tip_amount": 3.0,
        "tolls_amount": 0.0,
        "improvement_surcharge": 0.3,
        "total_amount": 22.8,
        "congestion_surcharge": 2.5,
    }
    record.update(overrides)
    return record


def ride_v2(**overrides) -> dict:
    return {**ride_v1(), "airport_fee": 1.75, **overrides}


def expected_ride_row(record: dict, topic: str, partition: int, offset: int, kafka_ts: dt.datetime, schema_id: int):
    """The bronze row of a ride read with reader schema v2: a field the writer lacks is null."""
    values = []
    for name in field_names(RIDE_V2):
        value = record.get(name)
        values.append(naive(value) if isinstance(value, dt.datetime) else value)
    return (*values, topic, partition, offset, naive(kafka_ts), schema_id)


GOOD_RIDE_FRAME = confluent_frame(RIDE_V1_ID, avro_body(RIDE_V1, ride_v1()))


# ---------------------------------------------------------------- decoding: good records


def test_mixed_v1_and_v2_batch_decoded_with_reader_v2_nulls_airport_fee_only_for_v1_rows(spark):
    r1 = ride_v1()
    r2 = ride_v2(vendor_id=2, airport_fee=1.75, total_amount=31.05, do_location_id=132)
    r3 = ride_v1(
        vendor_id=None,
        passenger_count=None,
        rate_code_id=None,
        store_and_fwd_flag=None,
        payment_type=None,
        congestion_surcharge=None,
        pickup_datetime=at(23, 59, 59, 999999),
    )
    r4 = ride_v2(vendor_id=1, airport_fee=None, pu_location_id=1)
    ts2 = dt.datetime(2024, 3, 10, 9, 31, tzinfo=UTC)
    rows = [
        (b"k1", confluent_frame(RIDE_V1_ID, avro_body(RIDE_V1, r1)), "rides", 0, 10, KAFKA_TS),
        (b"k2", confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, r2)), "rides", 1, 7, ts2),
        (None, confluent_frame(RIDE_V1_ID, avro_body(RIDE_V1, r3)), "rides", 0, 11, KAFKA_TS),
        (b"k4", confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, r4)), "rides", 1, 8, ts2),
    ]
    decoded = decode(spark, rows, RIDE_WRITERS, RIDE_V2)

    bronze = bronze_rows(decoded)
    assert bronze.columns == field_names(RIDE_V2) + KAFKA_COLUMNS
    got = assert_exact(
        spark,
        bronze,
        [
            expected_ride_row(r1, "rides", 0, 10, KAFKA_TS, RIDE_V1_ID),
            expected_ride_row(r2, "rides", 1, 7, ts2, RIDE_V2_ID),
            expected_ride_row(r3, "rides", 0, 11, KAFKA_TS, RIDE_V1_ID),
            expected_ride_row(r4, "rides", 1, 8, ts2, RIDE_V2_ID),
        ],
        f"{RIDE_V2_DDL}, {KAFKA_DDL}",
    )
    # airport_fee: null for the v1 rows (the writer has no such field), the written value for v2 rows
    fee, offset = bronze.columns.index("airport_fee"), bronze.columns.index("kafka_offset")
    assert sorted((row[offset], row[fee]) for row in got) == [(7, 1.75), (8, None), (10, None), (11, None)]
    assert dead_letter_rows(decoded).count() == 0


def test_v2_record_decoded_with_reader_v1_drops_airport_fee(spark):
    record = ride_v2(airport_fee=4.5)
    rows = [(b"k", confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, record)), "rides", 3, 99, KAFKA_TS)]
    bronze = bronze_rows(decode(spark, rows, RIDE_WRITERS, RIDE_V1))
    assert bronze.columns == field_names(RIDE_V1) + KAFKA_COLUMNS
    [row] = [r.asDict() for r in bronze.collect()]
    assert "airport_fee" not in row
    assert row["total_amount"] == 22.8
    assert row["pickup_datetime"] == dt.datetime(2024, 3, 10, 8, 1, 2, 345678)
    assert (row["kafka_partition"], row["kafka_offset"], row["schema_id"]) == (3, 99, RIDE_V2_ID)


def test_split_confluent_frames_reads_big_endian_schema_id_and_body(spark):
    body = avro_body(RIDE_V1, ride_v1())
    rows = [
        (b"a", confluent_frame(1, body), "rides", 0, 0, KAFKA_TS),
        (b"b", confluent_frame(0x01020304, body), "rides", 0, 1, KAFKA_TS),
        (b"c", confluent_frame(256, b"\x02"), "rides", 0, 2, KAFKA_TS),
    ]
    frames = split_confluent_frames(kafka_records(spark, rows)).select(
        "offset", "schema_id", "avro_body", "frame_error"
    )
    assert_exact(
        spark,
        frames,
        [(0, 1, body, None), (1, 16909060, body, None), (2, 256, b"\x02", None)],
        "offset long, schema_id int, avro_body binary, frame_error string",
    )


def test_pickup_frames_decode_to_bronze_and_truncated_pickup_goes_to_dead_letters(spark):
    p1 = {"pu_location_id": 132, "pickup_datetime": at(7, 0, 0)}
    p2 = {"pu_location_id": 1, "pickup_datetime": at(7, 10, 0, 1)}
    p3 = {"pu_location_id": 265, "pickup_datetime": at(7, 59, 59, 999999)}
    cut = confluent_frame(PICKUP_ID, avro_body(PICKUP, p3))[:-2]
    rows = [
        (
            b"\x00\x00\x00\x00\x03\x84\x02",
            confluent_frame(PICKUP_ID, avro_body(PICKUP, p1)),
            "pickup_locations",
            0,
            0,
            KAFKA_TS,
        ),
        (
            b"\x00\x00\x00\x00\x03\x02",
            confluent_frame(PICKUP_ID, avro_body(PICKUP, p2)),
            "pickup_locations",
            1,
            0,
            KAFKA_TS,
        ),
        (b"key3", cut, "pickup_locations", 1, 1, KAFKA_TS),
    ]
    decoded = decode(spark, rows, {PICKUP_ID: PICKUP}, PICKUP)

    bronze = bronze_rows(decoded)
    assert bronze.columns == field_names(PICKUP) + KAFKA_COLUMNS
    assert_exact(
        spark,
        bronze,
        [
            (132, at(7, 0, 0), "pickup_locations", 0, 0, KAFKA_TS, PICKUP_ID),
            (1, at(7, 10, 0, 1), "pickup_locations", 1, 0, KAFKA_TS, PICKUP_ID),
        ],
        f"{PICKUP_DDL}, {KAFKA_DDL}",
    )

    dead = dead_letter_rows(decoded, F.lit(FAILED_AT))
    [error] = [r.error for r in dead.select("error").collect()]
    assert f"Avro body ({len(cut) - 5} bytes) cannot be decoded with writer schema id {PICKUP_ID}" in error
    assert_exact(
        spark,
        dead,
        [("pickup_locations", 1, 1, b"key3", cut, error, FAILED_AT)],
        DEAD_LETTER_DDL,
    )


# ---------------------------------------------------------------- decoding: dead letters

_RIDE_BODY = avro_body(RIDE_V1, ride_v1(congestion_surcharge=None))
_FULL_FRAME = confluent_frame(RIDE_V1_ID, _RIDE_BODY)
_TRUNCATED = _FULL_FRAME[: 5 + len(_RIDE_BODY) // 2]

BAD_FRAMES = [
    # (case id, key, value, distinctive substring of the error)
    ("wrong_magic_byte", b"k", confluent_frame(RIDE_V1_ID, _RIDE_BODY, magic=1), "wrong magic byte 1"),
    ("magic_byte_255", b"k", confluent_frame(RIDE_V1_ID, _RIDE_BODY, magic=0xFF), "wrong magic byte 255"),
    ("too_short_4_bytes", b"k", b"\x00\x00\x00\x01", "message value is 4 bytes"),
    ("header_without_body", b"k", b"\x00\x00\x00\x00\x01", "message value is 5 bytes"),
    ("empty_value", b"k", b"", "message value is 0 bytes"),
    ("null_value_tombstone", b"\x00\x00\x00\x00\x03\x02", None, "tombstone"),
    ("unknown_schema_id", b"k", confluent_frame(99, _RIDE_BODY), "unknown schema id 99"),
    (
        "truncated_body",
        None,
        _TRUNCATED,
        f"Avro body ({len(_TRUNCATED) - 5} bytes) cannot be decoded with writer schema id {RIDE_V1_ID}",
    ),
    (
        "truncated_by_one_byte",
        b"k",
        _FULL_FRAME[:-1],
        f"Avro body ({len(_RIDE_BODY) - 1} bytes) cannot be decoded with writer schema id {RIDE_V1_ID}",
    ),
    (
        "garbage_body",
        b"k",
        confluent_frame(RIDE_V1_ID, b"garbage!"),
        "Avro body (8 bytes) cannot be decoded with writer schema id 1",
    ),
    (
        "garbage_body_v2",
        b"\xff\xfe",
        confluent_frame(RIDE_V2_ID, b"\xff" * 12),
        "Avro body (12 bytes) cannot be decoded with writer schema id 2",
    ),
    (
        "trailing_bytes",
        b"k",
        _FULL_FRAME + b"\x00\x01\x02",
        f"Avro body ({len(_RIDE_BODY) + 3} bytes) is longer than the record it holds ({len(_RIDE_BODY)} bytes with "
        f"writer schema id {RIDE_V1_ID}): 3 trailing byte(s); a frame carries exactly one record",
    ),
    (
        "two_records_in_one_frame",
        b"k",
        _FULL_FRAME + _RIDE_BODY,
        f"Avro body ({2 * len(_RIDE_BODY)} bytes) is longer than the record it holds ({len(_RIDE_BODY)} bytes with "
        f"writer schema id {RIDE_V1_ID}): {len(_RIDE_BODY)} trailing byte(s)",
    ),
]
GOOD_VALUES = [
    confluent_frame(RIDE_V1_ID, avro_body(RIDE_V1, ride_v1(vendor_id=v, total_amount=t)))
    for v, t in ((1, 10.0), (2, 20.0), (None, 30.0))
] + [confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, ride_v2(vendor_id=2, total_amount=40.0)))]
GOOD_COUNT = len(GOOD_VALUES)


@pytest.fixture(scope="module")
def mixed_batch(spark):
    """Good rides at offsets 0..3 (partition 0), then every bad frame of BAD_FRAMES (partition 1)."""
    rows = [(b"good%d" % i, value, "rides", 0, i, KAFKA_TS) for i, value in enumerate(GOOD_VALUES)]
    rows += [(key, value, "rides", 1, GOOD_COUNT + i, KAFKA_TS) for i, (_, key, value, _) in enumerate(BAD_FRAMES)]
    decoded = decode(spark, rows, RIDE_WRITERS, RIDE_V2)
    before = dt.datetime.now(UTC).replace(tzinfo=None) - dt.timedelta(seconds=1)
    dead = dead_letter_rows(decoded)  # default failed_at: current time
    assert dead.columns == DEAD_LETTER_COLUMNS
    dead_rows = {r.kafka_offset: r for r in dead.collect()}
    after = dt.datetime.now(UTC).replace(tzinfo=None) + dt.timedelta(seconds=1)
    bronze = bronze_rows(decoded).select("kafka_partition", "kafka_offset", "vendor_id", "total_amount", "schema_id")
    return {
        "rows": rows,
        "bronze": sorted(tuple(r) for r in bronze.collect()),
        "dead": dead_rows,
        "window": (before, after),
    }


@pytest.mark.parametrize(
    ("index", "key", "value", "error_text"),
    [(i, *case[1:]) for i, case in enumerate(BAD_FRAMES)],
    ids=[case[0] for case in BAD_FRAMES],
)
def test_bad_frame_goes_to_dead_letters_with_raw_bytes_and_reason(mixed_batch, index, key, value, error_text):
    row = mixed_batch["dead"][GOOD_COUNT + index]
    assert (row.kafka_topic, row.kafka_partition) == ("rides", 1)
    assert (None if row.raw_key is None else bytes(row.raw_key)) == key
    assert (None if row.raw_value is None else bytes(row.raw_value)) == value
    assert error_text in row.error, row.error


def test_good_frames_beside_bad_ones_reach_bronze_and_every_record_is_bronze_or_dead(mixed_batch):
    assert mixed_batch["bronze"] == [
        (0, 0, 1, 10.0, RIDE_V1_ID),
        (0, 1, 2, 20.0, RIDE_V1_ID),
        (0, 2, None, 30.0, RIDE_V1_ID),
        (0, 3, 2, 40.0, RIDE_V2_ID),
    ]
    dead_offsets = sorted(mixed_batch["dead"])
    assert dead_offsets == list(range(GOOD_COUNT, GOOD_COUNT + len(BAD_FRAMES)))
    assert len(mixed_batch["bronze"]) + len(dead_offsets) == len(mixed_batch["rows"])


def test_dead_letter_failed_at_defaults_to_current_time(mixed_batch):
    before, after = mixed_batch["window"]
    assert all(before <= row.failed_at <= after for row in mixed_batch["dead"].values())


def test_schema_id_above_int_range_goes_to_dead_letters_instead_of_failing_the_batch(spark):
    # Header bytes 00 FF FF FF FF: magic byte fine, schema id 4294967295 (no registry id is that large).
    # One such message must be dead-lettered as an unknown schema id, not abort the whole micro-batch.
    bad = b"\x00\xff\xff\xff\xff" + _RIDE_BODY
    rows = [(b"good", GOOD_RIDE_FRAME, "rides", 0, 0, KAFKA_TS), (b"bad", bad, "rides", 0, 1, KAFKA_TS)]
    decoded = decode(spark, rows, RIDE_WRITERS, RIDE_V2)
    [dead] = dead_letter_rows(decoded, F.lit(FAILED_AT)).collect()
    assert (dead.kafka_offset, bytes(dead.raw_key), bytes(dead.raw_value)) == (1, b"bad", bad)
    assert "unknown schema id" in dead.error, dead.error
    assert [r.kafka_offset for r in bronze_rows(decoded).select("kafka_offset").collect()] == [0]


def test_no_known_writer_schema_sends_every_record_to_dead_letters(spark):
    bad = confluent_frame(RIDE_V1_ID, _RIDE_BODY, magic=1)
    v2_frame = confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, ride_v2()))
    rows = [
        (b"a", GOOD_RIDE_FRAME, "rides", 0, 0, KAFKA_TS),
        (b"b", v2_frame, "rides", 0, 1, KAFKA_TS),
        (b"c", bad, "rides", 0, 2, KAFKA_TS),
    ]
    decoded = decode(spark, rows, {}, RIDE_V2)

    bronze = bronze_rows(decoded)
    assert bronze.columns == field_names(RIDE_V2) + KAFKA_COLUMNS
    assert bronze.count() == 0
    dead = sorted(dead_letter_rows(decoded, F.lit(FAILED_AT)).collect(), key=lambda r: r.kafka_offset)
    assert [(r.kafka_offset, bytes(r.raw_key), bytes(r.raw_value), r.failed_at) for r in dead] == [
        (0, b"a", GOOD_RIDE_FRAME, naive(FAILED_AT)),
        (1, b"b", v2_frame, naive(FAILED_AT)),
        (2, b"c", bad, naive(FAILED_AT)),
    ]
    assert "unknown schema id 1" in dead[0].error
    assert "unknown schema id 2" in dead[1].error
    assert "wrong magic byte 1" in dead[2].error


# ---------------------------------------------------------------- decoding: trailing bytes


def trailing_error(body_length: int, record_length: int, schema_id: int) -> str:
    return (
        f"Avro body ({body_length} bytes) is longer than the record it holds ({record_length} bytes with writer "
        f"schema id {schema_id}): {body_length - record_length} trailing byte(s); a frame carries exactly one record"
    )


# Values at the edges of Avro's encodings: zig-zag varints change length at -64/63, -8192/8191, ...; strings
# are a varint length plus UTF-8 bytes (a multi-byte character counts its bytes); doubles are 8 bytes whatever
# the value; a union writes its branch index, then the value (nothing for null).
EDGE_RIDES = [
    ride_v1(vendor_id=63, passenger_count=-64, rate_code_id=64, payment_type=-65, store_and_fwd_flag=""),
    ride_v1(vendor_id=8191, passenger_count=-8192, rate_code_id=8192, payment_type=-8193, store_and_fwd_flag="Y"),
    ride_v1(
        vendor_id=2**31 - 1, passenger_count=-(2**31), rate_code_id=None, payment_type=None, store_and_fwd_flag=None
    ),
    ride_v1(pu_location_id=0, do_location_id=-1, store_and_fwd_flag="é" * 70, congestion_surcharge=None),
    ride_v1(total_amount=float("nan"), tip_amount=float("-inf"), fare_amount=-0.0, store_and_fwd_flag="N" * 200),
    ride_v1(
        pickup_datetime=dt.datetime(1970, 1, 1, tzinfo=UTC),
        dropoff_datetime=dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ),
    ride_v1(pickup_datetime=dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
]


# Reader v1 measures the v1 records from the payload it decoded (one pass); reader v2 decodes them again with v1.
@pytest.mark.parametrize("reader", [RIDE_V1, RIDE_V2], ids=["reader_is_writer", "reader_differs"])
def test_records_at_the_edges_of_each_encoding_are_good_and_the_same_with_trailing_bytes_are_dead(spark, reader):
    bodies = [avro_body(RIDE_V1, record) for record in EDGE_RIDES]
    # the edges really are edges: the bodies differ in length although every field is present in each
    assert len({len(body) for body in bodies}) >= 5
    rows = [(b"good", confluent_frame(RIDE_V1_ID, body), "rides", 0, i, KAFKA_TS) for i, body in enumerate(bodies)]
    extra = [b"\x00", b"\x02\x02", b"\xff" * 9]
    rows += [
        (b"bad", confluent_frame(RIDE_V1_ID, body + extra[i % 3]), "rides", 1, i, KAFKA_TS)
        for i, body in enumerate(bodies)
    ]
    decoded = decode(spark, rows, RIDE_WRITERS, reader)

    good = sorted((r.kafka_partition, r.kafka_offset) for r in bronze_rows(decoded).collect())
    assert good == [(0, i) for i in range(len(bodies))]
    dead = {r.kafka_offset: r for r in dead_letter_rows(decoded).collect()}
    assert sorted(dead) == list(range(len(bodies)))
    for i, body in enumerate(bodies):
        assert dead[i].kafka_partition == 1
        assert bytes(dead[i].raw_value) == confluent_frame(RIDE_V1_ID, body + extra[i % 3])
        assert dead[i].error == trailing_error(len(body) + len(extra[i % 3]), len(body), RIDE_V1_ID)


def test_trailing_bytes_are_found_whatever_the_reader_schema(spark):
    # v2 records read with reader v1 (the reader drops airport_fee) and v1 records read with reader v2 (the
    # reader adds it): the length is the writer's, so neither reader hides the trailing byte or invents one.
    v1_body = avro_body(RIDE_V1, ride_v1())
    v2_body = avro_body(RIDE_V2, ride_v2(airport_fee=1.25))
    rows = [
        (b"a", confluent_frame(RIDE_V1_ID, v1_body), "rides", 0, 0, KAFKA_TS),
        (b"b", confluent_frame(RIDE_V2_ID, v2_body), "rides", 0, 1, KAFKA_TS),
        (b"c", confluent_frame(RIDE_V1_ID, v1_body + b"\x00"), "rides", 0, 2, KAFKA_TS),
        (b"d", confluent_frame(RIDE_V2_ID, v2_body + b"\x00"), "rides", 0, 3, KAFKA_TS),
    ]
    for reader in (RIDE_V1, RIDE_V2):
        decoded = decode(spark, rows, RIDE_WRITERS, reader)
        assert sorted(r.kafka_offset for r in bronze_rows(decoded).collect()) == [0, 1]
        errors = {r.kafka_offset: r.error for r in dead_letter_rows(decoded).collect()}
        assert errors == {
            2: trailing_error(len(v1_body) + 1, len(v1_body), RIDE_V1_ID),
            3: trailing_error(len(v2_body) + 1, len(v2_body), RIDE_V2_ID),
        }


def test_a_pickup_with_one_trailing_zero_byte_is_a_dead_letter(spark):
    body = avro_body(PICKUP, {"pu_location_id": 132, "pickup_datetime": at(7, 0, 0)})
    rows = [(b"p", confluent_frame(PICKUP_ID, body + b"\x00"), "pickup_locations", 0, 0, KAFKA_TS)]
    decoded = decode(spark, rows, {PICKUP_ID: PICKUP}, PICKUP)
    assert bronze_rows(decoded).count() == 0
    [dead] = dead_letter_rows(decoded, F.lit(FAILED_AT)).collect()
    assert dead.error == trailing_error(len(body) + 1, len(body), PICKUP_ID)


# ---------------------------------------------------------------- vendor_counts


def test_vendor_counts_counts_rides_per_vendor_including_null_vendor(spark):
    rides = spark.createDataFrame(
        [(1, 10.0), (2, 5.0), (1, 3.0), (None, 1.0), (1, 2.0), (None, 4.0), (7, 0.0)],
        "vendor_id int, total_amount double",
    )
    assert_exact(spark, vendor_counts(rides), [(1, 3), (2, 1), (None, 2), (7, 1)], "vendor_id int, trip_count long")


def test_vendor_counts_of_no_rides_is_empty(spark):
    rides = spark.createDataFrame([], "vendor_id int, total_amount double")
    assert_exact(spark, vendor_counts(rides), [], "vendor_id int, trip_count long")


# ---------------------------------------------------------------- ride_window_aggregates

RIDES_DDL = "vendor_id int, pickup_datetime timestamp, total_amount double"


def test_window_aggregates_split_per_vendor_with_ride_on_boundary_in_later_window(spark):
    rides = spark.createDataFrame(
        [
            (1, at(0, 0, 0), 10.0),
            (1, at(0, 9, 59, 999999), 2.5),
            (1, at(0, 10, 0), 4.0),  # exactly on the boundary: window [00:10, 00:20)
            (2, at(0, 5, 0), 7.25),
            (2, at(0, 19, 59), 1.0),
            (None, at(0, 15, 0), 3.0),
            (None, at(0, 20, 0), 5.5),  # boundary again: [00:20, 00:30)
        ],
        RIDES_DDL,
    )
    assert_exact(
        spark,
        ride_window_aggregates(rides, "600 seconds"),
        [
            (at(0, 0), at(0, 10), 1, 2, 12.5, at(0, 9, 59, 999999)),
            (at(0, 10), at(0, 20), 1, 1, 4.0, at(0, 10, 0)),
            (at(0, 0), at(0, 10), 2, 1, 7.25, at(0, 5, 0)),
            (at(0, 10), at(0, 20), 2, 1, 1.0, at(0, 19, 59)),
            (at(0, 10), at(0, 20), None, 1, 3.0, at(0, 15, 0)),
            (at(0, 20), at(0, 30), None, 1, 5.5, at(0, 20, 0)),
        ],
        WINDOW_DDL,
    )


def test_window_aggregates_windows_are_aligned_to_the_epoch_not_to_the_hour_or_first_ride(spark):
    duration = 420  # does not divide an hour: epoch-aligned windows start at odd minutes
    pickups = [
        (1, at(6, 3, 17), 1.5),
        (1, at(6, 4, 0), 2.0),
        (1, at(6, 7, 0), 3.0),
        (2, at(6, 3, 17), 4.0),
        (2, at(6, 13, 1, 500000), 8.0),
        (1, at(6, 59, 59), 0.5),
    ]
    groups: dict[tuple, list] = defaultdict(list)
    for vendor, pickup, total in pickups:
        epoch = int(pickup.timestamp())
        start = dt.datetime.fromtimestamp(epoch - epoch % duration, UTC)
        groups[(start, vendor)].append((pickup, total))
    expected_rows = [
        (
            start,
            start + dt.timedelta(seconds=duration),
            vendor,
            len(items),
            sum(t for _, t in items),
            max(p for p, _ in items),
        )
        for (start, vendor), items in groups.items()
    ]
    # none of these windows is aligned to the hour or to the first ride (06:03:17)
    assert all((start - start.replace(minute=0, second=0)).total_seconds() % duration != 0 for start, _ in groups)
    assert all((start - at(6, 3, 17)).total_seconds() % duration != 0 for start, _ in groups)
    actual = ride_window_aggregates(spark.createDataFrame(pickups, RIDES_DDL), f"{duration} seconds")
    assert_exact(spark, actual, expected_rows, WINDOW_DDL)


# ---------------------------------------------------------------- late_ride_counts

LATE_DDL = "window_start timestamp, window_end timestamp, vendor_id int, late_trip_count long"
TEN_MIN = dt.timedelta(minutes=10)


def _window_rows(spark, rows):
    """Rows (window start, vendor, trip_count) in the shape of ride_window_aggregates' output."""
    return spark.createDataFrame(
        [(start, start + TEN_MIN, vendor, count, 1.0 * count, start) for start, vendor, count in rows],
        WINDOW_DDL,
    )


def test_late_ride_counts_reports_missing_and_undercounted_windows_null_safely(spark):
    w1, w2, w3, w4 = at(0, 0), at(0, 10), at(0, 20), at(0, 30)
    all_rides = _window_rows(
        spark,
        [
            (w1, 1, 5),  # on time 3 -> 2 late
            (w1, 2, 2),  # on time 2 -> nothing
            (w2, None, 4),  # on time (null vendor) 1 -> 3 late
            (w2, 1, 1),  # on time 1 -> nothing
            (w3, 2, 1),  # missing from aggregates -> 1 late
            (w3, None, 2),  # missing from aggregates -> 2 late
            (w4, None, 3),  # on time (null vendor) 3 -> nothing
        ],
    )
    aggregates = _window_rows(
        spark,
        [(w1, 1, 3), (w1, 2, 2), (w2, None, 1), (w2, 1, 1), (w4, None, 3), (w4, 1, 9)],  # (w4, 1) only here: no row
    )
    actual = late_ride_counts(all_rides, aggregates)
    assert actual.columns == ["window_start", "window_end", "vendor_id", "late_trip_count"]
    assert_exact(
        spark,
        actual,
        [(w1, w1 + TEN_MIN, 1, 2), (w2, w2 + TEN_MIN, None, 3), (w3, w3 + TEN_MIN, 2, 1), (w3, w3 + TEN_MIN, None, 2)],
        LATE_DDL,
    )


def test_late_ride_counts_null_vendor_is_not_matched_with_another_vendor(spark):
    w = at(1, 0)
    all_rides = _window_rows(spark, [(w, None, 2), (w, 1, 2)])
    aggregates = _window_rows(spark, [(w, 1, 2)])  # vendor 1 complete, null vendor absent
    assert_exact(spark, late_ride_counts(all_rides, aggregates), [(w, w + TEN_MIN, None, 2)], LATE_DDL)


def test_late_ride_counts_equal_counts_give_no_rows(spark):
    rows = [(at(0, 0), 1, 3), (at(0, 0), None, 1), (at(0, 10), 2, 4)]
    assert_exact(spark, late_ride_counts(_window_rows(spark, rows), _window_rows(spark, rows)), [], LATE_DDL)


def test_window_late_counts_gives_every_window_asked_for_with_zero_when_nothing_is_late(spark):
    w1, w2 = at(2, 0), at(2, 10)
    # the rides of two windows per vendor, as a reconcile recounts the windows new rides fall in
    all_rides = _window_rows(spark, [(w1, 1, 4), (w1, None, 1), (w2, 2, 3)])
    # the table: (w1, 1) counted 1 on time, (w1, null) all on time, (w2, 2) absent (late only); (w2, 1) not asked
    aggregates = _window_rows(spark, [(w1, 1, 1), (w1, None, 1), (w2, 1, 7)])
    assert_exact(
        spark,
        window_late_counts(all_rides, aggregates),
        [(w1, w1 + TEN_MIN, 1, 3), (w1, w1 + TEN_MIN, None, 0), (w2, w2 + TEN_MIN, 2, 3)],
        LATE_DDL,
    )


# ---------------------------------------------------------------- ride_pickup_joins

JOIN_RIDES_DDL = (
    "vendor_id int, pickup_datetime timestamp, dropoff_datetime timestamp, pu_location_id int, "
    "do_location_id int, total_amount double, kafka_partition int, kafka_offset long"
)
JOIN_PICKUPS_DDL = "pu_location_id int, pickup_datetime timestamp, kafka_partition int, kafka_offset long"
JOIN_OUT_DDL = "vendor_id int, location_id int, pickup_datetime timestamp, dropoff_datetime timestamp"
JOIN_OUT_KAFKA_DDL = (
    f"{JOIN_OUT_DDL}, ride_kafka_partition int, ride_kafka_offset long, "
    "pickup_kafka_partition int, pickup_kafka_offset long"
)

DROP = at(12, 0, 0)
JOIN_RIDES = [
    # vendor, pickup, dropoff, pu_location, do_location, total, partition, offset
    (1, at(11, 40), DROP, 7, 100, 20.0, 0, 10),
    (2, at(11, 55), at(12, 5), 100, 7, 9.0, 1, 3),
    (None, at(12, 1), at(12, 20), 300, 100, 5.0, 0, 11),
]
JOIN_PICKUPS = [
    # pu_location, pickup time, partition, offset
    (100, DROP - dt.timedelta(minutes=10), 0, 1),  # exactly 10 min before ride 1: joins
    (100, DROP - dt.timedelta(minutes=10, seconds=1), 0, 2),  # 10 min 1 s before: no
    (100, DROP + dt.timedelta(minutes=10), 1, 1),  # exactly 10 min after ride 1: joins (and ride 3: 10 min before)
    (100, DROP + dt.timedelta(minutes=10, seconds=1), 1, 2),  # 10:01 after ride 1: no; 9:59 before ride 3: joins
    (100, DROP, 0, 3),  # same instant as ride 1's dropoff
    (7, DROP, 2, 1),  # zone 7 = ride 1's pickup zone: no match for ride 1; ride 2 drops off at 7, 5 min later
    (101, DROP, 2, 2),  # no ride drops off at 101
    (300, at(12, 1), 2, 3),  # ride 3 picked up at 300 but dropped off at 100: no match
]


def test_pickup_join_bound_is_inclusive_before_and_after_dropoff(spark):
    rides = spark.createDataFrame([JOIN_RIDES[0]], JOIN_RIDES_DDL)
    pickups = spark.createDataFrame(JOIN_PICKUPS[:5], JOIN_PICKUPS_DDL)
    assert_exact(
        spark,
        ride_pickup_joins(rides, pickups, "600 seconds"),
        [
            (1, 100, at(11, 50, 0), DROP, 0, 10, 0, 1),
            (1, 100, at(12, 10, 0), DROP, 0, 10, 1, 1),
            (1, 100, DROP, DROP, 0, 10, 0, 3),
        ],
        JOIN_OUT_KAFKA_DDL,
    )


@pytest.mark.parametrize("max_gap", ["600 seconds", "10 minutes"])
def test_pickup_join_matches_dropoff_location_one_row_per_pair(spark, max_gap):
    rides = spark.createDataFrame(JOIN_RIDES, JOIN_RIDES_DDL)
    pickups = spark.createDataFrame(JOIN_PICKUPS, JOIN_PICKUPS_DDL)
    expected_rows = [
        (vendor, location, p_time, d_time, r_part, r_off, p_part, p_off)
        for vendor, _, d_time, _, do_location, _, r_part, r_off in JOIN_RIDES
        for location, p_time, p_part, p_off in JOIN_PICKUPS
        if do_location == location and abs(p_time - d_time) <= TEN_MIN
    ]
    assert len(expected_rows) == 6  # by hand: ride 1 -> 3 pickups, ride 2 -> 1, ride 3 (null vendor) -> 2
    actual = ride_pickup_joins(rides, pickups, max_gap)
    assert actual.columns == [
        "vendor_id",
        "location_id",
        "pickup_datetime",
        "dropoff_datetime",
        "ride_kafka_partition",
        "ride_kafka_offset",
        "pickup_kafka_partition",
        "pickup_kafka_offset",
    ]
    assert_exact(spark, actual, expected_rows, JOIN_OUT_KAFKA_DDL)


def test_pickup_join_ride_matching_two_pickups_gives_two_rows_without_kafka_columns(spark):
    rides = spark.createDataFrame(
        [(3, at(9, 0), at(9, 30), 50, 60, 1.0)],
        "vendor_id int, pickup_datetime timestamp, dropoff_datetime timestamp, pu_location_id int, "
        "do_location_id int, total_amount double",
    )
    pickups = spark.createDataFrame(
        [(60, at(9, 25)), (60, at(9, 25)), (60, at(9, 41)), (50, at(9, 30))],
        "pu_location_id int, pickup_datetime timestamp",
    )
    actual = ride_pickup_joins(rides, pickups, "600 seconds")
    assert actual.columns == ["vendor_id", "location_id", "pickup_datetime", "dropoff_datetime"]
    assert_exact(spark, actual, [(3, 60, at(9, 25), at(9, 30)), (3, 60, at(9, 25), at(9, 30))], JOIN_OUT_DDL)


def test_observed_metrics_are_summed_over_batches_in_both_progress_shapes() -> None:
    """In-process progress JSON has {metric: value}; Spark Connect's has {values, schema}."""
    from streaming_pipeline.engine.streams import StreamRunReport

    report = StreamRunReport("q")
    schema = {"type": "struct", "fields": [{"name": "unknown_pickup_zones"}, {"name": "unknown_dropoff_zones"}]}
    report.add({"numInputRows": 5, "observedMetrics": {"enrichment": {"values": [2, 0], "schema": schema}}})
    report.add(
        {"numInputRows": 7, "observedMetrics": {"enrichment": {"unknown_pickup_zones": 1, "unknown_dropoff_zones": 3}}}
    )
    assert report.observed_metrics("enrichment") == {"unknown_pickup_zones": 3, "unknown_dropoff_zones": 3}
    assert report.observed_metrics("other") == {}
    assert (report.input_rows, report.batches) == (12, 2)
