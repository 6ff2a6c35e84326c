"""The resources a project's sources and streaming tables use, bound once the way `dg` projects bind resources: a
`resources.py` at the root of the defs folder, with a `@dg.definitions` function. The first `dg scaffold defs` of
this package's components writes it; a later one finds it and writes nothing."""

from __future__ import annotations

from pathlib import Path

RESOURCES_MODULE = "resources.py"

_RESOURCES_TEMPLATE = '''\
"""The resources of the streaming tables (kafka, schema_registry, spark, lakehouse), bound once for the project and
configured from the environment variables when the definitions load (KAFKA_BOOTSTRAP_SERVERS, SCHEMA_REGISTRY_URL,
SPARK_REMOTE, LAKEHOUSE_DIR, ...). Written by `dg scaffold defs`; bind your own here instead if you like."""

import dagster as dg

from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline.resources.from_settings import build_resources


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=build_resources(PipelineSettings.from_env()))
'''


def defs_root(target: Path) -> Path | None:
    """The defs folder that holds `target`: its nearest ancestor named `defs` (None when there is none, outside a
    `dg` project's layout)."""
    return next((folder for folder in [target, *target.parents] if folder.name == "defs"), None)


def write_resources_module(target: Path) -> Path | None:
    """`resources.py` at the root of the defs folder that holds `target`, unless the project has one, or its
    `definitions.py` binds resources itself (it names `resources=`); the file written, or None."""
    root = defs_root(target)
    if root is None or (root / RESOURCES_MODULE).exists():
        return None
    definitions = root.parent / "definitions.py"
    if definitions.is_file() and "resources=" in definitions.read_text():
        return None
    (root / RESOURCES_MODULE).write_text(_RESOURCES_TEMPLATE)
    return root / RESOURCES_MODULE
