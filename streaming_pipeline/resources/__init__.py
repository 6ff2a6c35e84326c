"""One Dagster resource per external system: Kafka, the Schema Registry, Spark and the lakehouse storage."""

from streaming_pipeline.resources.kafka import KafkaResource
from streaming_pipeline.resources.lakehouse import LakehouseResource
from streaming_pipeline.resources.schema_registry import SchemaRegistryResource
from streaming_pipeline.resources.spark import SparkResource

__all__ = ["KafkaResource", "LakehouseResource", "SchemaRegistryResource", "SparkResource"]
