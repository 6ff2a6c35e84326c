"""The component types this package offers to any `dg` project (`dg list components`, through the
`dagster_dg_cli.registry_modules` entry point)."""

from streaming_pipeline.components.kafka_delta_source import KafkaDeltaSource
from streaming_pipeline.components.streaming_table import StreamingTable, streaming_table

__all__ = ["KafkaDeltaSource", "StreamingTable", "streaming_table"]
