"""This project's silver and gold tables declared as streaming tables (`defs/<layer>/<table>/defs.yaml`): each one's
query run on rows the test gives (`table_query().rows_for`), as a user unit-tests a table of their own. Every
expected row is written by hand."""

from __future__ import annotations

import dagster as dg

from streaming_pipeline.components import StreamingTable
from streaming_pipeline.devstack.project import project_defs_folder
from streaming_pipeline_tests.dataframe_helpers import assert_exact


def declared(name: str) -> StreamingTable:
    tree = dg.ComponentTree.for_project(project_defs_folder())
    (table,) = [c for c in tree.get_all_components(of_type=StreamingTable) if c.name == name]
    return table


def test_vendor_counts_counts_rides_per_vendor_including_the_null_vendor(spark):
    query = declared("vendor_counts").table_query()
    rides = spark.createDataFrame(
        [(1, 10.0), (2, 5.0), (1, 3.0), (None, 1.0), (1, 2.0), (None, 4.0), (7, 0.0)],
        "vendor_id int, total_amount double",
    )
    counted = query.rows_for(spark, {"raw_rides": rides})
    assert_exact(spark, counted, [(1, 3), (2, 1), (None, 2), (7, 1)], "vendor_id int, trip_count long")
    no_rides = spark.createDataFrame([], "vendor_id int, total_amount double")
    assert_exact(spark, query.rows_for(spark, {"raw_rides": no_rides}), [], "vendor_id int, trip_count long")
