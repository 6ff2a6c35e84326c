"""The streaming step of a silver or gold table, as a `StreamingTable` declaration (in SQL or in Python) makes it:
the tables it writes (the table, and its late-rows table), the tables it reads, its one query factory, what a
triggered run reports, its config, priority and place in the continuous run.

The step builds its asset (a multi-asset, for a query writing several tables) when the definitions load, with the
settings of that moment: its config's defaults (from its parameters' environment variables), its automation
condition in triggered mode, its freshness policy in continuous mode. What the step reads is declared
once (`reads`): the assets' deps, the skip while a source table is missing and the query's source paths derive from
it. Its query factory is its one entry point: a triggered run runs it once (availableNow) and the continuous run
keeps it running. Everything else finds the declarations through the component tree (`streamed_tables`): the
continuous run starts each query with the step's own config, table maintenance works on each table in the pool of
the step that writes it, and an offset sensor's fast run takes the latency-critical tables that read only its bronze
table.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg

from streaming_pipeline.components.asset_metadata import SPARK_KINDS, missing_sources, stream_step_args, table_args
from streaming_pipeline.components.expectation_checks import check_specs
from streaming_pipeline.components.parameters import with_environment_defaults
from streaming_pipeline.lakehouse.engine.streams import QueryRun, run_once
from streaming_pipeline.lakehouse.settings import LiveSettings
from streaming_pipeline.lakehouse.table_model import Table
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS
from streaming_pipeline.resources import LakehouseResource, SparkResource
from streaming_pipeline.resources.lakehouse import naming_a_store_gone_away

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

    from streaming_pipeline.lakehouse.connections import Lakehouse
    from streaming_pipeline.lakehouse.engine.streams import Log, StreamQuery
    from streaming_pipeline.lakehouse.expectations import Expectation
    from streaming_pipeline.lakehouse.sources import SourceTopic


@dataclass(frozen=True)
class QueryInputs:
    """What a step's query factory is given: the session, the lakehouse, the Dagster run and where to log."""

    spark: SparkSession
    lakehouse: Lakehouse
    run_id: str | None
    log: Log | None


@dataclass(frozen=True)
class StepRun:
    """One triggered run of a step, as its `compute` receives it: `run()` runs the step's query once and returns
    what it did; `compute` turns that into the step's materializations."""

    context: dg.AssetExecutionContext
    spark: SparkSession
    lakehouse: LakehouseResource
    config: Any
    query: StreamQuery

    def run(self) -> QueryRun:
        """One availableNow run of the step's query, with its hooks (`engine.streams.run_once`)."""
        return run_once(self.query, log=self.context.log)


@dataclass(frozen=True)
class WrittenTable:
    """One table of a step writing several, with its own description (a step writing one table is described by its
    compute's docstring)."""

    table: Table
    description: str | None = None
    owners: tuple[str, ...] | None = None  # None: the project's (asset_metadata.OWNERS)
    downstream_of: tuple[str, ...] = ()  # tables of the same step it derives from (a quarantine, its table)


