"""The `pickup_locations` topic: a taxi picking up a passenger, keyed by taxi zone."""

from streaming_pipeline.sources import SourceTopic

SOURCE = SourceTopic(
    topic="pickup_locations",
    bronze_table="raw_pickup_locations",
    key_schema="pickup_location_key.avsc",
    value_schema="pickup_location_value.avsc",
    key_field="pu_location_id",
    description="Every pickup event from the `pickup_locations` topic with its Kafka coordinates.",
    produce_name="pickups",
    csv_columns={"PULocationID": "pu_location_id", "tpep_pickup_datetime": "pickup_datetime"},
)
