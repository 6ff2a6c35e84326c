"""A Dagster asset-based streaming lakehouse: Kafka + Avro -> Spark Structured Streaming -> Delta Lake."""
