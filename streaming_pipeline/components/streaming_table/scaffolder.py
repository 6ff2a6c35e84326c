"""`dg scaffold defs streaming_pipeline.components.StreamingTable <path>`: what it writes."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml
from pydantic import Field

from streaming_pipeline.components.project_resources import defs_root, write_resources_module
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.sources import default_bronze_table

_LAYERS = ("bronze", "silver", "gold")


class StreamingTableScaffoldParams(dg.Model):
    source: str | None = Field(
        default=None,
        description="The table it streams from (default: the first bronze table of an append KafkaDeltaSource of "
        "the project).",
    )


class StreamingTableScaffolder(dg.Scaffolder[StreamingTableScaffoldParams]):
    """A `defs.yaml` whose SQL streams every row of a table of the project, with the optional fields commented
    out: a table that loads and runs, to edit into the one you want. The first scaffold of a project also writes
    its `resources.py` (`project_resources`)."""

    @classmethod
    def get_scaffold_params(cls) -> type[StreamingTableScaffoldParams]:
        return StreamingTableScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[StreamingTableScaffoldParams]) -> None:
        name = request.target_path.name
        group = request.target_path.parent.name if request.target_path.parent.name in _LAYERS else "silver"
        source = request.params.source or _first_bronze_table(request.target_path)
        if source is None:
            raise ConfigurationError(
                f"{request.target_path}: the project has no append KafkaDeltaSource for the table to stream from: "
                "scaffold one first, or name the table with --source <table>"
            )
        request.target_path.mkdir(parents=True, exist_ok=True)
        (request.target_path / "defs.yaml").write_text(
            _SCAFFOLD_YAML.format(type_name=request.type_name, name=name, group=group, source=source)
        )
        write_resources_module(request.target_path)


def _first_bronze_table(target: Path) -> str | None:
    """The bronze table of the project's first append `KafkaDeltaSource` by path (a table topic is updated in place,
    and cannot be streamed), as Dagster loads the project's components, else as its `defs.yaml` files declare them
    (a project whose package is not importable yet); None when it has none."""
    from streaming_pipeline.components.kafka_delta_source import KafkaDeltaSource

    try:
        tree = dg.ComponentTree.for_project(target)
        sources = sorted(tree.get_all_components(of_type=KafkaDeltaSource), key=lambda c: str(c.declared_at))
        return next((c.source.bronze_table for c in sources if not c.source.is_table_topic), None)
    except Exception:  # the project does not load as a package: read its defs.yaml files
        return _first_bronze_table_declared(target)


def _first_bronze_table_declared(target: Path) -> str | None:
    root = defs_root(target)
    for declaration in sorted(root.rglob("defs.yaml")) if root else []:
        loaded = yaml.safe_load(declaration.read_text()) or {}
        attributes = loaded.get("attributes") or {}
        if str(loaded.get("type", "")).endswith("KafkaDeltaSource") and attributes.get("mode") != "upsert":
            return str(attributes.get("table") or default_bronze_table(str(attributes.get("topic", ""))))
    return None


_SCAFFOLD_YAML = """\
# A Delta table streamed exactly once from other tables of the lakehouse by a Spark SQL query.
type: {type_name}
attributes:
  name: {name}
  # The query, over the lakehouse's tables by asset name: STREAM(t) reads t's new rows as a stream; any other table
  # is read as it is at each micro-batch (a stream-static join). ${{name}} is a parameter, declared below.
  sql: |
    SELECT *
    FROM STREAM({source})
  # append (rows as they come), complete (a small aggregate rewritten each micro-batch) or upsert (merged by keys).
  mode: append
  # With mode upsert: the columns that identify a row, and the column that orders a key's rows (the highest wins).
  # keys: [id]
  # sequence_by: created_at
  # Per streamed table: its event-time column and how late its rows may be (windows, aggregations in append mode).
  # watermarks:
  #   {source}: {{column: created_at, delay: 10 minutes}}
  # The SQL's parameters: run config; the environment variable sets the default.
  # parameters:
  #   min_amount: {{default: "10", env: MIN_AMOUNT, description: The smallest amount kept}}
  group: {group}
  # description: What the table holds.
  # columns:
  #   id: The column's description.
  # owners: [team:data]
"""
