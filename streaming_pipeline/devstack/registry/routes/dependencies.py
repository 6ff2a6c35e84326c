"""What the routes take from a request: the registry service, the schema id, the JSON body, query flags, paging."""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from streaming_pipeline.devstack.registry.compatibility import load_json
from streaming_pipeline.devstack.registry.exceptions import RegistryError, schema_not_found
from streaming_pipeline.devstack.registry.service import SchemaRegistry

T = TypeVar("T")
_TRUE = {"true", "1", "yes"}


async def _registry(request: Request) -> SchemaRegistry:
    """The service `create_app` put in the app's state."""
    registry: SchemaRegistry = request.app.state.registry
    return registry


async def _schema_id(schema_id: str) -> int:
    """The `{schema_id}` path parameter; one that is not a number names no schema (404, not 422)."""
    try:
        return int(schema_id)
    except ValueError:
        raise schema_not_found(f"Schema {schema_id} not found") from None


async def _json_body(request: Request) -> dict[str, Any]:
    """The JSON object of the request, whatever its content type (curl posts form-encoded by default)."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = load_json(raw)
    except ValueError as exc:
        raise RegistryError(400, 400, f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise RegistryError(400, 400, "The request body must be a JSON object")
    return body


Registry = Annotated[SchemaRegistry, Depends(_registry)]
SchemaId = Annotated[int, Depends(_schema_id)]
JsonBody = Annotated[dict[str, Any], Depends(_json_body)]


def flag(request: Request, name: str) -> bool:
    """The boolean query parameter `name` (`true`, `1` or `yes`; false when absent)."""
    return request.query_params.get(name, "false").strip().lower() in _TRUE


def page(request: Request, items: list[T]) -> list[T]:
    """`items` cut by the `offset` and `limit` query parameters (all of them when either is not a number)."""
    try:
        offset = max(int(request.query_params.get("offset", "0")), 0)
        limit = int(request.query_params.get("limit", "-1"))
    except ValueError:
        return items
    items = items[offset:]
    return items if limit < 0 else items[:limit]


def schema_document(payload: dict[str, Any]) -> object:
    """The schema text of a schema or version payload, parsed: what the `.../schema` routes answer."""
    return json.loads(payload["schema"])
