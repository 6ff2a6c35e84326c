"""The `rides` topic: NYC yellow-taxi trips, keyed by vendor."""

from streaming_pipeline.sources import SourceTopic

SOURCE = SourceTopic(
    topic="rides",
    bronze_table="raw_rides",
    key_schema="ride_key.avsc",
    value_schema="ride_value.avsc",
    key_field="vendor_id",
    description="Every ride from the `rides` topic, decoded with its writer schema and resolved to the latest\n"
    "registered schema, with its Kafka coordinates. Exactly once across re-runs and crashes.",
    csv_columns={
        "VendorID": "vendor_id",
        "tpep_pickup_datetime": "pickup_datetime",
        "tpep_dropoff_datetime": "dropoff_datetime",
        "RatecodeID": "rate_code_id",
        "PULocationID": "pu_location_id",
        "DOLocationID": "do_location_id",
    },
)
