"""FastAPI routes of the Confluent-compatible schema registry."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streaming_pipeline.registry.compatibility import load_json
from streaming_pipeline.registry.exceptions import RegistryError, request_too_large, schema_not_found
from streaming_pipeline.registry.service import SchemaRegistry

log = logging.getLogger(__name__)

SCHEMA_REGISTRY_MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
_TRUE = {"true", "1", "yes"}


def _media_type(request: Request) -> str:
    accept = request.headers.get("accept", "").lower()
    if "application/json" in accept and "schemaregistry" not in accept and "*/*" not in accept:
        return "application/json"
    return SCHEMA_REGISTRY_MEDIA_TYPE


def _respond(request: Request, payload: Any, status_code: int = 200) -> Response:
    return JSONResponse(payload, status_code=status_code, media_type=_media_type(request))


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").strip().lower() in _TRUE


def _page(request: Request, items: list[Any]) -> list[Any]:
    try:
        offset = max(int(request.query_params.get("offset", "0")), 0)
        limit = int(request.query_params.get("limit", "-1"))
    except ValueError:
        return items
    items = items[offset:]
    return items if limit < 0 else items[:limit]


async def _body(request: Request) -> dict[str, Any]:
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


def _schema_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise schema_not_found(f"Schema {text} not found") from None


class _BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, so one request cannot exhaust the server's memory.

    A declared Content-Length over the limit is refused before any of the body is read; a body sent
    without one (chunked) is refused as soon as the bytes received pass the limit.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            response = _respond(request, request_too_large(self.limit).to_body(), 413)
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise request_too_large(self.limit)
            return message

        await self.app(scope, limited_receive, send)


def create_app(data_dir: Path, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> FastAPI:
    """The registry's ASGI app, persisting into `data_dir` (created if missing).

    Request bodies over `max_request_bytes` are answered 413.
    """
    if max_request_bytes < 1:
        raise ValueError(f"max_request_bytes must be positive, not {max_request_bytes}")
    registry = SchemaRegistry(Path(data_dir))

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            registry.close()

    app = FastAPI(
        title="streaming-pipeline schema registry",
        description="A small Confluent Schema Registry compatible server (Avro only).",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.registry = registry
    app.add_middleware(_BodyLimit, limit=max_request_bytes)

    async def call(function: Callable[..., Any], *args: Any) -> Any:
        return await run_in_threadpool(function, *args)

    @app.exception_handler(RegistryError)
    async def _registry_error(request: Request, exc: RegistryError) -> Response:
        response = _respond(request, exc.to_body(), exc.http_status)
        if exc.http_status == 413:
            # the rest of the oversized body stays unread: close rather than drain it for the next request
            response.headers["Connection"] = "close"
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _respond(request, {"error_code": exc.status_code, "message": str(exc.detail)}, exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _respond(request, {"error_code": 422, "message": str(exc.errors())}, 422)

    @app.exception_handler(Exception)
    async def _unexpected_error(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _respond(request, {"error_code": 500, "message": f"{type(exc).__name__}: {exc}"}, 500)

    # -- root, types, contexts, mode --------------------------------------------------

    @app.get("/")
    async def root(request: Request) -> Response:
        return _respond(request, {})

    @app.get("/schemas/types")
    async def schema_types(request: Request) -> Response:
        return _respond(request, registry.schema_types())

    @app.get("/contexts")
    async def contexts(request: Request) -> Response:
        return _respond(request, ["."])

    @app.get("/mode")
    async def global_mode(request: Request) -> Response:
        return _respond(request, {"mode": "READWRITE"})

    @app.get("/mode/{subject}")
    async def subject_mode(request: Request, subject: str) -> Response:
        return _respond(request, {"mode": "READWRITE"})

    # -- schemas by id ----------------------------------------------------------------

    @app.get("/schemas/ids/{schema_id}")
    async def get_schema(request: Request, schema_id: str) -> Response:
        return _respond(request, await call(registry.get_schema, _schema_id(schema_id)))

    @app.get("/schemas/ids/{schema_id}/schema")
    async def get_raw_schema(request: Request, schema_id: str) -> Response:
        payload = await call(registry.get_schema, _schema_id(schema_id))
        return _respond(request, json.loads(payload["schema"]))

    @app.get("/schemas/ids/{schema_id}/versions")
    async def get_schema_versions(request: Request, schema_id: str) -> Response:
        result = await call(
            registry.get_schema_versions,
            _schema_id(schema_id),
            _flag(request, "deleted"),
            request.query_params.get("subject"),
        )
        return _respond(request, _page(request, result))

    @app.get("/schemas/ids/{schema_id}/subjects")
    async def get_schema_subjects(request: Request, schema_id: str) -> Response:
        result = await call(
            registry.get_schema_subjects,
            _schema_id(schema_id),
            _flag(request, "deleted"),
            request.query_params.get("subject"),
        )
        return _respond(request, _page(request, result))

    @app.get("/schemas/guids/{guid}")
    async def get_schema_by_guid(request: Request, guid: str) -> Response:
        return _respond(request, await call(registry.get_schema_by_guid, guid))

    # -- subjects -----------------------------------------------------------------------

    @app.get("/subjects")
    async def list_subjects(request: Request) -> Response:
        result = await call(
            registry.list_subjects,
            request.query_params.get("subjectPrefix"),
            _flag(request, "deleted"),
            _flag(request, "deleted_only") or _flag(request, "deletedOnly"),
        )
        return _respond(request, _page(request, result))

    @app.post("/subjects/{subject}/versions")
    async def register(request: Request, subject: str) -> Response:
        body = await _body(request)
        return _respond(request, await call(registry.register, subject, body))

    @app.post("/subjects/{subject}")
    async def lookup(request: Request, subject: str) -> Response:
        body = await _body(request)
        return _respond(request, await call(registry.lookup, subject, body, _flag(request, "deleted")))

    @app.get("/subjects/{subject}/versions")
    async def list_versions(request: Request, subject: str) -> Response:
        result = await call(
            registry.list_versions,
            subject,
            _flag(request, "deleted"),
            _flag(request, "deleted_only") or _flag(request, "deletedOnly"),
        )
        return _respond(request, _page(request, result))

    @app.get("/subjects/{subject}/versions/{version}")
    async def get_version(request: Request, subject: str, version: str) -> Response:
        return _respond(request, await call(registry.get_version, subject, version, _flag(request, "deleted")))

    @app.get("/subjects/{subject}/versions/{version}/schema")
    async def get_version_schema(request: Request, subject: str, version: str) -> Response:
        payload = await call(registry.get_version, subject, version, _flag(request, "deleted"))
        return _respond(request, json.loads(payload["schema"]))

    @app.get("/subjects/{subject}/versions/{version}/referencedby")
    async def referenced_by(request: Request, subject: str, version: str) -> Response:
        return _respond(request, _page(request, await call(registry.referenced_by, subject, version)))

    @app.delete("/subjects/{subject}")
    async def delete_subject(request: Request, subject: str) -> Response:
        return _respond(request, await call(registry.delete_subject, subject, _flag(request, "permanent")))

    @app.delete("/subjects/{subject}/versions/{version}")
    async def delete_version(request: Request, subject: str, version: str) -> Response:
        result = await call(registry.delete_version, subject, version, _flag(request, "permanent"))
        return _respond(request, result)

    # -- compatibility ----------------------------------------------------------------------

    @app.post("/compatibility/subjects/{subject}/versions/{version}")
    async def test_compatibility(request: Request, subject: str, version: str) -> Response:
        body = await _body(request)
        result = await call(registry.test_compatibility, subject, version, body, _flag(request, "verbose"))
        return _respond(request, result)

    @app.post("/compatibility/subjects/{subject}/versions")
    async def test_compatibility_all(request: Request, subject: str) -> Response:
        body = await _body(request)
        result = await call(registry.test_compatibility, subject, None, body, _flag(request, "verbose"))
        return _respond(request, result)

    # -- config -----------------------------------------------------------------------------

    @app.get("/config")
    async def get_global_config(request: Request) -> Response:
        return _respond(request, await call(registry.get_global_config))

    @app.put("/config")
    async def put_global_config(request: Request) -> Response:
        body = await _body(request)
        return _respond(request, await call(registry.set_global_config, body))

    @app.delete("/config")
    async def delete_global_config(request: Request) -> Response:
        return _respond(request, await call(registry.delete_global_config))

    @app.get("/config/{subject}")
    async def get_subject_config(request: Request, subject: str) -> Response:
        result = await call(registry.get_subject_config, subject, _flag(request, "defaultToGlobal"))
        return _respond(request, result)

    @app.put("/config/{subject}")
    async def put_subject_config(request: Request, subject: str) -> Response:
        body = await _body(request)
        return _respond(request, await call(registry.set_subject_config, subject, body))

    @app.delete("/config/{subject}")
    async def delete_subject_config(request: Request, subject: str) -> Response:
        return _respond(request, await call(registry.delete_subject_config, subject))

    return app
