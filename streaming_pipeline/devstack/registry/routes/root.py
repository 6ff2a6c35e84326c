"""Routes about the service itself: the root, the schema types and the contexts it supports."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from streaming_pipeline.devstack.registry.responses import respond
from streaming_pipeline.devstack.registry.routes.dependencies import Registry

router = APIRouter()


@router.get("/")
async def root(request: Request) -> Response:
    return respond(request, {})


@router.get("/schemas/types")
async def schema_types(request: Request, registry: Registry) -> Response:
    return respond(request, registry.schema_types())


@router.get("/contexts")
async def contexts(request: Request) -> Response:
    return respond(request, ["."])
