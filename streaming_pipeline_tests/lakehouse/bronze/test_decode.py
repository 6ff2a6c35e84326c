"""Unit tests of `bronze.decode` (Confluent frames -> bronze rows and dead letters) on small static DataFrames.

Every expected row is written by hand or computed in plain Python here, never with the code under test.
Inputs use timezone-aware UTC datetimes; Spark (session time zone UTC) returns naive UTC datetimes.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from pathlib import Path

import fastavro
import pytest
from pyspark.sql import functions as F

from streaming_pipeline.lakehouse.bronze.decode import (
    bronze_rows,
    dead_letter_rows,
    decode_avro_frames,
    reader_schema_of,
    split_confluent_frames,
)
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS
from streaming_pipeline.lakehouse.tables import KAFKA_COLUMN_NAMES as KAFKA_COLUMNS
from streaming_pipeline_tests.dataframe_helpers import assert_exact, at, naive

DEAD_LETTER_COLUMNS = DEAD_LETTER_RECORDS.column_names

UTC = dt.UTC
SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas"
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

FAILED_AT = dt.datetime(2024, 3, 10, 12, 0, 0, tzinfo=UTC)
KAFKA_TS = dt.datetime(2024, 3, 10, 9, 30, 0, 123000, tzinfo=UTC)


# ---------------------------------------------------------------- helpers


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


# A v3 that drops airport_fee again and makes trip_distance optional, as a later producer might register it.
RIDE_V3 = json.dumps(
    {
        **json.loads(RIDE_V1),
        "fields": [
            {**f, "type": ["null", "double"], "default": None} if f["name"] == "trip_distance" else f
            for f in json.loads(RIDE_V1)["fields"]
        ],
    }
)
RIDE_V3_ID = 3


def test_the_reader_schema_is_the_latest_version_itself_when_it_has_every_field():
    assert reader_schema_of(RIDE_WRITERS, RIDE_V2) == RIDE_V2
    assert reader_schema_of({RIDE_V1_ID: RIDE_V1}, RIDE_V1) == RIDE_V1


def test_the_reader_schema_keeps_a_field_a_later_version_dropped_as_a_nullable_field_at_the_end():
    reader = json.loads(reader_schema_of({**RIDE_WRITERS, RIDE_V3_ID: RIDE_V3}, RIDE_V3))
    v3_fields = json.loads(RIDE_V3)["fields"]
    [v2_fee] = [f for f in json.loads(RIDE_V2)["fields"] if f["name"] == "airport_fee"]
    assert reader["fields"][: len(v3_fields)] == v3_fields  # the latest's own fields, as it has them
    assert reader["fields"][len(v3_fields) :] == [
        {"name": "airport_fee", "doc": v2_fee["doc"], "type": ["null", "double"], "default": None}
    ]
    assert {k: v for k, v in reader.items() if k != "fields"} == {
        k: v for k, v in json.loads(RIDE_V3).items() if k != "fields"
    }


def test_a_required_field_that_a_later_version_dropped_becomes_nullable_in_the_reader_schema():
    v1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string"}]}
    v2 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}
    reader = json.loads(reader_schema_of({1: json.dumps(v1), 2: json.dumps(v2)}, json.dumps(v2)))
    # a keeps the latest's type; b comes back optional, since records of the latest version lack it
    assert reader["fields"] == [
        {"name": "a", "type": "long"},
        {"name": "b", "type": ["null", "string"], "default": None},
    ]


def test_records_of_every_version_decode_with_their_fields_when_the_latest_dropped_one(spark):
    """v1, v2 (adds airport_fee) and v3 (drops it): a v2 record produced after v3 keeps its fee, the others have
    none, and no record is a dead letter."""
    writers = {**RIDE_WRITERS, RIDE_V3_ID: RIDE_V3}
    r1, r2, r3 = ride_v1(vendor_id=1), ride_v2(vendor_id=2, airport_fee=6.25), ride_v1(vendor_id=1, trip_distance=None)
    rows = [
        (b"k1", confluent_frame(RIDE_V1_ID, avro_body(RIDE_V1, r1)), "rides", 0, 1, KAFKA_TS),
        (b"k2", confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, r2)), "rides", 0, 2, KAFKA_TS),
        (b"k3", confluent_frame(RIDE_V3_ID, avro_body(RIDE_V3, r3)), "rides", 0, 3, KAFKA_TS),
    ]
    decoded = decode(spark, rows, writers, reader_schema_of(writers, RIDE_V3))
    bronze = bronze_rows(decoded)
    assert bronze.columns == field_names(RIDE_V3) + ["airport_fee"] + KAFKA_COLUMNS
    got = sorted((r.kafka_offset, r.airport_fee, r.trip_distance, r.schema_id) for r in bronze.collect())
    assert got == [(1, None, 3.25, RIDE_V1_ID), (2, 6.25, 3.25, RIDE_V2_ID), (3, None, None, RIDE_V3_ID)]
    assert dead_letter_rows(decoded).count() == 0


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
