"""Routes of subjects and their versions: list, register, look up, read and delete."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from streaming_pipeline.devstack.registry.responses import respond
from streaming_pipeline.devstack.registry.routes.dependencies import JsonBody, Registry, flag, page, schema_document

router = APIRouter()


def _deleted_only(request: Request) -> bool:
    return flag(request, "deleted_only") or flag(request, "deletedOnly")


@router.get("/subjects")
async def list_subjects(request: Request, registry: Registry) -> Response:
    prefix = request.query_params.get("subjectPrefix")
    deleted, deleted_only = flag(request, "deleted"), _deleted_only(request)
    result = await run_in_threadpool(registry.list_subjects, prefix, deleted, deleted_only)
    return respond(request, page(request, result))


@router.post("/subjects/{subject}/versions")
async def register(request: Request, registry: Registry, subject: str, body: JsonBody) -> Response:
    return respond(request, await run_in_threadpool(registry.register, subject, body))


@router.post("/subjects/{subject}")
async def lookup(request: Request, registry: Registry, subject: str, body: JsonBody) -> Response:
    return respond(request, await run_in_threadpool(registry.lookup, subject, body, flag(request, "deleted")))


@router.get("/subjects/{subject}/versions")
async def list_versions(request: Request, registry: Registry, subject: str) -> Response:
    deleted, deleted_only = flag(request, "deleted"), _deleted_only(request)
    result = await run_in_threadpool(registry.list_versions, subject, deleted, deleted_only)
    return respond(request, page(request, result))


@router.get("/subjects/{subject}/versions/{version}")
async def get_version(request: Request, registry: Registry, subject: str, version: str) -> Response:
    return respond(request, await run_in_threadpool(registry.get_version, subject, version, flag(request, "deleted")))


@router.get("/subjects/{subject}/versions/{version}/schema")
async def get_version_schema(request: Request, registry: Registry, subject: str, version: str) -> Response:
    payload = await run_in_threadpool(registry.get_version, subject, version, flag(request, "deleted"))
    return respond(request, schema_document(payload))


@router.get("/subjects/{subject}/versions/{version}/referencedby")
async def referenced_by(request: Request, registry: Registry, subject: str, version: str) -> Response:
    return respond(request, page(request, await run_in_threadpool(registry.referenced_by, subject, version)))


@router.delete("/subjects/{subject}")
async def delete_subject(request: Request, registry: Registry, subject: str) -> Response:
    return respond(request, await run_in_threadpool(registry.delete_subject, subject, flag(request, "permanent")))


@router.delete("/subjects/{subject}/versions/{version}")
async def delete_version(request: Request, registry: Registry, subject: str, version: str) -> Response:
    permanent = flag(request, "permanent")
    return respond(request, await run_in_threadpool(registry.delete_version, subject, version, permanent))
