"""Unit tests of `streaming_pipeline.transformations` on small static DataFrames.

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

from streaming_pipeline.transformations import (
    DEAD_LETTER_COLUMNS,
    KAFKA_COLUMNS,
    bronze_rows,
    dead_letter_rows,
    decode_avro_frames,
    late_ride_counts,
    ride_pickup_joins,
    ride_window_aggregates,
    split_confluent_frames,
    vendor_counts,
)

UTC = dt.timezone.utc
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
    return decode_avro_frames(split_confluent_frames(kafka_records(spark, rows)), writers, reader)


def _sort_key(row) -> tuple:
    # None sorts first; every other value compares with values of its own column
    return tuple((value is not None, value if value is not None else 0) for value in row)


def assert_exact(actual, expected) -> None:
    """Same column names and types, same multiset of rows, values compared exactly (no tolerance).

    (pyspark.testing.assertDataFrameEqual imports pyspark.pandas, which fails with the installed pandas.)
    """
    assert [(f.name, f.dataType) for f in actual.schema] == [(f.name, f.dataType) for f in expected.schema]
    got = sorted((tuple(r) for r in actual.collect()), key=_sort_key)
    want = sorted((tuple(r) for r in expected.collect()), key=_sort_key)
    assert got == want


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
        vendor_id=None, passenger_count=None, rate_code_id=None, store_and_fwd_flag=None,
        payment_type=None, congestion_surcharge=None, pickup_datetime=at(23, 59, 59, 999999),
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
    expected = spark.createDataFrame(
        [
            expected_ride_row(r1, "rides", 0, 10, KAFKA_TS, RIDE_V1_ID),
            expected_ride_row(r2, "rides", 1, 7, ts2, RIDE_V2_ID),
            expected_ride_row(r3, "rides", 0, 11, KAFKA_TS, RIDE_V1_ID),
            expected_ride_row(r4, "rides", 1, 8, ts2, RIDE_V2_ID),
        ],
        f"{RIDE_V2_DDL}, {KAFKA_DDL}",
    )
    assert bronze.columns == field_names(RIDE_V2) + KAFKA_COLUMNS
    assert_exact(bronze, expected)
    # airport_fee: null for the v1 rows (no such field), the written value for v2 rows
    fees = sorted((r.kafka_offset, r.airport_fee) for r in bronze.select("kafka_offset", "airport_fee").collect())
    assert fees == [(7, 1.75), (8, None), (10, None), (11, None)]
    assert dead_letter_rows(decoded).count() == 0


def test_v2_record_decoded_with_reader_v1_drops_airport_fee(spark):
    record = ride_v2(airport_fee=4.5)
    rows = [(b"k", confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, record)), "rides", 3, 99, KAFKA_TS)]
    bronze = bronze_rows(decode(spark, rows, RIDE_WRITERS, RIDE_V1))
    assert bronze.columns == field_names(RIDE_V1) + KAFKA_COLUMNS
    row = bronze.collect()[0].asDict()
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
    frames = split_confluent_frames(kafka_records(spark, rows))
    got = sorted(
        (r.offset, r.schema_id, bytes(r.avro_body), r.frame_error)
        for r in frames.select("offset", "schema_id", "avro_body", "frame_error").collect()
    )
    assert got == [(0, 1, body, None), (1, 16909060, body, None), (2, 256, b"\x02", None)]


def test_pickup_frames_decode_to_bronze_and_truncated_pickup_goes_to_dead_letters(spark):
    p1 = {"pu_location_id": 132, "pickup_datetime": at(7, 0, 0)}
    p2 = {"pu_location_id": 1, "pickup_datetime": at(7, 10, 0, 1)}
    p3 = {"pu_location_id": 265, "pickup_datetime": at(7, 59, 59, 999999)}
    frame3 = confluent_frame(PICKUP_ID, avro_body(PICKUP, p3))
    cut = frame3[:-2]
    rows = [
        (b"\x00\x00\x00\x00\x03\x84\x02", confluent_frame(PICKUP_ID, avro_body(PICKUP, p1)), "pickup_locations", 0, 0, KAFKA_TS),
        (b"\x00\x00\x00\x00\x03\x02", confluent_frame(PICKUP_ID, avro_body(PICKUP, p2)), "pickup_locations", 1, 0, KAFKA_TS),
        (b"key3", cut, "pickup_locations", 1, 1, KAFKA_TS),
    ]
    decoded = decode(spark, rows, {PICKUP_ID: PICKUP}, PICKUP)

    bronze = bronze_rows(decoded)
    assert bronze.columns == field_names(PICKUP) + KAFKA_COLUMNS
    expected = spark.createDataFrame(
        [
            (132, at(7, 0, 0), "pickup_locations", 0, 0, KAFKA_TS, PICKUP_ID),
            (1, at(7, 10, 0, 1), "pickup_locations", 1, 0, KAFKA_TS, PICKUP_ID),
        ],
        f"{PICKUP_DDL}, {KAFKA_DDL}",
    )
    assert_exact(bronze, expected)

    dead = dead_letter_rows(decoded, F.lit(FAILED_AT)).collect()
    assert len(dead) == 1
    assert (dead[0].kafka_topic, dead[0].kafka_partition, dead[0].kafka_offset) == ("pickup_locations", 1, 1)
    assert bytes(dead[0].raw_key) == b"key3" and bytes(dead[0].raw_value) == cut
    assert f"Avro body ({len(cut) - 5} bytes) cannot be decoded with writer schema id {PICKUP_ID}" in dead[0].error


# ---------------------------------------------------------------- decoding: dead letters

_RIDE_BODY = avro_body(RIDE_V1, ride_v1(congestion_surcharge=None))
_TRUNCATED = confluent_frame(RIDE_V1_ID, _RIDE_BODY)[: 5 + len(_RIDE_BODY) // 2]

BAD_FRAMES = [
    # (id, key, value, distinctive substring of the error)
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
        confluent_frame(RIDE_V1_ID, _RIDE_BODY)[:-1],
        f"Avro body ({len(_RIDE_BODY) - 1} bytes) cannot be decoded with writer schema id {RIDE_V1_ID}",
    ),
    ("garbage_body", b"k", confluent_frame(RIDE_V1_ID, b"garbage!"), "Avro body (8 bytes) cannot be decoded with writer schema id 1"),
    (
        "garbage_body_v2",
        b"\xff\xfe",
        confluent_frame(RIDE_V2_ID, b"\xff" * 12),
        "Avro body (12 bytes) cannot be decoded with writer schema id 2",
    ),
    # A schema id whose top bit is set (e.g. 0xFFFFFFFF) is not a registry id: it is unknown, and must
    # not fail the whole batch.
    ("schema_id_above_int_range", b"k", b"\x00\xff\xff\xff\xff" + _RIDE_BODY, "unknown schema id"),
]


@pytest.mark.parametrize(
    ("key", "value", "error_text"), [case[1:] for case in BAD_FRAMES], ids=[case[0] for case in BAD_FRAMES]
)
def test_bad_frame_goes_to_dead_letters_with_raw_bytes_and_reason(spark, key, value, error_text):
    rows = [
        (b"good", GOOD_RIDE_FRAME, "rides", 0, 41, KAFKA_TS),
        (key, value, "rides", 2, 42, KAFKA_TS),
    ]
    decoded = decode(spark, rows, RIDE_WRITERS, RIDE_V2)

    dead = dead_letter_rows(decoded, F.lit(FAILED_AT))
    assert dead.columns == DEAD_LETTER_COLUMNS
    got = dead.collect()
    assert len(got) == 1
    row = got[0]
    assert (row.kafka_topic, row.kafka_partition, row.kafka_offset, row.failed_at) == (
        "rides", 2, 42, naive(FAILED_AT),
    )
    assert (None if row.raw_key is None else bytes(row.raw_key)) == key
    assert (None if row.raw_value is None else bytes(row.raw_value)) == value
    assert error_text in row.error, row.error

    good = bronze_rows(decoded).select("kafka_partition", "kafka_offset", "vendor_id", "schema_id").collect()
    assert [tuple(r) for r in good] == [(0, 41, 1, RIDE_V1_ID)]


def test_every_input_record_is_either_bronze_or_dead_letter(spark):
    good_frames = [
        confluent_frame(RIDE_V1_ID, avro_body(RIDE_V1, ride_v1(vendor_id=v))) for v in (1, 2, None)
    ] + [confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, ride_v2(vendor_id=2)))]
    bad_frames = [value for _, _, value, _ in BAD_FRAMES if value is None or value[1:5] != b"\xff\xff\xff\xff"]
    values = good_frames + bad_frames
    rows = [(b"k%d" % i, v, "rides", i % 2, i, KAFKA_TS) for i, v in enumerate(values)]
    decoded = decode(spark, rows, RIDE_WRITERS, RIDE_V2)

    bronze_offsets = sorted(r.kafka_offset for r in bronze_rows(decoded).select("kafka_offset").collect())
    dead = dead_letter_rows(decoded, F.lit(FAILED_AT))
    expected_dead = spark.createDataFrame(
        [
            ("rides", i % 2, i, b"k%d" % i, v)
            for i, v in enumerate(values)
            if i >= len(good_frames)
        ],
        "kafka_topic string, kafka_partition int, kafka_offset long, raw_key binary, raw_value binary",
    )
    assert bronze_offsets == list(range(len(good_frames)))
    assert_exact(dead.drop("error", "failed_at"), expected_dead)
    assert len(bronze_offsets) + dead.count() == len(rows)
    assert dead.where(F.col("error").isNull() | (F.col("error") == "")).count() == 0


def test_no_known_writer_schema_sends_every_record_to_dead_letters(spark):
    bad = confluent_frame(RIDE_V1_ID, _RIDE_BODY, magic=1)
    rows = [
        (b"a", GOOD_RIDE_FRAME, "rides", 0, 0, KAFKA_TS),
        (b"b", confluent_frame(RIDE_V2_ID, avro_body(RIDE_V2, ride_v2())), "rides", 0, 1, KAFKA_TS),
        (b"c", bad, "rides", 0, 2, KAFKA_TS),
    ]
    decoded = decode(spark, rows, {}, RIDE_V2)

    bronze = bronze_rows(decoded)
    assert bronze.columns == field_names(RIDE_V2) + KAFKA_COLUMNS
    assert bronze.count() == 0
    dead = sorted(dead_letter_rows(decoded, F.lit(FAILED_AT)).collect(), key=lambda r: r.kafka_offset)
    assert [(r.kafka_offset, bytes(r.raw_key), bytes(r.raw_value)) for r in dead] == [
        (0, b"a", GOOD_RIDE_FRAME),
        (1, b"b", rows[1][1]),
        (2, b"c", bad),
    ]
    assert "unknown schema id 1" in dead[0].error
    assert "unknown schema id 2" in dead[1].error
    assert "wrong magic byte 1" in dead[2].error


def test_dead_letter_failed_at_defaults_to_current_time(spark):
    before = dt.datetime.now(UTC).replace(tzinfo=None) - dt.timedelta(seconds=1)
    rows = [(b"k", b"\x01\x00\x00\x00\x01\x02\x03", "rides", 0, 0, KAFKA_TS)]
    got = dead_letter_rows(decode(spark, rows, RIDE_WRITERS, RIDE_V2)).collect()
    after = dt.datetime.now(UTC).replace(tzinfo=None) + dt.timedelta(seconds=1)
    assert len(got) == 1
    assert before <= got[0].failed_at <= after


# ---------------------------------------------------------------- vendor_counts


def test_vendor_counts_counts_rides_per_vendor_including_null_vendor(spark):
    rides = spark.createDataFrame(
        [(1, 10.0), (2, 5.0), (1, 3.0), (None, 1.0), (1, 2.0), (None, 4.0), (7, 0.0)],
        "vendor_id int, total_amount double",
    )
    expected = spark.createDataFrame([(1, 3), (2, 1), (None, 2), (7, 1)], "vendor_id int, trip_count long")
    assert_exact(vendor_counts(rides), expected)


def test_vendor_counts_of_no_rides_is_empty(spark):
    rides = spark.createDataFrame([], "vendor_id int, total_amount double")
    assert vendor_counts(rides).count() == 0


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
    expected = spark.createDataFrame(
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
    actual = ride_window_aggregates(rides, "600 seconds")
    assert actual.columns == expected.columns
    assert_exact(actual, expected)


def test_window_aggregates_windows_are_aligned_to_the_epoch_not_to_the_first_ride(spark):
    # 420 s does not divide an hour, so epoch alignment differs from hour or first-ride alignment.
    duration = 420
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
        (start, start + dt.timedelta(seconds=duration), vendor, len(items), sum(t for _, t in items), max(p for p, _ in items))
        for (start, vendor), items in groups.items()
    ]
    # the windows here are not aligned to the hour (3600 is not a multiple of 420)
    assert all((start - start.replace(minute=0, second=0)).total_seconds() % duration != 0 for start, _ in groups)
    actual = ride_window_aggregates(spark.createDataFrame(pickups, RIDES_DDL), f"{duration} seconds")
    assert_exact(actual, spark.createDataFrame(expected_rows, WINDOW_DDL))


# ---------------------------------------------------------------- late_ride_counts

LATE_DDL = "window_start timestamp, window_end timestamp, vendor_id int, late_trip_count long"


def _window_rows(spark, rows):
    """Rows (window start, vendor, trip_count) in the shape of ride_window_aggregates' output."""
    return spark.createDataFrame(
        [(start, start + dt.timedelta(minutes=10), vendor, count, 1.0 * count, start) for start, vendor, count in rows],
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
        [
            (w1, 1, 3),
            (w1, 2, 2),
            (w2, None, 1),
            (w2, 1, 1),
            (w4, None, 3),
            (w4, 1, 9),  # a window only the aggregate has: no row
        ],
    )
    expected = spark.createDataFrame(
        [
            (w1, w1 + dt.timedelta(minutes=10), 1, 2),
            (w2, w2 + dt.timedelta(minutes=10), None, 3),
            (w3, w3 + dt.timedelta(minutes=10), 2, 1),
            (w3, w3 + dt.timedelta(minutes=10), None, 2),
        ],
        LATE_DDL,
    )
    actual = late_ride_counts(all_rides, aggregates)
    assert actual.columns == ["window_start", "window_end", "vendor_id", "late_trip_count"]
    assert_exact(actual, expected)


