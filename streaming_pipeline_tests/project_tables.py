"""This project's streaming tables as their declarations (`defs/<layer>/<table>/defs.yaml`) give them, for tests."""

from __future__ import annotations

from typing import Any

import dagster as dg

from streaming_pipeline.components import KafkaDeltaSource, StreamingTable
from streaming_pipeline.components.streamed_table import declared_tables, streamed_tables
from streaming_pipeline.devstack.project import project_defs_folder, project_streaming_table
from streaming_pipeline.lakehouse.engine.streams import StreamQuery, run_available_now
from streaming_pipeline.lakehouse.table_model import Table


def declared(name: str) -> StreamingTable:
    """The component of the project's streaming table `name`."""
    return project_streaming_table(name)


def default_config(name: str) -> Any:
    """The run config of table `name` with its declared defaults (no environment variable read)."""
    config_class = declared(name).config_class()
    assert config_class is not None, f"{name} declares no parameters"
    return config_class()


def default_high_amount_threshold() -> float:
    """The amount branches' threshold without HIGH_AMOUNT_THRESHOLD: what a run of them uses by default."""
    return float(default_config("high_amount_rides").high_amount_threshold)


def project_table(name: str) -> Table:
    """The declaration of the project's table `name` (its columns), as the definitions derive it."""
    tree = dg.ComponentTree.for_project(project_defs_folder())
    sources = [c.source for c in tree.get_all_components(of_type=KafkaDeltaSource)]
    return declared_tables(sources, streamed_tables(tree))[name]


def windows_query(spark: Any, lakehouse: Any, **windows: str) -> StreamQuery:
    """The windows' query with the parameter values `windows`, from their declaration
    (`defs/gold/ride_window_aggregates.py`)."""
    return declared("ride_window_aggregates").table_query().query(spark, lakehouse, windows)


def stream_ride_windows(spark: Any, lakehouse: Any, **windows: str) -> None:
    """The streaming half of a windows run: the query run once, not reconciled."""
    query = windows_query(spark, lakehouse, **windows)
    run_available_now(query.name, query.start_writer)
