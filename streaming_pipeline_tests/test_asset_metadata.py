"""The columns a materialization shows in the UI (`dagster/column_schema`) come from the declaration of the table it is
given, wherever that table is declared: a table of a module of its own (not `streaming_pipeline.lakehouse.tables`)
keeps its descriptions, and only a column its declaration lacks (schema evolution) is marked as evolved."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from streaming_pipeline.components.asset_metadata import EVOLVED_COLUMN, current_column_schema, delta_table_metadata
from streaming_pipeline.lakehouse.table_model import GOLD, Column, Table
from streaming_pipeline.resources import LakehouseResource

#: Declared here, as a user's table module would, under a name `streaming_pipeline.lakehouse.tables` does not know.
ORDER_TOTALS = Table(
    "order_totals",
    GOLD,
    (Column("customer", "string", "Who ordered."), Column("total", "double", "Sum of the orders, EUR.")),
)


def _write(lakehouse: LakehouseResource, columns: dict[str, pa.Array]) -> None:
    write_deltalake(lakehouse.table_path(ORDER_TOTALS.name), pa.table(columns), mode="append", schema_mode="merge")


def test_a_table_declared_anywhere_keeps_its_descriptions_and_only_an_evolved_column_is_marked(tmp_path: Path) -> None:
    lakehouse = LakehouseResource(root=str(tmp_path))
    _write(lakehouse, {"customer": pa.array(["a", "b"]), "total": pa.array([1.5, 2.0])})

    metadata = delta_table_metadata(None, lakehouse, ORDER_TOTALS)  # type: ignore[arg-type]  # delta-rs reads it
    assert [(c.name, c.type, c.description) for c in metadata["dagster/column_schema"].columns] == [
        ("customer", "string", "Who ordered."),
        ("total", "double", "Sum of the orders, EUR."),
    ]
    assert metadata["dagster/row_count"].value == 2

    _write(lakehouse, {"customer": pa.array(["c"]), "total": pa.array([3.0]), "coupon": pa.array(["X"])})
    schema = current_column_schema(None, lakehouse.table_path(ORDER_TOTALS.name), 1, ORDER_TOTALS)
    assert schema is not None
    assert [(c.name, c.description) for c in schema.columns] == [
        ("customer", "Who ordered."),
        ("total", "Sum of the orders, EUR."),
        ("coupon", EVOLVED_COLUMN),
    ]
