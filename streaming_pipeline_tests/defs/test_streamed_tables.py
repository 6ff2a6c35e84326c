"""A silver or gold table is one module: a step declared with `StreamedTable` in the project's defs folder (written
there for the test) gets its asset, its place in the continuous run with its config, its maintenance op in its
pool and its place in raw_rides' fast runs, with nothing else written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.components.streamed_table import fast_run_tables, latency_critical_query_names, streamed_tables
from streaming_pipeline.definitions import build_definitions
from streaming_pipeline.devstack.project import project_defs_folder, project_sources
from streaming_pipeline.lakehouse.settings import PipelineSettings

MODULE = '''
import dagster as dg

from streaming_pipeline.components.streamed_table import StreamedTable, WrittenTable
from streaming_pipeline.lakehouse.table_model import GOLD, Column, Table

RIDE_TOTALS = Table("ride_totals", GOLD, (Column("total", "double", "Sum of total_amount."),))


class RideTotalsConfig(dg.Config):
    minimum: float = 0.0


def ride_totals(context: dg.AssetExecutionContext, config: RideTotalsConfig) -> dg.MaterializeResult:
    """The sum of every ride's total_amount."""
    return dg.MaterializeResult(metadata={"minimum": config.minimum})


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step="ride_totals",
        writes=[WrittenTable(RIDE_TOTALS, deps=["raw_rides"])],
        compute=ride_totals,
        config=RideTotalsConfig,
        config_defaults=lambda settings: {"minimum": settings.high_amount_threshold},
        live_query=lambda inputs, config: None,
        priority=35,
        latency_critical=True,
    )
'''


@pytest.fixture()
def ride_totals_module() -> Iterator[Path]:
    """The new table's module in the project's defs folder (the installed package is this checkout), removed after."""
    module = project_defs_folder() / "gold" / "scratch_ride_totals.py"
    assert not module.exists(), f"{module} is left from an earlier run; remove it"
    try:
        module.write_text(MODULE)
        yield module
    finally:
        module.unlink(missing_ok=True)


def test_a_table_declared_in_its_module_gets_its_asset_continuous_query_maintenance_and_fast_run(
    ride_totals_module: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIGH_AMOUNT_THRESHOLD", "12.5")
    defs = build_definitions(PipelineSettings.from_env({}))
    node = defs.resolve_asset_graph().get(dg.AssetKey("ride_totals"))
    assert node.group_name == "gold"
    assert node.parent_keys == {dg.AssetKey("raw_rides")}
    assert node.automation_condition is not None  # eager on raw_rides in triggered mode
    assert node.description == "The sum of every ride's total_amount."
    assets_def = defs.resolve_assets_def("ride_totals")
    assert assets_def.node_def.name == "ride_totals"
    assert assets_def.node_def.pool == "checkpoint_ride_totals"
    assert assets_def.node_def.tags["dagster/priority"] == "35"
    config_fields = assets_def.node_def.config_schema.config_type.fields  # type: ignore[union-attr]
    assert config_fields["minimum"].default_value == 12.5

    continuous = defs.resolve_job_def("continuous_streams_job").run_config_schema.config_type.fields["ops"]
    assert continuous.default_value["continuous_streams"]["config"]["ride_totals"] == {"minimum": 12.5}
    assert defs.component_tree is not None
    steps = streamed_tables(defs.component_tree)
    assert latency_critical_query_names(project_sources(), steps) == ["raw_rides", "vendor_counts", "ride_totals"]
    assert fast_run_tables("raw_rides", steps) == ["raw_rides", "vendor_counts", "ride_totals"]

    maintenance = defs.resolve_job_def("table_maintenance_job")
    assert maintenance.graph.node_named("maintain_ride_totals").definition.pool == "checkpoint_ride_totals"
