"""Every error answered as Confluent's JSON error body `{"error_code": N, "message": "..."}`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from streaming_pipeline.devstack.registry.exceptions import RegistryError
from streaming_pipeline.devstack.registry.responses import respond

log = logging.getLogger(__name__)


async def _registry_error(request: Request, exc: RegistryError) -> Response:
    response = respond(request, exc.to_body(), exc.http_status)
    if exc.http_status == 413:
        # the rest of the oversized body stays unread: close rather than drain it for the next request
        response.headers["Connection"] = "close"
    return response


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    return respond(request, {"error_code": exc.status_code, "message": str(exc.detail)}, exc.status_code)


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    return respond(request, {"error_code": 422, "message": str(exc.errors())}, 422)


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return respond(request, {"error_code": 500, "message": f"{type(exc).__name__}: {exc}"}, 500)


# FastAPI's own type for `exception_handlers`: the exception is `Any` there, each handler takes its own kind
ExceptionHandlers = dict[int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]]

EXCEPTION_HANDLERS: ExceptionHandlers = {
    RegistryError: _registry_error,
    StarletteHTTPException: _http_error,
    RequestValidationError: _validation_error,
    Exception: _unexpected_error,
}
