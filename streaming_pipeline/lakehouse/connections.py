"""What the pipeline library needs of Kafka, the schema registry and the lakehouse storage, as protocols: the
Dagster resources (`streaming_pipeline.resources`) provide them, and the library never imports Dagster."""

from __future__ import annotations

from typing import Protocol


class Lakehouse(Protocol):
    """Where tables and checkpoints live, and how much a micro-batch reads."""

    @property
    def max_offsets_per_trigger(self) -> int: ...

    @property
    def max_files_per_trigger(self) -> int: ...

    def table_path(self, asset_name: str) -> str: ...

    def checkpoint_path(self, asset_name: str) -> str: ...


class KafkaConnection(Protocol):
    """A Kafka cluster: its topics' offsets, and the connection as options of Spark's Kafka source."""

    def ensure_topic(self, topic: str, *, cleanup_policy: str | None = None) -> bool: ...

    def spark_options(self) -> dict[str, str]: ...

    def watermark_offsets(self, topic: str) -> dict[int, tuple[int, int]]: ...


class SchemaRegistryConnection(Protocol):
    """A Confluent-API schema registry, as the foreachBatch handler reaches it from the Spark server."""

    @property
    def url(self) -> str: ...

    @property
    def basic_auth_user_info(self) -> str | None: ...

    @property
    def ssl_ca_location(self) -> str | None: ...

    @property
    def ssl_keystore_location(self) -> str | None: ...
