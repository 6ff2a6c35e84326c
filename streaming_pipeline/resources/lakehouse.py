"""Lakehouse resource: where Delta tables and streaming checkpoints live, and how much a micro-batch reads.
The assets' own parameters (window, watermark, join gap, amount threshold, zone lookup) are their config."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import dagster as dg
from pydantic import Field

from streaming_pipeline.lakehouse.engine.object_store import STOPPED_MID_STEP, check_reachable, store_error
from streaming_pipeline.lakehouse.settings import DEFAULT_MAX_OFFSETS_PER_TRIGGER


class LakehouseResource(dg.ConfigurableResource):
    """Root of the Delta tables (`<root>/<asset>`) and checkpoints (`<root>/_checkpoints/<asset>`)."""

    root: str = Field(description="LAKEHOUSE_DIR: a local path or an object-store URI (s3a://...).")
    max_offsets_per_trigger: int = Field(
        default=DEFAULT_MAX_OFFSETS_PER_TRIGGER,
        gt=0,
        description="MAX_OFFSETS_PER_TRIGGER: upper bound of Kafka records per micro-batch.",
    )
    max_files_per_trigger: int = Field(default=1000, gt=0, description="Upper bound of Delta files per micro-batch.")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A run's step or a sensor's tick starts by reaching the lakehouse's object store, if it is on one: a store
        away, refused keys or a missing bucket is a StorageError naming the setting, before anything is read."""
        check_reachable(self.root)

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def table_path(self, asset_name: str) -> str:
        return self._join(asset_name)

    def checkpoint_path(self, asset_name: str) -> str:
        return self._join("_checkpoints", asset_name)


def naming_a_store_gone_away(compute: Callable[..., Any]) -> Callable[..., Any]:
    """An asset's `compute` (taking its `lakehouse` resource), whose failure while the lakehouse's object store is
    away or refuses the keys is raised as the StorageError naming the store and the settings, chained to what
    failed: not a stack trace from inside a micro-batch. Any other failure is raised as it is."""

    def explained(exc: Exception, kwargs: dict[str, Any]) -> Exception:
        lakehouse = kwargs.get("lakehouse")
        if isinstance(lakehouse, LakehouseResource):
            return store_error(lakehouse.root, STOPPED_MID_STEP) or exc
        return exc

    wrapper: Callable[..., Any]
    if inspect.isgeneratorfunction(compute):

        @functools.wraps(compute)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                yield from compute(*args, **kwargs)
            except Exception as exc:
                error = explained(exc, kwargs)
                if error is exc:
                    raise
                raise error from exc

    else:

        @functools.wraps(compute)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return compute(*args, **kwargs)
            except Exception as exc:
                error = explained(exc, kwargs)
                if error is exc:
                    raise
                raise error from exc

    return wrapper
