"""Every Delta table of the lakehouse, defined once: its name (the Dagster asset key), its layer (the asset group) and
its columns (name, Spark SQL type, description), as docs/tables.md documents them. A bronze table is derived from
its source's declaration (`streaming_pipeline.lakehouse.sources.SourceTopic`): the project's three sources (the
`rides` and `pickup_locations` streams and the `taxi_zones` table topic) are declared here, and the code location
makes each a `KafkaDeltaSource` (`defs/bronze/<source>.py`). The silver and gold tables are declared in `defs/` by
their SQL (`silver/rides_enriched/defs.yaml`, `gold/vendor_counts/defs.yaml`, ...) or in Python
(`gold/ride_window_aggregates.py`).

Plain Python, importing neither Dagster nor Spark: the foreachBatch handlers, which run in a Spark worker that
must not import Dagster, take their DDL from here. The Dagster wiring derives the schemas the UI shows
(`asset_metadata.column_schema`).
"""

from __future__ import annotations

from streaming_pipeline.lakehouse.expectations import Expectation
from streaming_pipeline.lakehouse.sources import UPSERT, SourceTopic
from streaming_pipeline.lakehouse.table_model import (
    BRONZE,
    GOLD,
    KAFKA_COLUMN_NAMES,
    KAFKA_COLUMNS,
    KAFKA_KEY,
    SILVER,
    Column,
    Table,
    ddl,
)

__all__ = ["BRONZE", "GOLD", "KAFKA_COLUMN_NAMES", "KAFKA_COLUMNS", "KAFKA_KEY", "SILVER", "Column", "Table", "ddl"]

# ------------------------------------------------------------------------------------------------ bronze

#: NYC yellow-taxi trips, keyed by vendor: the source the silver and gold tables read.
RIDES = SourceTopic.declared(
    topic="rides",
    value_schema="ride_value.avsc",
    key_schema="ride_key.avsc",
    key_field="vendor_id",
    table="raw_rides",
    description="Every ride from the `rides` topic, decoded with its writer schema and resolved to the latest "
    "registered schema, with its Kafka coordinates. Exactly once across re-runs and crashes.",
    # What the TLC data calls for, as warnings: every ride keeps flowing, each rule's check counts those breaking it.
    expectations=(
        Expectation("dropoff_after_pickup", "dropoff_datetime > pickup_datetime"),
        Expectation("amount_not_negative", "total_amount >= 0"),
    ),
)
#: A taxi picking up a passenger, keyed by taxi zone: joined with the rides.
PICKUP_LOCATIONS = SourceTopic.declared(
    topic="pickup_locations",
    value_schema="pickup_location_value.avsc",
    key_schema="pickup_location_key.avsc",
    key_field="pu_location_id",
    table="raw_pickup_locations",
    description="Every pickup event from the `pickup_locations` topic with its Kafka coordinates.",
)
#: The TLC taxi-zone lookup as a table topic (the course's global KTable), keyed by zone id: its table holds each
#: zone as it is now, its history every name a zone has had; the rides are enriched with it.
TAXI_ZONE_LOOKUP = SourceTopic.declared(
    topic="taxi_zones",
    value_schema="taxi_zone_value.avsc",
    key_schema="taxi_zone_key.avsc",
    key_field="location_id",
    table="taxi_zones",
    mode=UPSERT,
    history=True,
    description="The NYC TLC taxi zones as they are now: the latest record of each zone id of the `taxi_zones` "
    "table topic (a tombstone deletes the zone), with the Kafka coordinates of that record. `streaming-pipeline "
    "produce zones --csv` fills the topic from the lookup file shipped with the package.",
)
RIDES_TOPIC = RIDES.topic
PICKUPS_TOPIC = PICKUP_LOCATIONS.topic
RAW_RIDES = RIDES.table
RAW_PICKUP_LOCATIONS = PICKUP_LOCATIONS.table
TAXI_ZONES, TAXI_ZONES_HISTORY = TAXI_ZONE_LOOKUP.tables
#: The columns of a ride as bronze keeps it: the fields of the `rides` value schema and the Kafka coordinates.
RIDE_COLUMNS = RAW_RIDES.columns

DEAD_LETTER_RECORDS = Table(
    "dead_letter_records",
    BRONZE,
    (
        Column("kafka_topic", "string", "The source topic of the record."),
        Column("kafka_partition", "int", "Its partition."),
        Column("kafka_offset", "bigint", "Its offset; (topic, partition, offset) is unique."),
        Column("raw_key", "binary", "Key bytes exactly as received."),
        Column("raw_value", "binary", "Value bytes exactly as received."),
        Column("error", "string", "Why the record could not be decoded."),
        Column("failed_at", "timestamp", "When ingestion set it aside (UTC)."),
    ),
)
