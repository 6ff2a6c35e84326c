"""Routes testing a schema's compatibility with one version of a subject, or with the versions its level names."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from streaming_pipeline.devstack.registry.responses import respond
from streaming_pipeline.devstack.registry.routes.dependencies import JsonBody, Registry, flag

router = APIRouter()


@router.post("/compatibility/subjects/{subject}/versions/{version}")
async def test_compatibility(
    request: Request, registry: Registry, subject: str, version: str, body: JsonBody
) -> Response:
    verbose = flag(request, "verbose")
    return respond(request, await run_in_threadpool(registry.test_compatibility, subject, version, body, verbose))


@router.post("/compatibility/subjects/{subject}/versions")
async def test_compatibility_all(request: Request, registry: Registry, subject: str, body: JsonBody) -> Response:
    verbose = flag(request, "verbose")
    return respond(request, await run_in_threadpool(registry.test_compatibility, subject, None, body, verbose))
