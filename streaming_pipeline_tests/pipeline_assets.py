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


def pipeline_live_job(bronze_table: str) -> dg.UnresolvedAssetJobDefinition:
    """The project's live job of a bronze table, as its source declares it: with the expectations' checks of the
    tables downstream (a job without them cannot select those tables' steps)."""
    from streaming_pipeline.components.kafka_delta_source.sensors import live_job_names

    name = live_job_names(dg.AssetKey(bronze_table))[0]
    [job] = [j for j in pipeline_definitions().jobs or [] if j.name == name]
    assert not isinstance(job, dg.JobDefinition)  # unresolved: the sensor resolves it against its definitions
    return job
