"""The registry's HTTP routes, one router per concern, in the order `create_app` includes them."""

from __future__ import annotations

from fastapi import APIRouter

from streaming_pipeline.devstack.registry.routes import compatibility, config, root, schemas, subjects

ROUTERS: tuple[APIRouter, ...] = (root.router, schemas.router, subjects.router, compatibility.router, config.router)

__all__ = ["ROUTERS"]
