"""Avro schema parsing, canonical form, default-value validation and compatibility rules.

Everything Avro-specific of the registry lives here, on top of the Apache `avro`
package: `avro.schema` parses, `avro.compatibility.ReaderWriterCompatibilityChecker`
decides whether a reader schema can read data written with a writer schema.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import avro.compatibility
import avro.errors
import avro.name
import avro.schema

from streaming_pipeline.devstack.registry.exceptions import InvalidSchemaError

AVRO = "AVRO"
SUPPORTED_SCHEMA_TYPES = (AVRO,)

DEFAULT_COMPATIBILITY = "BACKWARD"
COMPATIBILITY_LEVELS = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)


# Deepest JSON nesting accepted in a request body or a schema. Parsing, default checks and
# compatibility checks recurse about three Python frames per level: 128 levels stay well within
# Python's default recursion limit of 1000, with room for the server's own frames.
MAX_JSON_DEPTH = 128


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json(text: str | bytes) -> Any:
    """Parse JSON that the registry can process recursively, store in SQLite and serve back as JSON.

    Raise ValueError for nesting deeper than MAX_JSON_DEPTH (or than Python's recursion limit),
    NaN, Infinity or numbers that overflow a double, and lone surrogates (no UTF-8 encoding).
    """
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError(f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep") from None
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(f"the JSON string {item[:80]!r} holds a lone surrogate escape") from None
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError("the JSON holds a number out of the range of a double")
        elif isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep")
            children = [*item, *item.values()] if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return value


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class ParsedSchema:
    """A valid Avro schema, with the text the registry stores and returns for it."""

    schema_type: str
    canonical: str
    references: tuple[Reference, ...]
    fingerprint: str
    avro_schema: avro.schema.Schema


# (subject, version) of a reference -> (stored schema text, its own references).
ReferenceResolver = Callable[[str, int], tuple[str, Sequence[Reference]]]

# Key order of the canonical JSON: the usual Avro reading order, then the rest sorted.
_KEY_ORDER = {
    key: index
    for index, key in enumerate(
        ["type", "name", "namespace", "doc", "aliases", "fields", "symbols", "items", "values", "size", "default"]
    )
}


_FIELD_KEY_ORDER = {key: index for index, key in enumerate(["name", "type", "doc", "aliases", "default", "order"])}


def _ordered(value: Any, is_field: bool = False) -> Any:
    if isinstance(value, dict):
        order = _FIELD_KEY_ORDER if is_field else _KEY_ORDER
        keys = sorted(value, key=lambda key: (order.get(key, len(order)), key))
        result = {}
        for key in keys:
            if key == "default":
                result[key] = value[key]  # a JSON value of the data, not a schema: keep as is
            elif key == "fields" and isinstance(value[key], list):
                result[key] = [_ordered(field, is_field=True) for field in value[key]]
            else:
                result[key] = _ordered(value[key])
        return result
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


def _compact(value: Any) -> str:
    return json.dumps(_ordered(value), separators=(",", ":"), ensure_ascii=False)


def parse_references(raw: Any) -> tuple[Reference, ...]:
    """Validate the `references` field of a request body."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidSchemaError("'references' must be a list of {name, subject, version} objects")
    references = []
    for item in raw:
        if not isinstance(item, dict):
            raise InvalidSchemaError("each reference must be an object with name, subject and version")
        name, subject, version = item.get("name"), item.get("subject"), item.get("version")
        if not isinstance(name, str) or not name or not isinstance(subject, str) or not subject:
            raise InvalidSchemaError(f"reference {item!r} needs a non-empty name and subject")
        if version in (None, "latest"):
            version = -1
        if isinstance(version, bool) or not isinstance(version, int) or not (version == -1 or version >= 1):
            raise InvalidSchemaError(f"reference {item!r} has an invalid version")
        references.append(Reference(name=name, subject=subject, version=version))
    return tuple(references)


def parse_schema(
    schema_text: Any,
    schema_type: Any = None,
    references: Sequence[Reference] = (),
    resolve: ReferenceResolver | None = None,
) -> ParsedSchema:
    """Parse a schema of a request body; raise InvalidSchemaError with the parser's message."""
    try:
        return _parse_schema(schema_text, schema_type, references, resolve)
    except RecursionError:
        # MAX_JSON_DEPTH bounds one schema text, not a chain of references that nest into each other
        raise InvalidSchemaError("the schema, with the schemas it references, is nested too deeply") from None


def _parse_schema(
    schema_text: Any,
    schema_type: Any,
    references: Sequence[Reference],
    resolve: ReferenceResolver | None,
) -> ParsedSchema:
    schema_type = AVRO if schema_type in (None, "") else schema_type
    if not isinstance(schema_type, str) or schema_type.upper() not in SUPPORTED_SCHEMA_TYPES:
        raise InvalidSchemaError(
            f"schemaType {schema_type!r} is not supported; this registry supports {', '.join(SUPPORTED_SCHEMA_TYPES)}"
        )
    if not isinstance(schema_text, str) or not schema_text.strip():
        raise InvalidSchemaError("the 'schema' field is missing or empty")
    try:
        json_data = load_json(schema_text)
    except ValueError as exc:
        raise InvalidSchemaError(f"the schema is not valid JSON: {exc}") from exc

    names = avro.name.Names(validate_names=True)
    if references:
        if resolve is None:
            raise InvalidSchemaError("schema references are not supported here")
        _load_references(references, names, resolve, seen=set(), depth=0)
    try:
        parsed = avro.schema.make_avsc_object(json_data, names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchemaError(f"{type(exc).__name__}: {exc}") from exc
    _validate_defaults(parsed, set())

    if references:
        # The client resolves references itself: keep the schema's own text (re-serialized).
        canonical = _compact(json_data)
    else:
        canonical = _compact(parsed.to_json())
    fingerprint_source = canonical + "\n" + json.dumps([ref.to_dict() for ref in references], sort_keys=True)
    fingerprint = hashlib.sha256(fingerprint_source.encode("utf-8")).hexdigest()
    return ParsedSchema(
        schema_type=AVRO,
        canonical=canonical,
        references=tuple(references),
        fingerprint=fingerprint,
        avro_schema=parsed,
    )


def _load_references(
    references: Iterable[Reference],
    names: avro.name.Names,
    resolve: ReferenceResolver,
    seen: set[tuple[str, int]],
    depth: int,
) -> None:
    if depth > 32:
        raise InvalidSchemaError("schema references are nested too deeply (cycle?)")
    for ref in references:
        text, nested = resolve(ref.subject, ref.version)
        key = (ref.subject, ref.version)
        if key in seen:
            continue
        seen.add(key)
        _load_references(nested, names, resolve, seen, depth + 1)
        try:
            avro.schema.make_avsc_object(json.loads(text), names)
        except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise InvalidSchemaError(
                f"referenced schema {ref.name!r} (subject {ref.subject!r} version {ref.version}): {exc}"
            ) from exc


# ---------------------------------------------------------------------------
# default values (the avro package does not check them; Confluent's Java parser does)


def _default_is_valid(schema: avro.schema.Schema, value: Any) -> bool:
    kind = schema.type
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31
    if kind == "long":
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    if kind in ("float", "double"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in ("bytes", "string", "fixed"):
        return isinstance(value, str)
    if kind == "enum":
        return isinstance(value, str) and value in cast(avro.schema.EnumSchema, schema).symbols
    if kind == "array":
        items = cast(avro.schema.ArraySchema, schema).items
        return isinstance(value, list) and all(_default_is_valid(items, item) for item in value)
    if kind == "map":
        values = cast(avro.schema.MapSchema, schema).values
        return isinstance(value, dict) and all(_default_is_valid(values, item) for item in value.values())
    if kind == "union":
        return any(_default_is_valid(branch, value) for branch in cast(avro.schema.UnionSchema, schema).schemas)
    if kind in ("record", "error", "request"):
        if not isinstance(value, dict):
            return False
        for field in cast(avro.schema.RecordSchema, schema).fields:
            if field.name in value:
                if not _default_is_valid(field.type, value[field.name]):
                    return False
            elif not field.has_default:
                return False
        return True
    return True


def _validate_defaults(schema: avro.schema.Schema, visited: set[int]) -> None:
    if id(schema) in visited:
        return
    visited.add(id(schema))
    kind = schema.type
    if kind in ("record", "error", "request"):
        record = cast(avro.schema.RecordSchema, schema)
        for field in record.fields:
            if field.has_default and not _default_is_valid(field.type, field.default):
                raise InvalidSchemaError(
                    f"Invalid default for field {field.name!r} of {record.fullname}: "
                    f"{json.dumps(field.default)} is not a valid {_describe(field.type)}"
                )
            _validate_defaults(field.type, visited)
    elif kind == "array":
        _validate_defaults(cast(avro.schema.ArraySchema, schema).items, visited)
    elif kind == "map":
        _validate_defaults(cast(avro.schema.MapSchema, schema).values, visited)
    elif kind == "union":
        for branch in cast(avro.schema.UnionSchema, schema).schemas:
            _validate_defaults(branch, visited)


def _describe(schema: avro.schema.Schema) -> str:
    try:
        return json.dumps(schema.to_json(), separators=(",", ":"))
    except Exception:  # pragma: no cover - description only
        return str(schema.type)


# ---------------------------------------------------------------------------
# compatibility


def normalize_level(value: Any) -> str | None:
    """The canonical compatibility level for `value`, or None when it is not one."""
    if isinstance(value, str) and value.strip().upper() in COMPATIBILITY_LEVELS:
        return value.strip().upper()
    return None


def reader_writer_problems(reader: avro.schema.Schema, writer: avro.schema.Schema) -> list[str]:
    """Why `reader` cannot read data written with `writer` (empty list: it can)."""
    result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
        return []
    kinds = sorted({kind.name.upper() for kind in result.incompatibilities}) or ["INCOMPATIBLE"]
    locations = ", ".join(sorted(result.locations - {"/"}) or ["/"])
    info = "; ".join(sorted(str(message) for message in result.messages))
    return [f"{{errorType:'{'/'.join(kinds)}', path:'{locations}', additionalInfo:'{info}'}}"]


def compatibility_problems(level: str, new: ParsedSchema, old: ParsedSchema, old_version: int) -> list[str]:
    """Messages explaining why `new` breaks `level` against `old` (empty list: compatible).

    Raise InvalidSchemaError when the two schemas nest too deeply (through references) to compare.
    """
    try:
        return _compatibility_problems(level, new, old, old_version)
    except RecursionError:
        raise InvalidSchemaError(
            f"the schema is nested too deeply to check its compatibility with version {old_version}"
        ) from None


def _compatibility_problems(level: str, new: ParsedSchema, old: ParsedSchema, old_version: int) -> list[str]:
    problems: list[str] = []
    if level.startswith("BACKWARD") or level.startswith("FULL"):
        for problem in reader_writer_problems(new.avro_schema, old.avro_schema):
            problems.append(
                f"{{direction:'BACKWARD', description:'the new schema (reader) cannot read data written "
                f"with version {old_version} (writer)', detail:{problem}}}"
            )
    if level.startswith("FORWARD") or level.startswith("FULL"):
        for problem in reader_writer_problems(old.avro_schema, new.avro_schema):
            problems.append(
                f"{{direction:'FORWARD', description:'version {old_version} (reader) cannot read data "
                f"written with the new schema (writer)', detail:{problem}}}"
            )
    if problems:
        problems.append(f"{{oldSchemaVersion: {old_version}}}")
        problems.append(f"{{oldSchema: '{old.canonical}'}}")
        problems.append(f"{{compatibility: '{level}'}}")
    return problems


def versions_to_check(level: str, versions: Sequence[Any]) -> list[Any]:
    """The registered versions (oldest first) a new schema is checked against under `level`."""
    if level == "NONE" or not versions:
        return []
    if level.endswith("_TRANSITIVE"):
        return list(versions)
    return [versions[-1]]
