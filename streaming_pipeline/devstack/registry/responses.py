"""The registry's JSON responses: Confluent's media type, or plain JSON for a client that accepts only that."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse, Response

SCHEMA_REGISTRY_MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


def _media_type(request: Request) -> str:
    accept = request.headers.get("accept", "").lower()
    if "application/json" in accept and "schemaregistry" not in accept and "*/*" not in accept:
        return "application/json"
    return SCHEMA_REGISTRY_MEDIA_TYPE


def respond(request: Request, payload: object, status_code: int = 200) -> Response:
    """`payload` as JSON, in the media type the request accepts."""
    return JSONResponse(payload, status_code=status_code, media_type=_media_type(request))
