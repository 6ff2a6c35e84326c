"""Bronze: Kafka topics -> Delta tables, exactly once, undecodable records to dead letters (no Dagster here: the
assets, checks and offset sensors are in `streaming_pipeline.defs.bronze`)."""