def test_late_ride_counts_null_vendor_is_not_matched_with_another_vendor(spark):
    w = at(1, 0)
    all_rides = _window_rows(spark, [(w, None, 2), (w, 1, 2)])
    aggregates = _window_rows(spark, [(w, 1, 2)])  # vendor 1 complete, null vendor absent
    expected = spark.createDataFrame([(w, w + dt.timedelta(minutes=10), None, 2)], LATE_DDL)
    assert_exact(late_ride_counts(all_rides, aggregates), expected)


def test_late_ride_counts_equal_counts_give_no_rows(spark):
    rows = [(at(0, 0), 1, 3), (at(0, 0), None, 1), (at(0, 10), 2, 4)]
    assert late_ride_counts(_window_rows(spark, rows), _window_rows(spark, rows)).count() == 0


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
    (100, DROP + dt.timedelta(minutes=10), 1, 1),  # exactly 10 min after: joins ride 1 (and ride 3: 10 min before)
    (100, DROP + dt.timedelta(minutes=10, seconds=1), 1, 2),  # 10:01 after ride 1: no; 9:59 before ride 3: joins
    (100, DROP, 0, 3),  # same instant as ride 1
    (7, DROP, 2, 1),  # location 7 = ride 1's pickup zone: no match for ride 1; ride 2 drops off at 7, 5 min gap
    (101, DROP, 2, 2),  # no ride drops off at 101
    (300, at(12, 1), 2, 3),  # ride 3 picked up at 300 but dropped off at 100: no match
]


