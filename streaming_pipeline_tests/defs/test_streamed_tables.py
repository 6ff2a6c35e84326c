"""A silver or gold table in Python is one module: a function declared with `streaming_table` in the project's defs
folder (written there for the test) gets its asset, its place in the continuous run with its config, its
maintenance op in its pool and its place in raw_rides' fast runs, with nothing else written."""

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
"""The sum of the rides' total_amount at or above a minimum: a gold table in one module."""

from pyspark.sql import functions as F

from streaming_pipeline.components import streaming_table


@streaming_table(
    streams=["raw_rides"],
    mode="complete",
    group="gold",
    parameters={
        "minimum": {"type": "number", "default": 0, "env": "RIDE_TOTALS_MINIMUM", "description": "The smallest amount"}
    },
    columns={"total": "Sum of total_amount."},
    metadata=lambda target, after_run: {"minimum": target.parameters["minimum"]},
    priority=35,
    latency_critical=True,
)
def ride_totals(raw_rides, parameters):
    """The sum of every ride's total_amount at or above the minimum."""
    rides = raw_rides.where(F.col("total_amount") >= parameters["minimum"])
    return rides.agg(F.sum("total_amount").alias("total"))
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
    monkeypatch.setenv("RIDE_TOTALS_MINIMUM", "12.5")
    defs = build_definitions(PipelineSettings.from_env({}))
    node = defs.resolve_asset_graph().get(dg.AssetKey("ride_totals"))
    assert node.group_name == "gold"
    assert node.parent_keys == {dg.AssetKey("raw_rides")}
    assert node.automation_condition is not None  # eager on raw_rides in triggered mode
    assert node.description == "The sum of every ride's total_amount at or above the minimum."
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


@pytest.mark.integration
def test_the_new_table_module_streams_its_table_in_a_triggered_run(
    ride_totals_module: Path, spark, tmp_path: Path, rides_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module alone makes a table a run writes: its query, with its parameter from the environment, reads
    raw_rides; the sum is the CSV's, read with the csv module."""
    import csv

    from streaming_pipeline.resources import LakehouseResource, SparkResource
    from streaming_pipeline_tests.conftest import SPARK_TEST_CONF
    from streaming_pipeline_tests.defs.test_assets_direct import _write_raw_rides

    monkeypatch.setenv("RIDE_TOTALS_MINIMUM", "40")
    lakehouse = LakehouseResource(root=str(tmp_path / "lakehouse"))
    _write_raw_rides(spark, rides_csv, lakehouse.table_path("raw_rides"))
    with rides_csv.open(newline="") as handle:
        amounts = [float(row["total_amount"]) for row in csv.DictReader(handle) if row["total_amount"]]
    expected = sum(a for a in amounts if a >= 40)

    step = build_definitions().resolve_assets_def("ride_totals")
    spark_resource = SparkResource(stop_on_teardown=False, conf=SPARK_TEST_CONF)
    (result,) = list(step(dg.build_asset_context(), spark=spark_resource, lakehouse=lakehouse))
    assert result.metadata is not None and result.metadata["minimum"] == 40.0
    assert result.metadata["rows_read"].value == len(amounts) == 266
    (row,) = spark.read.format("delta").load(lakehouse.table_path("ride_totals")).collect()
    assert row.total == pytest.approx(expected)
