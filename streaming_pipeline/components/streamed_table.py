"""A silver or gold table streamed from others, declared once in its own module of `defs/` as a Python component:

    @dg.component_instance
    def load(context: dg.ComponentLoadContext) -> StreamedTable:
        return StreamedTable(step=..., writes=[...], compute=..., live_query=..., priority=...)

The declaration builds the step's asset (or multi-asset, for a query writing several tables) when the definitions
load, with the settings of that moment: its config defaults, its automation condition in triggered mode, its
freshness policy in continuous mode. Everything else finds the declarations through the component tree
(`streamed_tables`): the continuous run starts each `live_query` with the step's own config, table maintenance
works on each table in the pool of the step that writes it, and an offset sensor's fast run takes the
latency-critical tables that read only its bronze table.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg
import pydantic

from streaming_pipeline.components.asset_metadata import SPARK_KINDS, stream_step_args, table_args
from streaming_pipeline.lakehouse.settings import LiveSettings, PipelineSettings
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS
from streaming_pipeline.resources.lakehouse import naming_a_store_gone_away

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming_pipeline.lakehouse.connections import Lakehouse
    from streaming_pipeline.lakehouse.engine.streams import Log, StreamQuery
    from streaming_pipeline.lakehouse.sources import SourceTopic
    from streaming_pipeline.lakehouse.table_model import Table


@dataclass(frozen=True)
class LiveQueryInputs:
    """What the continuous run starts a step's live query with."""

    spark: SparkSession
    lakehouse: Lakehouse
    run_id: str | None
    log: Log | None


@dataclass(frozen=True)
class WrittenTable:
    """One table a step writes: its declared columns (`tables`), the tables it is streamed from and, for a step
    writing several tables, its own description (a step writing one table is described by its compute's
    docstring)."""

    table: Table
    deps: Sequence[str]
    description: str | None = None


