"""A Dagster asset-based streaming lakehouse: Kafka + Avro -> Spark Structured Streaming -> Delta Lake.

Three parts (docs/layout.md): the pipeline library, which imports no Dagster (`sources`, `tables`, `schemas`,
`settings`, `errors`, `engine`, `bronze`, `silver`, `gold`); the Dagster code location (`definitions`, `defs`,
`resources`); and the development stack (`devstack`).
"""
