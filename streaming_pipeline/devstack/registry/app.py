"""The FastAPI app of the Confluent-compatible schema registry: the service, the body limit, the routers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from fastapi import FastAPI

from streaming_pipeline.devstack.registry.basic_auth import BasicAuth
from streaming_pipeline.devstack.registry.body_limit import BodyLimit
from streaming_pipeline.devstack.registry.error_handlers import EXCEPTION_HANDLERS
from streaming_pipeline.devstack.registry.routes import ROUTERS
from streaming_pipeline.devstack.registry.service import SchemaRegistry

DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024


@contextlib.asynccontextmanager
async def _close_registry_on_shutdown(app: FastAPI) -> AsyncIterator[None]:
    try:
        yield
    finally:
        registry: SchemaRegistry = app.state.registry
        registry.close()


def create_app(
    data_dir: Path, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, users: Mapping[str, str] | None = None
) -> FastAPI:
    """The registry's ASGI app, persisting into `data_dir` (created if missing).

    Request bodies over `max_request_bytes` are answered 413. With `users` ({user: password}), every request
    needs basic auth of one of them (401 otherwise). The routes reach the service through `app.state.registry`
    (see `routes.dependencies`).
    """
    if max_request_bytes < 1:
        raise ValueError(f"max_request_bytes must be positive, not {max_request_bytes}")
    registry = SchemaRegistry(Path(data_dir))
    app = FastAPI(
        title="streaming-pipeline schema registry",
        description="A small Confluent Schema Registry compatible server (Avro only).",
        lifespan=_close_registry_on_shutdown,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.registry = registry
    app.add_middleware(BodyLimit, limit=max_request_bytes)
    if users:  # added last, so it runs first: nothing of a refused request is read
        app.add_middleware(BasicAuth, users=users)
    for router in ROUTERS:
        app.include_router(router)
    return app
