"""Routes of the compatibility level (global and per subject) and of the mode (always READWRITE)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from streaming_pipeline.devstack.registry.responses import respond
from streaming_pipeline.devstack.registry.routes.dependencies import JsonBody, Registry, flag

router = APIRouter()


@router.get("/mode")
async def global_mode(request: Request) -> Response:
    return respond(request, {"mode": "READWRITE"})


@router.get("/mode/{subject}")
async def subject_mode(request: Request) -> Response:
    return respond(request, {"mode": "READWRITE"})


@router.get("/config")
async def get_global_config(request: Request, registry: Registry) -> Response:
    return respond(request, await run_in_threadpool(registry.get_global_config))


@router.put("/config")
async def put_global_config(request: Request, registry: Registry, body: JsonBody) -> Response:
    return respond(request, await run_in_threadpool(registry.set_global_config, body))


@router.delete("/config")
async def delete_global_config(request: Request, registry: Registry) -> Response:
    return respond(request, await run_in_threadpool(registry.delete_global_config))


@router.get("/config/{subject}")
async def get_subject_config(request: Request, registry: Registry, subject: str) -> Response:
    default_to_global = flag(request, "defaultToGlobal")
    return respond(request, await run_in_threadpool(registry.get_subject_config, subject, default_to_global))


@router.put("/config/{subject}")
async def put_subject_config(request: Request, registry: Registry, subject: str, body: JsonBody) -> Response:
    return respond(request, await run_in_threadpool(registry.set_subject_config, subject, body))


@router.delete("/config/{subject}")
async def delete_subject_config(request: Request, registry: Registry, subject: str) -> Response:
    return respond(request, await run_in_threadpool(registry.delete_subject_config, subject))