class StreamedTable(dg.Component):
    """A streaming step: one query from other tables of the lakehouse into `writes`.

    - `step`: the step's name, which names its checkpoint and its concurrency pool too;
    - `writes`: the tables its query writes;
    - `compute`: the asset's function (a `config` parameter is given `config`, with its defaults read from the
      settings by `config_defaults` when the definitions load);
    - `live_query`: the query the continuous run keeps running, from the inputs and the step's config;
    - `priority`: its place among the ready steps of a run (higher first);
    - `latency_critical`: in continuous mode it triggers as often as the bronze tables it reads, and a triggered
      fast run of that bronze table writes it too.
    """

    def __init__(
        self,
        *,
        step: str,
        writes: Sequence[WrittenTable],
        compute: Callable[..., Any],
        live_query: Callable[[LiveQueryInputs, Any], StreamQuery],
        priority: int,
        config: type[dg.Config] | None = None,
        config_defaults: Callable[[PipelineSettings], Mapping[str, Any]] | None = None,
        latency_critical: bool = False,
    ) -> None:
        self.step = step
        self.writes = tuple(writes)
        self.compute = compute
        self.live_query = live_query
        self.priority = priority
        self.config = config
        self.config_defaults = config_defaults
        self.latency_critical = latency_critical

    @property
    def table_names(self) -> list[str]:
        return [written.table.name for written in self.writes]

    @property
    def reads(self) -> set[str]:
        """The tables its query streams from."""
        return {dep for written in self.writes for dep in written.deps}

    def config_class(self, settings: PipelineSettings) -> type[dg.Config] | None:
        """The step's config class with the defaults the settings give (None: the step takes no config)."""
        if self.config is None:
            return None
        return with_defaults(self.config, self.config_defaults(settings) if self.config_defaults else {})

    def asset(self, live: LiveSettings, settings: PipelineSettings) -> dg.AssetsDefinition:
        """The step's asset, one spec per table it writes, for the live mode and the settings given."""
        specs = [
            dg.AssetSpec(
                written.table.name,
                description=written.description or inspect.getdoc(self.compute),
                **table_args(written.table, kinds=SPARK_KINDS, live=live, deps=list(written.deps)),
            )
            for written in self.writes
        ]
        config_class = self.config_class(settings)
        compute = self.compute if config_class is None else with_config_class(self.compute, config_class)
        compute = naming_a_store_gone_away(compute)
        return dg.multi_asset(name=self.step, specs=specs, **stream_step_args(self.step, priority=self.priority))(
            compute
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """Read when the definitions load: LIVE_MODE and the pipeline's settings."""
        return dg.Definitions(assets=[self.asset(LiveSettings.from_env(), PipelineSettings.from_env())])


def with_defaults(config: type[dg.Config], defaults: Mapping[str, Any]) -> type[dg.Config]:
    """A subclass of `config` whose fields named in `defaults` default to those values (their descriptions and
    validators kept)."""
    if not defaults:
        return config
    unknown = sorted(set(defaults) - set(config.model_fields))
    if unknown:
        raise TypeError(f"{config.__name__} has no field {', '.join(unknown)} to take a default from the settings")
    fields: dict[str, Any] = {}
    for name, value in defaults.items():
        info = copy.copy(config.model_fields[name])
        info.default = value
        fields[name] = (config.model_fields[name].annotation, info)
    return pydantic.create_model(config.__name__, __base__=config, __module__=config.__module__, **fields)


def with_config_class(compute: Callable[..., Any], config_class: type[dg.Config]) -> Callable[..., Any]:
    """`compute` with its `config` parameter annotated `config_class`: Dagster takes the run config's schema and
    defaults from that annotation."""
    signature = inspect.signature(compute)
    if "config" not in signature.parameters:
        raise TypeError(f"{compute.__qualname__} declares a config class but takes no `config` parameter")
    wrapper: Callable[..., Any]
    if inspect.isgeneratorfunction(compute):

        @functools.wraps(compute)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            yield from compute(*args, **kwargs)

    else:

        @functools.wraps(compute)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return compute(*args, **kwargs)

    parameters = [
        p.replace(annotation=config_class) if p.name == "config" else p for p in signature.parameters.values()
    ]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return wrapper


def streamed_tables(tree: dg.ComponentTree) -> list[StreamedTable]:
    """Every streaming step the project declares, the higher priority first (then by name)."""
    return sorted(tree.get_all_components(of_type=StreamedTable), key=lambda t: (-t.priority, t.step))


def live_query_names(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> list[str]:
    """The queries of the continuous run, in the order it starts them: each source's bronze table, then the steps.
    Each names a checkpoint."""
    return [*(source.bronze_table for source in sources), *(step.step for step in steps)]


def latency_critical_query_names(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> list[str]:
    """The queries whose tables a user waits for, which trigger most often in continuous mode: the latency-critical
    steps, the bronze tables they read, and a bronze table no step reads (it is what its user waits for). The others
    trigger less often, to leave them the cores: on 2 cores every query that triggers often makes each of their
    micro-batches longer (docs/performance.md)."""
    critical = [step for step in steps if step.latency_critical]
    read = {table for step in steps for table in step.reads}
    read_by_critical = {table for step in critical for table in step.reads}
    bronze = [s.bronze_table for s in sources if s.bronze_table in read_by_critical or s.bronze_table not in read]
    return [*bronze, *(step.step for step in critical)]


def fast_run_tables(bronze_table: str, steps: Sequence[StreamedTable]) -> list[str]:
    """What a triggered fast run writes while another run of the same topic works on the tables downstream: the
    bronze table and the tables of the latency-critical steps that read only it."""
    fast = [step for step in steps if step.latency_critical and step.reads == {bronze_table}]
    return [bronze_table, *(name for step in fast for name in step.table_names)]


def writing_steps(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> dict[str, str]:
    """The streaming step that writes each table: a bronze table its own; a silver or gold table the step that
    declares it. A table missing here has no streaming writer (the taxi-zone lookup is a batch asset; the dead
    letters get blind appends from every bronze query, which never conflict with OPTIMIZE or VACUUM)."""
    return {
        **{source.bronze_table: source.bronze_table for source in sources},
        **{name: step.step for step in steps for name in step.table_names},
    }


def declared_tables(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> dict[str, Table]:
    """The declaration of every table the sources' and the steps' queries write, by name: each bronze table, the
    dead letters (every bronze query writes them) and each step's tables."""
    return {
        **{source.bronze_table: source.table for source in sources},
        DEAD_LETTER_RECORDS.name: DEAD_LETTER_RECORDS,
        **{written.table.name: written.table for step in steps for written in step.writes},
    }
