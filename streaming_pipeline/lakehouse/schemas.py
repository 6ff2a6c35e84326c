"""Avro schema files: a source's, at the path its defs.yaml names, and the project's, the `.avsc` files of the
top-level `schemas/` folder shipped inside the package (`streaming_pipeline/lakehouse/schema_files`, read with
importlib.resources, so that an installed wheel finds them as a checkout does); and the columns of a value schema
as Spark sees them."""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.table_model import Column


def schema_dir() -> Traversable:
    """The project's schemas, shipped with the package."""
    return resources.files("streaming_pipeline.lakehouse") / "schema_files"


def load_schema(file_name: str) -> str:
    """The text of a schema file: an absolute path (a source's, from its defs.yaml), or a file name in
    `schema_dir()`."""
    path: Path | Traversable = Path(file_name) if Path(file_name).is_absolute() else schema_dir() / file_name
    if not path.is_file():
        raise ConfigurationError(f"Avro schema file not found: {path}")
    return path.read_text()


# Avro (primitive or logical) type -> Spark SQL type, as from_avro decodes it.
_SPARK_TYPES = {
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "string": "string",
    "boolean": "boolean",
    "bytes": "binary",
    "timestamp-micros": "timestamp",
    "timestamp-millis": "timestamp",
    "date": "date",
}


def _spark_type(avro_type: Any, where: str) -> str:
    if isinstance(avro_type, list):  # a union: ["null", T] is a nullable T
        branches = [t for t in avro_type if t != "null"]
        if len(branches) == 1:
            return _spark_type(branches[0], where)
    elif isinstance(avro_type, dict):
        name = avro_type.get("logicalType") or avro_type.get("type")
        if name in _SPARK_TYPES:
            return _SPARK_TYPES[name]
    elif avro_type in _SPARK_TYPES:
        return _SPARK_TYPES[avro_type]
    raise ConfigurationError(
        f"{where}: Avro type {json.dumps(avro_type)} has no column type here; a source's value fields are "
        f"one of {', '.join(sorted(_SPARK_TYPES))}, optionally in a union with null"
    )


def avro_columns(schema_text: str, what: str = "value") -> tuple[Column, ...]:
    """The fields of an Avro record schema as table columns: name, Spark SQL type, the field's `doc`."""
    schema = json.loads(schema_text)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ConfigurationError(f"a source's {what} schema must be an Avro record, not {schema_text[:80]!r}")
    name = schema.get("name", "?")
    return tuple(
        Column(f["name"], _spark_type(f["type"], f"{name}.{f['name']}"), f.get("doc")) for f in schema["fields"]
    )
