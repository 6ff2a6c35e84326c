"""The component types this package offers to any `dg` project (`dg list components`, through the
`dagster_dg_cli.registry_modules` entry point)."""

from streaming_pipeline.components.kafka_delta_source import KafkaDeltaSource

__all__ = ["KafkaDeltaSource"]
