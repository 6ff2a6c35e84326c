"""Lakehouse resource: where Delta tables and streaming checkpoints live, and the streaming knobs."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from streaming_pipeline.settings import (
    DEFAULT_HIGH_AMOUNT_THRESHOLD,
    DEFAULT_JOIN_MAX_GAP,
    DEFAULT_MAX_OFFSETS_PER_TRIGGER,
    DEFAULT_RIDE_WATERMARK_DELAY,
    DEFAULT_RIDE_WINDOW_DURATION,
    normalize_interval,
)


class LakehouseResource(dg.ConfigurableResource):
    """Root of the Delta tables (`<root>/<asset>`) and checkpoints (`<root>/_checkpoints/<asset>`)."""

    root: str = Field(description="LAKEHOUSE_DIR: a local path or an object-store URI (s3a://...).")
    ride_window_duration: str = Field(default=DEFAULT_RIDE_WINDOW_DURATION, description="RIDE_WINDOW_DURATION")
    ride_watermark_delay: str = Field(default=DEFAULT_RIDE_WATERMARK_DELAY, description="RIDE_WATERMARK_DELAY")
    join_max_gap: str = Field(default=DEFAULT_JOIN_MAX_GAP, description="JOIN_MAX_GAP, inclusive.")
    max_offsets_per_trigger: int = Field(
        default=DEFAULT_MAX_OFFSETS_PER_TRIGGER, description="Upper bound of Kafka records per micro-batch."
    )
    max_files_per_trigger: int = Field(default=1000, description="Upper bound of Delta files per micro-batch.")
    high_amount_threshold: float = Field(
        default=DEFAULT_HIGH_AMOUNT_THRESHOLD, description="HIGH_AMOUNT_THRESHOLD: total_amount >= it is a high amount."
    )
    taxi_zones_csv_override: str | None = Field(
        default=None, description="TAXI_ZONES_CSV: the zone lookup to load (default: the TLC lookup shipped)."
    )

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def table_path(self, asset_name: str) -> str:
        return self._join(asset_name)

    def checkpoint_path(self, asset_name: str) -> str:
        return self._join("_checkpoints", asset_name)

    @property
    def taxi_zones_csv(self) -> str:
        from streaming_pipeline.silver.taxi_zones import taxi_zones_csv_path

        return taxi_zones_csv_path(self.taxi_zones_csv_override)

    @property
    def window_duration(self) -> str:
        return normalize_interval(self.ride_window_duration, name="RIDE_WINDOW_DURATION")

    @property
    def watermark_delay(self) -> str:
        return normalize_interval(self.ride_watermark_delay, name="RIDE_WATERMARK_DELAY")

    @property
    def join_gap(self) -> str:
        return normalize_interval(self.join_max_gap, name="JOIN_MAX_GAP")
