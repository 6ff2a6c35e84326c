"""Column documentation of every table, shown by the Dagster UI (DESIGN section 4)."""

from __future__ import annotations

import dagster as dg

KAFKA_COLUMNS = [
    dg.TableColumn("kafka_topic", "string", description="Source topic."),
    dg.TableColumn("kafka_partition", "int", description="Source partition."),
    dg.TableColumn(
        "kafka_offset", "bigint", description="Offset within the partition; (topic, partition, offset) is unique."
    ),
    dg.TableColumn("kafka_timestamp", "timestamp", description="Kafka record timestamp (UTC)."),
    dg.TableColumn("schema_id", "int", description="Registry id of the writer schema the record was encoded with."),
]

RAW_RIDES = dg.TableSchema(
    columns=[
        dg.TableColumn("vendor_id", "int", description="TLC VendorID (1 CMT, 2 VeriFone)."),
        dg.TableColumn("pickup_datetime", "timestamp", description="Meter engaged (UTC)."),
        dg.TableColumn("dropoff_datetime", "timestamp", description="Meter disengaged (UTC)."),
        dg.TableColumn("passenger_count", "int"),
        dg.TableColumn("trip_distance", "double", description="Miles."),
        dg.TableColumn("rate_code_id", "int"),
        dg.TableColumn("store_and_fwd_flag", "string"),
        dg.TableColumn("pu_location_id", "int", description="Pickup taxi zone."),
        dg.TableColumn("do_location_id", "int", description="Dropoff taxi zone."),
        dg.TableColumn("payment_type", "int"),
        dg.TableColumn("fare_amount", "double"),
        dg.TableColumn("extra", "double"),
        dg.TableColumn("mta_tax", "double"),
        dg.TableColumn("tip_amount", "double"),
        dg.TableColumn("tolls_amount", "double"),
        dg.TableColumn("improvement_surcharge", "double"),
        dg.TableColumn("total_amount", "double"),
        dg.TableColumn("congestion_surcharge", "double"),
        *KAFKA_COLUMNS,
    ]
)

RAW_PICKUP_LOCATIONS = dg.TableSchema(
    columns=[
        dg.TableColumn("pu_location_id", "int", description="Taxi zone of the pickup."),
        dg.TableColumn("pickup_datetime", "timestamp", description="Pickup time (UTC)."),
        *KAFKA_COLUMNS,
    ]
)

DEAD_LETTER_RECORDS = dg.TableSchema(
    columns=[
        dg.TableColumn("kafka_topic", "string"),
        dg.TableColumn("kafka_partition", "int"),
        dg.TableColumn("kafka_offset", "bigint"),
        dg.TableColumn("raw_key", "binary", description="Key bytes exactly as received."),
        dg.TableColumn("raw_value", "binary", description="Value bytes exactly as received."),
        dg.TableColumn("error", "string", description="Why the record could not be decoded."),
        dg.TableColumn("failed_at", "timestamp", description="When ingestion set it aside (UTC)."),
    ]
)

VENDOR_COUNTS = dg.TableSchema(
    columns=[
        dg.TableColumn("vendor_id", "int"),
        dg.TableColumn("trip_count", "bigint", description="Rides of this vendor over everything ingested."),
    ]
)

RIDE_WINDOW_AGGREGATES = dg.TableSchema(
    columns=[
        dg.TableColumn("window_start", "timestamp", description="Tumbling window start (inclusive, UTC)."),
        dg.TableColumn("window_end", "timestamp", description="Window end (exclusive)."),
        dg.TableColumn("vendor_id", "int"),
        dg.TableColumn("trip_count", "bigint", description="Rides counted before the window was final."),
        dg.TableColumn("total_amount_sum", "double", description="Sum of total_amount of those rides."),
        dg.TableColumn("is_final", "boolean", description="The watermark has passed window_end."),
        dg.TableColumn("late_trip_count", "bigint", description="Rides that arrived after the window was final."),
        dg.TableColumn("max_pickup_datetime", "timestamp", description="Latest on-time pickup in the window."),
    ]
)

RIDE_PICKUP_JOINS = dg.TableSchema(
    columns=[
        dg.TableColumn("vendor_id", "int", description="Vendor of the ride."),
        dg.TableColumn("location_id", "int", description="Zone where the ride dropped off and the pickup happened."),
        dg.TableColumn("pickup_datetime", "timestamp", description="Time of the pickup event."),
        dg.TableColumn("dropoff_datetime", "timestamp", description="Dropoff time of the ride."),
        dg.TableColumn("ride_kafka_partition", "int"),
        dg.TableColumn("ride_kafka_offset", "bigint"),
        dg.TableColumn("pickup_kafka_partition", "int"),
        dg.TableColumn("pickup_kafka_offset", "bigint"),
    ]
)

HIGH_AMOUNT_RIDES = dg.TableSchema(columns=list(RAW_RIDES.columns))
LOW_AMOUNT_RIDES = dg.TableSchema(columns=list(RAW_RIDES.columns))

TAXI_ZONES = dg.TableSchema(
    columns=[
        dg.TableColumn("location_id", "int", description="TLC taxi zone id (LocationID)."),
        dg.TableColumn("borough", "string"),
        dg.TableColumn("zone", "string"),
        dg.TableColumn("service_zone", "string"),
    ]
)

RIDES_ENRICHED = dg.TableSchema(
    columns=[
        *RAW_RIDES.columns,
        dg.TableColumn("pu_borough", "string", description="Borough of the pickup zone; null for an unknown id."),
        dg.TableColumn("pu_zone", "string", description="Pickup zone name; null for an unknown id."),
        dg.TableColumn("do_borough", "string", description="Borough of the dropoff zone; null for an unknown id."),
        dg.TableColumn("do_zone", "string", description="Dropoff zone name; null for an unknown id."),
    ]
)
