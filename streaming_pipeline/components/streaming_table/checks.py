"""The check every streaming table gets: its query is not behind the tables it streams."""

from __future__ import annotations

import time
from collections.abc import Sequence

import dagster as dg

from streaming_pipeline.lakehouse.engine.source_lag import source_lag
from streaming_pipeline.resources import LakehouseResource

NOT_BEHIND_SOURCES = "not_behind_sources"


def not_behind_sources_check(table: str, streams: Sequence[str], tolerance_seconds: float) -> dg.AssetChecksDefinition:
    """The check of `table`: a warning when rows of the tables it streams (`streams`) have waited for its query longer
    than `tolerance_seconds` (`CONTINUOUS_FRESHNESS_SECONDS`). Read from the query's checkpoint and the sources' logs,
    no Spark."""

    @dg.asset_check(
        asset=table,
        name=NOT_BEHIND_SOURCES,
        additional_deps=list(streams),
        description=f"Its query has read every row that {', '.join(streams)} committed more than {tolerance_seconds:g} "
        "s ago (CONTINUOUS_FRESHNESS_SECONDS): a warning when rows have waited longer.",
    )
    def not_behind_sources(lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        now = time.time()
        checkpoint = lakehouse.checkpoint_path(table)
        lags = [source_lag(checkpoint, source, lakehouse.table_path(source), now=now) for source in streams]
        behind = max(lag.behind_seconds(now) for lag in lags)
        metadata: dict[str, dg.RawMetadataValue] = {
            "behind_seconds": round(behind, 1),
            "tolerance_seconds": tolerance_seconds,
        }
        for lag in lags:
            metadata[f"{lag.source}_read_version"] = lag.read_version
            metadata[f"{lag.source}_latest_version"] = -1 if lag.latest_version is None else lag.latest_version
        return dg.AssetCheckResult(
            passed=behind <= tolerance_seconds, severity=dg.AssetCheckSeverity.WARN, metadata=metadata
        )

    return not_behind_sources