def test_pickup_join_bound_is_inclusive_before_and_after_dropoff(spark):
    rides = spark.createDataFrame([JOIN_RIDES[0]], JOIN_RIDES_DDL)
    pickups = spark.createDataFrame(JOIN_PICKUPS[:5], JOIN_PICKUPS_DDL)
    expected = spark.createDataFrame(
        [
            (1, 100, at(11, 50, 0), DROP, 0, 10, 0, 1),
            (1, 100, at(12, 10, 0), DROP, 0, 10, 1, 1),
            (1, 100, DROP, DROP, 0, 10, 0, 3),
        ],
        JOIN_OUT_KAFKA_DDL,
    )
    assert_exact(ride_pickup_joins(rides, pickups, "600 seconds"), expected)


@pytest.mark.parametrize("max_gap", ["600 seconds", "10 minutes"])
def test_pickup_join_matches_dropoff_location_one_row_per_pair(spark, max_gap):
    rides = spark.createDataFrame(JOIN_RIDES, JOIN_RIDES_DDL)
    pickups = spark.createDataFrame(JOIN_PICKUPS, JOIN_PICKUPS_DDL)
    gap = dt.timedelta(minutes=10)
    expected_rows = [
        (vendor, loc, p_time, d_time, r_part, r_off, p_part, p_off)
        for vendor, _, d_time, _, do_loc, _, r_part, r_off in JOIN_RIDES
        for loc, p_time, p_part, p_off in JOIN_PICKUPS
        if do_loc == loc and abs(p_time - d_time) <= gap
    ]
    # by hand: ride 1 -> 3 pickups, ride 2 -> 1, ride 3 (null vendor) -> 2
    assert len(expected_rows) == 6
    actual = ride_pickup_joins(rides, pickups, max_gap)
    assert actual.columns == [
        "vendor_id", "location_id", "pickup_datetime", "dropoff_datetime",
        "ride_kafka_partition", "ride_kafka_offset", "pickup_kafka_partition", "pickup_kafka_offset",
    ]
    assert_exact(actual, spark.createDataFrame(expected_rows, JOIN_OUT_KAFKA_DDL))


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
    expected = spark.createDataFrame(
        [(3, 60, at(9, 25), at(9, 30)), (3, 60, at(9, 25), at(9, 30))],
        JOIN_OUT_DDL,
    )
    actual = ride_pickup_joins(rides, pickups, "600 seconds")
    assert actual.columns == ["vendor_id", "location_id", "pickup_datetime", "dropoff_datetime"]
    assert_exact(actual, expected)
