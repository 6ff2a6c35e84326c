"""The project's own small Confluent-Schema-Registry-compatible server (Avro only).

`create_app(data_dir)` builds the FastAPI app; `python -m streaming_pipeline.devstack.registry`
serves it with uvicorn (see `__main__.py`).
"""

from __future__ import annotations

from streaming_pipeline.devstack.registry.app import create_app
from streaming_pipeline.devstack.registry.exceptions import RegistryError
from streaming_pipeline.devstack.registry.responses import SCHEMA_REGISTRY_MEDIA_TYPE

__all__ = ["SCHEMA_REGISTRY_MEDIA_TYPE", "RegistryError", "create_app"]
