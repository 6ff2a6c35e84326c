"""Routes of schemas by id (and by guid): the schema, its raw text, and where it is registered."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from streaming_pipeline.devstack.registry.responses import respond
from streaming_pipeline.devstack.registry.routes.dependencies import Registry, SchemaId, flag, page, schema_document

router = APIRouter()


@router.get("/schemas/ids/{schema_id}")
async def get_schema(request: Request, registry: Registry, schema_id: SchemaId) -> Response:
    return respond(request, await run_in_threadpool(registry.get_schema, schema_id))


@router.get("/schemas/ids/{schema_id}/schema")
async def get_raw_schema(request: Request, registry: Registry, schema_id: SchemaId) -> Response:
    return respond(request, schema_document(await run_in_threadpool(registry.get_schema, schema_id)))


@router.get("/schemas/ids/{schema_id}/versions")
async def get_schema_versions(request: Request, registry: Registry, schema_id: SchemaId) -> Response:
    deleted, subject = flag(request, "deleted"), request.query_params.get("subject")
    result = await run_in_threadpool(registry.get_schema_versions, schema_id, deleted, subject)
    return respond(request, page(request, result))


@router.get("/schemas/ids/{schema_id}/subjects")
async def get_schema_subjects(request: Request, registry: Registry, schema_id: SchemaId) -> Response:
    deleted, subject = flag(request, "deleted"), request.query_params.get("subject")
    result = await run_in_threadpool(registry.get_schema_subjects, schema_id, deleted, subject)
    return respond(request, page(request, result))


@router.get("/schemas/guids/{guid}")
async def get_schema_by_guid(request: Request, registry: Registry, guid: str) -> Response:
    return respond(request, await run_in_threadpool(registry.get_schema_by_guid, guid))
