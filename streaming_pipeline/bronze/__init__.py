"""Bronze: Kafka topics -> Delta tables, exactly once, undecodable records to dead letters; the offset sensors."""
