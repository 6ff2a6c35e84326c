"""One Dagster resource per external system: Kafka, the Schema Registry, the lakehouse (Spark is `engine.spark`)."""

from streaming_pipeline.resources.kafka import KafkaResource
from streaming_pipeline.resources.lakehouse import LakehouseResource
from streaming_pipeline.resources.schema_registry import SchemaRegistryResource

__all__ = ["KafkaResource", "LakehouseResource", "SchemaRegistryResource"]
