"""Lakehouse resource: where Delta tables and streaming checkpoints live, and how much a micro-batch reads.
The assets' own parameters (window, watermark, join gap, amount threshold, zone lookup) are their config."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from streaming_pipeline.engine.object_store import check_reachable
from streaming_pipeline.settings import DEFAULT_MAX_OFFSETS_PER_TRIGGER


class LakehouseResource(dg.ConfigurableResource):
    """Root of the Delta tables (`<root>/<asset>`) and checkpoints (`<root>/_checkpoints/<asset>`)."""

    root: str = Field(description="LAKEHOUSE_DIR: a local path or an object-store URI (s3a://...).")
    max_offsets_per_trigger: int = Field(
        default=DEFAULT_MAX_OFFSETS_PER_TRIGGER,
        gt=0,
        description="MAX_OFFSETS_PER_TRIGGER: upper bound of Kafka records per micro-batch.",
    )
    max_files_per_trigger: int = Field(default=1000, gt=0, description="Upper bound of Delta files per micro-batch.")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A run's step or a sensor's tick starts by reaching the lakehouse's object store, if it is on one: a store
        away, refused keys or a missing bucket is a StorageError naming the setting, before anything is read."""
        check_reachable(self.root)

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def table_path(self, asset_name: str) -> str:
        return self._join(asset_name)

    def checkpoint_path(self, asset_name: str) -> str:
        return self._join("_checkpoints", asset_name)
