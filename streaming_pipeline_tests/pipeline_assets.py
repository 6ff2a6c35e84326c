"""The project's assets by table name, as the code location builds them (with the settings of the test's process),
for tests that materialize a few of them with their own resources."""

from __future__ import annotations

import functools

import dagster as dg

from streaming_pipeline.definitions import pipeline_definitions


@functools.cache
def _assets() -> tuple[dg.AssetsDefinition, ...]:
    return tuple(a for a in pipeline_definitions().assets or [] if isinstance(a, dg.AssetsDefinition))


def pipeline_asset(table: str) -> dg.AssetsDefinition:
    """The asset (or multi-asset) that materializes `table`."""
    key = dg.AssetKey(table)
    [asset] = [a for a in _assets() if key in a.keys]
    return asset
