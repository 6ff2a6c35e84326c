"""An asset's parameter, declared once on its config field: the environment variable that sets its default, its
default without the variable, how the variable is read and what the parameter does.

    class AmountBranchesConfig(dg.Config):
        high_amount_threshold: float = parameter(
            env="HIGH_AMOUNT_THRESHOLD", default=40.0, kind="number", description="A ride with ... is a high amount"
        )

Everything else derives from the field: the default a run gets (`with_environment_defaults`, read when the
definitions are built), the description the launchpad shows, and the rows of docs/configuration.md's table of the
assets' defaults (a test renders them from the declarations and compares).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pydantic
from pydantic import Field

from streaming_pipeline.lakehouse.settings import PARAMETER_KINDS, read_parameter


def parameter(*, env: str, default: Any, kind: str, description: str, shown_default: str | None = None) -> Any:
    """A config field whose default the environment variable `env` overrides when the definitions are built.

    Args:
        env: The variable.
        default: The default without it.
        kind: How the variable is read: 'number', 'interval' or 'file' (`settings.read_parameter`).
        description: What the parameter does, one sentence without a final period.
        shown_default: How the docs and the launchpad show the default (`default` itself when None).

    Returns:
        A pydantic field for the config class's attribute.
    """
    if kind not in PARAMETER_KINDS:
        raise ValueError(f"parameter {env}: kind {kind!r} is not one of {', '.join(PARAMETER_KINDS)}")
    shown = shown_default if shown_default is not None else f"{default:g}" if isinstance(default, float) else default
    return Field(
        default=default,
        description=f"{description} (default: {env}, else {shown}).",
        json_schema_extra={"env": env, "kind": kind, "shown_default": str(shown), "what": description},
    )


@dataclass(frozen=True)
class Parameter:
    """A parameter as its config field declares it."""

    field: str
    env: str
    kind: str
    default: Any
    shown_default: str
    description: str


def parameters_of(config: type[dg.Config]) -> list[Parameter]:
    """The fields of `config` declared with `parameter`, in their order."""
    found = []
    for name, info in config.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, Mapping) and "env" in extra:
            found.append(
                Parameter(
                    name,
                    str(extra["env"]),
                    str(extra["kind"]),
                    info.default,
                    str(extra["shown_default"]),
                    str(extra["what"]),
                )
            )
    return found


def with_environment_defaults(config: type[dg.Config], environ: Mapping[str, str] | None = None) -> type[dg.Config]:
    """`config` with the defaults its parameters' environment variables set (read now; a value that cannot be used
    is a ConfigurationError naming the variable)."""
    values = {p.field: read_parameter(p.kind, p.env, environ) for p in parameters_of(config)}
    return with_defaults(config, {field: value for field, value in values.items() if value is not None})


def with_defaults(config: type[dg.Config], defaults: Mapping[str, Any]) -> type[dg.Config]:
    """A subclass of `config` whose fields named in `defaults` default to those values (their descriptions and
    validators kept)."""
    if not defaults:
        return config
    unknown = sorted(set(defaults) - set(config.model_fields))
    if unknown:
        raise TypeError(f"{config.__name__} has no field {', '.join(unknown)} to take a default from")
    fields: dict[str, Any] = {}
    for name, value in defaults.items():
        info = copy.copy(config.model_fields[name])
        info.default = value
        fields[name] = (config.model_fields[name].annotation, info)
    return pydantic.create_model(config.__name__, __base__=config, __module__=config.__module__, **fields)