class StreamedTable:
    """A streaming step: one query from other tables of the lakehouse into `writes`.

    - `step`: the step's name, which names its checkpoint and its concurrency pool too;
    - `writes`: the tables its query writes (a `Table`, or a `WrittenTable` to give it a description of its own);
    - `reads`: the tables its query streams from: its assets' deps; a triggered run skips while one is missing, and
      the continuous run starts the query once they all exist;
    - `query`: the query, from the inputs and the step's config: run once by a triggered run, kept running by the
      continuous run;
    - `compute`: the materializations of a triggered run, from the `StepRun` (its docstring describes the table);
    - `config`: the step's config class, whose `parameter` fields take their defaults from the environment when the
      definitions load;
    - `priority`: its place among the ready steps of a run (higher first);
    - `latency_critical`: in continuous mode it triggers as often as the bronze tables it reads, and a triggered
      fast run of that bronze table writes it too;
    - `updates_in_place`: its query changes rows it wrote (complete, MERGE), so no other query may stream it;
    - `expectations`: the rules on the rows of its first table, each an asset check that its `compute` evaluates
      with each triggered run, and that the continuous run reports.
    """

    def __init__(
        self,
        *,
        step: str,
        writes: Sequence[Table | WrittenTable],
        reads: Sequence[Table | str],
        query: Callable[[QueryInputs, Any], StreamQuery],
        compute: Callable[[StepRun], dg.MaterializeResult | Iterator[dg.MaterializeResult | dg.AssetCheckResult]],
        priority: int,
        config: type[dg.Config] | None = None,
        latency_critical: bool = False,
        updates_in_place: bool = False,
        expectations: Sequence[Expectation] = (),
    ) -> None:
        self.step = step
        self.writes = tuple(w if isinstance(w, WrittenTable) else WrittenTable(w) for w in writes)
        self.read_names = tuple(r if isinstance(r, str) else r.name for r in reads)
        self.make_query = query
        self.compute = compute
        self.priority = priority
        self.config = config
        self.latency_critical = latency_critical
        self.updates_in_place = updates_in_place
        self.expectations = tuple(expectations)

    @property
    def table_names(self) -> list[str]:
        return [written.table.name for written in self.writes]

    @property
    def check_keys(self) -> list[dg.AssetCheckKey]:
        """The keys of the checks its runs evaluate (its expectations')."""
        return [spec.key for spec in check_specs(self.table_names[0], self.expectations)]

    @property
    def reads(self) -> set[str]:
        """The names of the tables its query streams from."""
        return set(self.read_names)

    def query(self, inputs: QueryInputs, config: Any) -> StreamQuery:
        """The step's query for `inputs` and `config`, with the paths of the tables it reads."""
        query = self.make_query(inputs, config)
        return dataclasses.replace(
            query, source_paths=tuple(inputs.lakehouse.table_path(name) for name in self.read_names)
        )

    def config_class(self, environ: Mapping[str, str] | None = None) -> type[dg.Config] | None:
        """The step's config class with the defaults its parameters' environment variables give (None: the step
        takes no config)."""
        return None if self.config is None else with_environment_defaults(self.config, environ)

    def asset(self, live: LiveSettings, environ: Mapping[str, str] | None = None) -> dg.AssetsDefinition:
        """The step's asset, one spec per table it writes, for the live mode and the environment given."""
        deps = sorted(self.reads)
        specs = []
        for written in self.writes:
            args = table_args(written.table, kinds=SPARK_KINDS, live=live, deps=[*deps, *written.downstream_of])
            if written.owners is not None:
                args["owners"] = list(written.owners)
            specs.append(
                dg.AssetSpec(
                    written.table.name, description=written.description or inspect.getdoc(self.compute), **args
                )
            )
        config_class = self.config_class(environ)
        body = self._body() if config_class is None else with_config_class(self._body_with_config(), config_class)
        return dg.multi_asset(
            name=self.step,
            specs=specs,
            check_specs=check_specs(self.table_names[0], self.expectations),
            **stream_step_args(self.step, priority=self.priority),
        )(naming_a_store_gone_away(body))

    def _body(self) -> Callable[..., Iterator[dg.MaterializeResult | dg.AssetCheckResult]]:
        step = self

        def run_step(
            context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource
        ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
            yield from step.run_triggered(context, spark, lakehouse, None)

        return _named(run_step, self.step)

    def _body_with_config(self) -> Callable[..., Iterator[dg.MaterializeResult | dg.AssetCheckResult]]:
        step = self

        def run_step(
            context: dg.AssetExecutionContext, config: Any, spark: SparkResource, lakehouse: LakehouseResource
        ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
            yield from step.run_triggered(context, spark, lakehouse, config)

        return _named(run_step, self.step)

    def run_triggered(
        self, context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource, config: Any
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """A triggered run of the step: nothing while a table it reads is missing (each table it writes gets a
        materialization saying so, each of its checks a result with no row checked), else its query run once and
        its compute's materializations."""
        missing = missing_sources(context, lakehouse, *sorted(self.reads))
        if missing:
            reason = f"{' and '.join(missing)} {'does' if len(missing) == 1 else 'do'} not exist yet"
            for name in self.table_names:
                yield dg.MaterializeResult(asset_key=name, metadata={"skipped": reason})
            # its expectations' checks are outputs of the step too: no row was checked
            for key in self.check_keys:
                yield dg.AssetCheckResult(
                    asset_key=key.asset_key,
                    check_name=key.name,
                    passed=True,
                    description=f"No row was checked: {reason}.",
                    metadata={"skipped": reason, "rows_checked": 0},
                )
            return
        session = spark.get_session()
        query = self.query(QueryInputs(session, lakehouse, context.run_id, context.log), config)
        results = self.compute(StepRun(context, session, lakehouse, config, query))
        yield from [results] if isinstance(results, dg.MaterializeResult) else results


def _named(body: Callable[..., Any], step: str) -> Callable[..., Any]:
    """The asset body named after its step, its annotations resolved: Dagster reads the resources' types from them,
    through wrappers defined in other modules."""
    body.__name__ = body.__qualname__ = step
    resolved = {"context": dg.AssetExecutionContext, "spark": SparkResource, "lakehouse": LakehouseResource}
    body.__annotations__ = {name: resolved.get(name, Any) for name in body.__annotations__ if name != "return"}
    return body


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


class DeclaresStreamedTable:
    """A component that declares a streaming step (`StreamingTable`, in YAML or by a decorator): `streamed_tables`
    finds its step."""

    def streamed_table(self) -> StreamedTable:
        raise NotImplementedError


def streamed_tables(tree: dg.ComponentTree) -> list[StreamedTable]:
    """Every streaming step the project declares, the higher priority first (then by name)."""
    steps = [c.streamed_table() for c in tree.get_all_components(of_type=DeclaresStreamedTable)]  # type: ignore[type-var]
    return sorted(steps, key=lambda t: (-t.priority, t.step))


def live_query_names(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> list[str]:
    """The queries of the continuous run, in the order it starts them: each source's bronze table, then the steps.
    Each names a checkpoint."""
    return [*(source.bronze_table for source in sources), *(step.step for step in steps)]


def latency_critical_query_names(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> list[str]:
    """The queries whose tables a user waits for, which trigger most often in continuous mode: the latency-critical
    steps, the bronze tables they read, and a bronze table no step reads (it is what its user waits for). The others
    trigger less often, to leave them the cores: on 2 cores every query that triggers often makes each of their
    micro-batches longer (docs/performance.md). A project that marks no step latency-critical has every query
    trigger as often."""
    critical = [step for step in steps if step.latency_critical]
    if not critical:  # no table is waited for more than another: none is made to wait
        return live_query_names(sources, steps)
    read = {table for step in steps for table in step.reads}
    read_by_critical = {table for step in critical for table in step.reads}
    bronze = [s.bronze_table for s in sources if s.bronze_table in read_by_critical or s.bronze_table not in read]
    return [*bronze, *(step.step for step in critical)]


def fast_run_tables(bronze_table: str, steps: Sequence[StreamedTable]) -> list[str]:
    """What a triggered fast run writes while another run of the same topic works on the tables downstream: the
    bronze table and the tables of the latency-critical steps that read only it."""
    fast = [step for step in steps if step.latency_critical and step.reads == {bronze_table}]
    return [bronze_table, *(name for step in fast for name in step.table_names)]


def tables_downstream_of(table: str, steps: Sequence[StreamedTable]) -> set[str]:
    """The tables the steps write from `table`, through any number of steps."""
    found: set[str] = set()
    reached = {table}
    while True:
        more = {name for step in steps if step.reads & reached for name in step.table_names} - found
        if not more:
            return found
        found |= more
        reached |= more


def expectation_check_keys(tables: Collection[str], steps: Sequence[StreamedTable]) -> list[dg.AssetCheckKey]:
    """The checks of the expectations on `tables`, which the runs that write them evaluate: a job that runs a
    table's step selects them with its asset."""
    return [key for step in steps if step.table_names[0] in tables for key in step.check_keys]


def writing_steps(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> dict[str, str]:
    """The streaming step that writes each table: a bronze table its own; a silver or gold table the step that
    declares it. A table missing here has no streaming writer (the taxi-zone lookup is a batch asset; the dead
    letters get blind appends from every bronze query, which never conflict with OPTIMIZE or VACUUM)."""
    return {
        **{table.name: source.bronze_table for source in sources for table in source.tables},
        **{name: step.step for step in steps for name in step.table_names},
    }


def declared_tables(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> dict[str, Table]:
    """The declaration of every table the sources' and the steps' queries write, by name: each bronze table, the
    dead letters (every bronze query writes them) and each step's tables."""
    declared = {
        **{table.name: table for source in sources for table in source.tables},
        DEAD_LETTER_RECORDS.name: DEAD_LETTER_RECORDS,
        **{written.table.name: written.table for step in steps for written in step.writes},
    }
    return _with_passed_through_descriptions(declared, steps)


def _with_passed_through_descriptions(declared: dict[str, Table], steps: Sequence[StreamedTable]) -> dict[str, Table]:
    """Each table whose columns are its query's (a streaming table without a declared schema) with the descriptions
    of the columns it passes through: a column it does not describe, named as a column of a table its step reads,
    takes that column's description (of the first table read that has one: streamed tables first), through any
    number of steps."""
    reads = {name: step.read_names for step in steps for name in step.table_names}
    described: dict[str, Table] = {}

    def describe(name: str, seen: frozenset[str]) -> Table:
        if name in described:
            return described[name]
        table = declared[name]
        inherited: dict[str, str] = {}
        for read in reads.get(name, ()) if table.columns_from_query else ():
            if read in declared and read not in seen:
                for column in describe(read, seen | {name}).columns:
                    if column.description:
                        inherited.setdefault(column.name, column.description)
        described[name] = table.described_by(inherited) if inherited else table
        return described[name]

    return {name: describe(name, frozenset()) for name in declared}
