"""This project's code location as the command line sees it: its defs folder, the sources declared there (each
`KafkaDeltaSource`, in a defs.yaml or in Python), found through Dagster's component tree as the definitions find
them, and the run config of the tools that run its assets in their own process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

import streaming_pipeline.defs
from streaming_pipeline.components.kafka_delta_source import declared_sources
from streaming_pipeline.lakehouse.sources import SourceTopic, check_declared_once
from streaming_pipeline.lakehouse.table_model import Table

if TYPE_CHECKING:
    from streaming_pipeline.components import StreamingTable


def project_defs_folder() -> Path:
    """`streaming_pipeline/defs/`, in a checkout or an installed package."""
    return Path(streaming_pipeline.defs.__file__).parent


def project_sources() -> tuple[SourceTopic, ...]:
    """The sources declared in this project's code location, in path order (what the command line works on)."""
    found = declared_sources(dg.ComponentTree.for_project(project_defs_folder()))
    check_declared_once(found)
    return found


def project_streaming_table(name: str) -> StreamingTable:
    """The declaration of this project's streaming table `name` (in SQL or in Python)."""
    from streaming_pipeline.components import StreamingTable

    tree = dg.ComponentTree.for_project(project_defs_folder())
    (table,) = [c for c in tree.get_all_components(of_type=StreamingTable) if c.name == name]
    return table


def project_tables() -> dict[str, Table]:
    """Every Delta table of this project's lakehouse by name (`streamed_table.declared_tables` of the sources and
    the steps its code location declares)."""
    from streaming_pipeline.components.streamed_table import declared_tables, streamed_tables

    tree = dg.ComponentTree.for_project(project_defs_folder())
    return declared_tables(declared_sources(tree), streamed_tables(tree))


def project_table_names() -> list[str]:
    """The names of `project_tables`, sources first."""
    return list(project_tables())


#: For the tools that run the assets with `dg.materialize` and print their own stages (the demo, the benches): the
#: run's console log at WARNING, so that Dagster's DEBUG lines (each step's start, output, success) stay out of the
#: tool's output.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def project_pools() -> list[str]:
    """The concurrency pool of every streaming checkpoint of this project (`asset_metadata.checkpoint_pool` of each
    query of the continuous run, which are the triggered steps' too)."""
    from streaming_pipeline.components.asset_metadata import checkpoint_pool
    from streaming_pipeline.components.streamed_table import live_query_names, streamed_tables

    tree = dg.ComponentTree.for_project(project_defs_folder())
    return [checkpoint_pool(name) for name in live_query_names(project_sources(), streamed_tables(tree))]
