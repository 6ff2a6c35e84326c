"""`KafkaDeltaSource`: one Kafka topic of Avro records ingested exactly once into a bronze Delta table, with
everything a source builds: its asset and the dead-letter table's (`assets.py`), its checks (`checks.py`), its live
job and offset sensor (`sensors.py`). It imports nothing of this project's `defs/`."""

from streaming_pipeline.components.kafka_delta_source.component import (
    KafkaDeltaSource,
    declared_sources,
    sources_binding_resources,
)

__all__ = ["KafkaDeltaSource", "declared_sources", "sources_binding_resources"]
