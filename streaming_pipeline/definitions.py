"""The code location: every asset, check, job and sensor under `defs/` (loaded with Dagster's
`load_from_defs_folder`), with the resources and the executor. Configuration is read when definitions load."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from streaming_pipeline.components.kafka_delta_source import sources_binding_resources
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline.resources.from_settings import build_resources


def pipeline_definitions() -> dg.Definitions:
    """The assets, checks, jobs and sensors of `defs/`, without resources (for `dg.materialize` in tools and tests,
    which bind their own)."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


def build_definitions(settings: PipelineSettings | None = None) -> dg.Definitions:
    """The code location: `defs/` with the resources bound once, from `settings` (default: the environment's).

    Args:
        settings: the pipeline's settings; None reads them from the environment now.

    Returns:
        The definitions `dagster dev` and `dg` load."""
    settings = settings or PipelineSettings.from_env()
    loaded = pipeline_definitions()
    _check_no_source_binds_resources(loaded)
    return dg.Definitions.merge(
        loaded,
        dg.Definitions(
            resources=build_resources(settings),
            # One process and one Spark session per run: steps share the session instead of each
            # starting a JVM (the multiprocess executor would start one per asset).
            executor=dg.in_process_executor,
        ),
    )


def _check_no_source_binds_resources(loaded: dg.Definitions) -> None:
    """A ConfigurationError naming each source of `defs/` that binds the resources this module binds already (a
    `defs.yaml` from `dg scaffold defs` has `resources: from_environment`)."""
    if loaded.component_tree is None:
        return
    binding = sources_binding_resources(loaded.component_tree)
    if binding:
        raise ConfigurationError(
            f"{', '.join(str(c.declared_at) for c in binding)}: `resources: from_environment` binds the resources, "
            "which this project's definitions.py binds already: delete that line"
        )


defs = build_definitions()
