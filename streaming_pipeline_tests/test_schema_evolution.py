"""Schema evolution through every table, in triggered runs, on the real embedded broker and registry with an
in-process Spark, as a new user meets it with Confluent's own serializer: a compatible version adds a field after
the lakehouse exists, an old producer keeps writing the first version, a later version drops the field again, the
lakehouse is replayed, and a type change the tables cannot take stops bronze loudly until a replay takes it.

Every expectation is computed here from what the test produced, never with the code under test.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import pytest
from confluent_kafka.serialization import MessageField

from streaming_pipeline.definitions import pipeline_definitions
from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.devstack.replay import ReplayStart, replay
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.lakehouse.registry_client import RegistryClient
from streaming_pipeline.lakehouse.tables import PICKUPS_TOPIC, RIDES_TOPIC
from streaming_pipeline_tests.cli_helpers import produce_with_cli
from streaming_pipeline_tests.kafka_helpers import SCHEMA_DIR, avro_frame, produce_raw
from streaming_pipeline_tests.project_tables import project_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1 = (SCHEMA_DIR / "ride_value.avsc").read_text()
NEW_FIELD = "cbd_congestion_fee"
#: vendor_counts' columns, as its SQL selects them.
VENDOR_COUNT_COLUMNS = ["vendor_id", "trip_count"]
#: A compatible new version, as another team's producer registers it: the first one plus a nullable field.
V2 = json.dumps(
    {
        **json.loads(V1),
        "fields": [
            *json.loads(V1)["fields"],
            {"name": NEW_FIELD, "type": ["null", "double"], "default": None, "doc": "MTA congestion relief zone fee."},
        ],
    }
)
#: A later version that drops the field again (and makes trip_distance optional, so that it is a version of its own).
V3 = json.dumps(
    {
        **json.loads(V1),
        "fields": [
            {**f, "type": ["null", "double"], "default": None} if f["name"] == "trip_distance" else f
            for f in json.loads(V1)["fields"]
        ],
    }
)
KEY_SCHEMA = (SCHEMA_DIR / "ride_key.avsc").read_text()
PICKUP_SCHEMA = (SCHEMA_DIR / "pickup_location_value.avsc").read_text()
PICKUP_KEY_SCHEMA = (SCHEMA_DIR / "pickup_location_key.avsc").read_text()
THRESHOLD = 40.0  # HIGH_AMOUNT_THRESHOLD's default
JOIN_GAP = timedelta(minutes=10)  # RIDE_PICKUP_MAX_GAP's default, inclusive
RIDE_COLUMNS_OF_V1 = [f["name"] for f in json.loads(V1)["fields"]]

Coordinate = tuple[int, int]


class Produced:
    """What the test sent, by Kafka coordinate: each ride's record and the new field's value it carries (None when
    its version has no such field)."""

    def __init__(self, stack: Any) -> None:
        self.stack = stack
        self.registry = RegistryClient(stack.schema_registry_url)
        produce_with_cli(stack, "zones", "--csv")  # the zones rides_enriched joins, from their table topic
        self.rides: dict[Coordinate, dict[str, Any]] = {}
        self.pickups: list[dict[str, Any]] = []
        self.dead: dict[Coordinate, bytes] = {}

    def rides_with(self, schema: str, rides: list[dict[str, Any]]) -> list[Coordinate]:
        self.registry.register(f"{RIDES_TOPIC}-value", schema)
        self.registry.register(f"{RIDES_TOPIC}-key", KEY_SCHEMA)
        placed = produce_raw(
            self.stack.bootstrap_servers,
            RIDES_TOPIC,
            [
                (
                    avro_frame(self.registry, KEY_SCHEMA, r["vendor_id"], RIDES_TOPIC, MessageField.KEY),
                    avro_frame(self.registry, schema, r, RIDES_TOPIC),
                )
                for r in rides
            ],
        )
        has_field = NEW_FIELD in schema
        for coordinate, ride in zip(placed, rides, strict=True):
            self.rides[coordinate] = {**ride, NEW_FIELD: ride.get(NEW_FIELD) if has_field else None}
        return placed

    def pickups_at_dropoffs(self, rides: list[dict[str, Any]]) -> None:
        """A pickup at the dropoff zone of every 7th ride, 0 to 12 minutes after its dropoff."""
        self.registry.register(f"{PICKUPS_TOPIC}-value", PICKUP_SCHEMA)
        self.registry.register(f"{PICKUPS_TOPIC}-key", PICKUP_KEY_SCHEMA)
        pickups = [
            {
                "pu_location_id": r["do_location_id"],
                "pickup_datetime": r["dropoff_datetime"] + timedelta(minutes=i % 13),
            }
            for i, r in enumerate(rides[::7])
        ]
        produce_raw(
            self.stack.bootstrap_servers,
            PICKUPS_TOPIC,
            [
                (
                    avro_frame(self.registry, PICKUP_KEY_SCHEMA, p["pu_location_id"], PICKUPS_TOPIC, MessageField.KEY),
                    avro_frame(self.registry, PICKUP_SCHEMA, p, PICKUPS_TOPIC),
                )
                for p in pickups
            ],
        )
        self.pickups.extend(pickups)

    def undecodable(self) -> None:
        """Two records no registered schema decodes: an unknown schema id, and a v2 frame cut short."""
        cut = avro_frame(self.registry, V2, _rides(1, seed=9, day=9)[0], RIDES_TOPIC)[:9]
        frames = [b"\x00\x00\x00\x03\xe7" + b"not avro", cut]
        for coordinate, frame in zip(
            produce_raw(self.stack.bootstrap_servers, RIDES_TOPIC, [(None, f) for f in frames]), frames, strict=True
        ):
            self.dead[coordinate] = frame

    def new_field_by_coordinate(self, where: Any = lambda ride: True) -> dict[Coordinate, Any]:
        return {c: r[NEW_FIELD] for c, r in self.rides.items() if where(r)}

    def vendor_counts(self) -> dict[int, int]:
        return dict(Counter(r["vendor_id"] for r in self.rides.values()))

    def join_pairs(self) -> int:
        return sum(
            1
            for r in self.rides.values()
            for p in self.pickups
            if p["pu_location_id"] == r["do_location_id"]
            and abs(p["pickup_datetime"] - r["dropoff_datetime"]) <= JOIN_GAP
        )


def _rides(count: int, *, seed: int, day: int, fee: bool = False) -> list[dict[str, Any]]:
    """Synthetic rides on their own day (no join pair and no window spans two of them); with `fee`, each carries
    the new field, a value of its own for most and null for every 10th."""
    options = SyntheticOptions(seed=seed, start=datetime(2020, 7, day, tzinfo=UTC))
    rides = list(synthetic_rides(count, options))
    if fee:
        rides = [{**r, NEW_FIELD: None if i % 10 == 0 else round(0.75 + i / 100, 2)} for i, r in enumerate(rides)]
    return rides


def _materialize_everything(resources: dict[str, Any]) -> dg.ExecuteInProcessResult:
    defs = pipeline_definitions()
    return dg.materialize(list(defs.assets or []), resources=resources, raise_on_error=False)  # type: ignore[arg-type]


def _rows(spark: Any, resources: dict[str, Any], table: str) -> list[Any]:
    return spark.read.format("delta").load(resources["lakehouse"].table_path(table)).collect()


def _columns(spark: Any, resources: dict[str, Any], table: str) -> list[str]:
    return spark.read.format("delta").load(resources["lakehouse"].table_path(table)).columns


def _field_by_coordinate(spark: Any, resources: dict[str, Any], table: str) -> dict[Coordinate, Any]:
    rows = _rows(spark, resources, table)
    found = {(r.kafka_partition, r.kafka_offset): r[NEW_FIELD] for r in rows}
    assert len(found) == len(rows), f"{table} holds a Kafka record twice"
    return found


def _assert_every_table_exact(spark: Any, resources: dict[str, Any], produced: Produced) -> None:
    amount = lambda r: r["total_amount"]  # noqa: E731
    assert _field_by_coordinate(spark, resources, "raw_rides") == produced.new_field_by_coordinate()
    assert _field_by_coordinate(spark, resources, "high_amount_rides") == produced.new_field_by_coordinate(
        lambda r: amount(r) is not None and amount(r) >= THRESHOLD
    )
    assert _field_by_coordinate(spark, resources, "low_amount_rides") == produced.new_field_by_coordinate(
        lambda r: amount(r) is not None and amount(r) < THRESHOLD
    )
    assert _field_by_coordinate(spark, resources, "rides_enriched") == produced.new_field_by_coordinate()
    # The pass-through tables carry every column of the first version, then the new one; the enrichment's own after.
    for table in ("raw_rides", "high_amount_rides", "low_amount_rides", "rides_enriched"):
        columns = _columns(spark, resources, table)
        assert columns[: len(RIDE_COLUMNS_OF_V1)] == RIDE_COLUMNS_OF_V1 and NEW_FIELD in columns, (table, columns)
    # The tables with columns of their own keep them, and are complete.
    assert _columns(spark, resources, "vendor_counts") == VENDOR_COUNT_COLUMNS
    for table in map(project_table, ("ride_window_aggregates", "ride_pickup_joins", "join_late_rows")):
        assert sorted(_columns(spark, resources, table.name)) == sorted(table.column_names)
    counts = {r.vendor_id: r.trip_count for r in _rows(spark, resources, "vendor_counts")}
    assert counts == produced.vendor_counts()
    windows = _rows(spark, resources, "ride_window_aggregates")
    assert sum(w.trip_count + w.late_trip_count for w in windows) == len(produced.rides)
    assert len(_rows(spark, resources, "ride_pickup_joins")) == produced.join_pairs()
    dead = {
        (r.kafka_partition, r.kafka_offset): bytes(r.raw_value) for r in _rows(spark, resources, "dead_letter_records")
    }
    assert dead == produced.dead


def test_a_field_added_dropped_and_written_by_old_producers_flows_through_every_table_and_a_replay(
    stack, pipeline_resources, spark
):
    produced = Produced(stack)
    first = _rides(240, seed=1, day=1)
    produced.rides_with(V1, first)
    produced.pickups_at_dropoffs(first)
    assert _materialize_everything(pipeline_resources).success

    # A compatible version with a new field after silver exists; 130 rides carry it, then 70 from an old producer
    # still on the first version, and two undecodable records.
    with_fee = _rides(130, seed=2, day=2, fee=True)
    produced.rides_with(V2, with_fee)
    old_producer = _rides(70, seed=3, day=3)
    produced.rides_with(V1, old_producer)
    produced.pickups_at_dropoffs([*with_fee, *old_producer])
    produced.undecodable()
    result = _materialize_everything(pipeline_resources)
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    assert len(produced.rides) == 440 and sum(v is not None for v in produced.new_field_by_coordinate().values()) == 117
    _assert_every_table_exact(spark, pipeline_resources, produced)
    # The UI's column schema of each materialization is the table's as it is now.
    for table in ("raw_rides", "high_amount_rides", "low_amount_rides", "rides_enriched"):
        [materialization] = [
            m.materialization
            for m in result.get_asset_materialization_events()
            if m.materialization.asset_key == dg.AssetKey(table)
        ]
        schema = materialization.metadata["dagster/column_schema"].value
        assert NEW_FIELD in [c.name for c in schema.columns]
    vendor_schema = next(
        m.materialization.metadata["dagster/column_schema"].value
        for m in result.get_asset_materialization_events()
        if m.materialization.asset_key == dg.AssetKey("vendor_counts")
    )
    assert [c.name for c in vendor_schema.columns] == VENDOR_COUNT_COLUMNS

    # A later version drops the field; producers of every version go on, the one still on v2 with values.
    produced.rides_with(V3, _rides(20, seed=4, day=4))
    produced.rides_with(V2, _rides(10, seed=5, day=5, fee=True))
    produced.rides_with(V1, _rides(10, seed=6, day=6))
    result = _materialize_everything(pipeline_resources)
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    _assert_every_table_exact(spark, pipeline_resources, produced)

    # A replay from the earliest offsets rebuilds every table with the field where the records have it.
    defs = dg.Definitions.merge(
        pipeline_definitions(), dg.Definitions(resources=pipeline_resources, executor=dg.in_process_executor)
    )
    replay(
        "raw_rides",
        ReplayStart(),
        defs=defs,
        sources=project_sources(),
        instance=dg.DagsterInstance.ephemeral(),
        progress=lambda _: None,
    )
    _assert_every_table_exact(spark, pipeline_resources, produced)


def test_a_type_change_the_tables_cannot_take_stops_bronze_loudly_and_a_replay_takes_it(
    stack, pipeline_resources, spark
):
    produced = Produced(stack)
    produced.rides_with(V1, _rides(30, seed=7, day=7))
    assert _materialize_everything(pipeline_resources).success

    # passenger_count from int to long: Avro promotes it (the registry accepts it), but a Delta column keeps its type.
    wider = json.dumps(
        {
            **json.loads(V1),
            "fields": [
                {**f, "type": ["null", "long"]} if f["name"] == "passenger_count" else f
                for f in json.loads(V1)["fields"]
            ],
        }
    )
    produced.rides_with(wider, _rides(12, seed=8, day=8))
    result = _materialize_everything(pipeline_resources)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    message = failure.event_specific_data.error.to_string()  # type: ignore[union-attr]
    assert "cannot be appended to the Delta table" in message and "streaming-pipeline replay" in message, message
    assert "DELTA_FAILED_TO_MERGE_FIELDS" in message
    assert len(_rows(spark, pipeline_resources, "raw_rides")) == 30  # nothing of the refused micro-batch written

    defs = dg.Definitions.merge(
        pipeline_definitions(), dg.Definitions(resources=pipeline_resources, executor=dg.in_process_executor)
    )
    replay(
        "raw_rides",
        ReplayStart(),
        defs=defs,
        sources=project_sources(),
        instance=dg.DagsterInstance.ephemeral(),
        progress=lambda _: None,
    )
    raw = spark.read.format("delta").load(pipeline_resources["lakehouse"].table_path("raw_rides"))
    assert dict(raw.dtypes)["passenger_count"] == "bigint"
    got = sorted((r.kafka_partition, r.kafka_offset, r.passenger_count) for r in raw.collect())
    assert got == sorted((p, o, ride["passenger_count"]) for (p, o), ride in produced.rides.items())
    counts = {r.vendor_id: r.trip_count for r in _rows(spark, pipeline_resources, "vendor_counts")}
    assert counts == produced.vendor_counts()
    for table in ("high_amount_rides", "low_amount_rides", "rides_enriched"):
        frame = spark.read.format("delta").load(pipeline_resources["lakehouse"].table_path(table))
        assert dict(frame.dtypes)["passenger_count"] == "bigint"
    branches = len(_rows(spark, pipeline_resources, "high_amount_rides")) + len(
        _rows(spark, pipeline_resources, "low_amount_rides")
    )
    assert branches == sum(r["total_amount"] is not None for r in produced.rides.values())
    assert len(_rows(spark, pipeline_resources, "rides_enriched")) == 42
