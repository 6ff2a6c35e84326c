"""The continuous mode (`LIVE_MODE=continuous`, docs/continuous-mode.md): one long-running run keeps every streaming
query of the pipeline running on the warm engine, and a sensor keeps that run alive.

The run's one op claims the concurrency pool of every checkpoint it streams when it starts (`CheckpointPools`), so
no second continuous run works on them meanwhile, and lends one to a step of another run that waits for it (a
manual run, table maintenance): it stops that query until the pool is back. It frees the pools when it ends, and
run monitoring frees them after a run whose process was killed. While it runs, the offset sensors stand aside. It
reports each table as an asset materialization at most every `CONTINUOUS_REPORT_SECONDS` (rows since the previous
report, the Delta version, the Kafka offsets), a table caught up with its sources now and then (so that its
freshness policy does not call an idle table late), and the consumer lag as an observation when it changed, so
that a day of streaming adds a bounded number of events. Terminating the run (UI) stops every query: the
termination is taken between two rounds of calls to the engine, never inside one (`engine.interrupts`).
"""

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg
import pydantic
from pydantic import Field

from streaming_pipeline.asset_metadata import checkpoint_pool, current_column_schema
from streaming_pipeline.bronze.ingestion import bronze_query
from streaming_pipeline.bronze.offsets import consumed_offsets, consumer_lag
from streaming_pipeline.components.kafka_delta_source import declared_sources
from streaming_pipeline.defs.bronze.offset_sensors import lag_observation
from streaming_pipeline.engine.catalog import has_persistent_catalog, register
from streaming_pipeline.engine.continuous import ContinuousQueries
from streaming_pipeline.engine.delta_log import commits, latest_version
from streaming_pipeline.engine.interrupts import interrupts_held
from streaming_pipeline.engine.spark import stop_session_queries
from streaming_pipeline.engine.streams import StreamQuery, StreamRunReport
from streaming_pipeline.engine.table_snapshot import row_count
from streaming_pipeline.errors import StreamingPipelineError
from streaming_pipeline.live_runs import (
    CONTINUOUS_JOB,
    continuous_run_in_flight,
    recent_failures,
    retry_backoff_seconds,
)
from streaming_pipeline.resources import KafkaResource, LakehouseResource, SchemaRegistryResource, SparkResource
from streaming_pipeline.settings import LiveSettings, PipelineSettings, SensorSettings, trigger_interval
from streaming_pipeline.sources import SourceTopic
from streaming_pipeline.streamed_table import (
    LiveQueryInputs,
    StreamedTable,
    declared_tables,
    latency_critical_query_names,
    live_query_names,
    streamed_tables,
    with_config_class,
)
from streaming_pipeline.table_model import Table

CONTINUOUS_SENSOR = "continuous_streams_sensor"
#: The run tag naming the Spark Connect session a continuous run streams in.
SESSION_TAG = "streaming_pipeline/spark_connect_session"
#: How many of the latest failed continuous runs a new one looks at for queries they left running.
ORPHAN_RUNS_CHECKED = 3
#: How often the run asks whether each query is still active (a query that failed restarts at the next poll);
#: the queries trigger on their own, so polling more often makes nothing faster, it only costs CPU when idle.
POLL_SECONDS = 2.0
#: How often the run looks for steps of other runs waiting for one of its checkpoints.
LENDING_CHECK_SECONDS = 5.0
#: The defaults of the settings; the job's own default config is read from the environment when it is built.
_LIVE = LiveSettings()


class ContinuousStreamsConfig(dg.Config):
    """How the queries run. The job's config class (`continuous_config_class`) adds one field per streamed table
    that takes run config, with the table's own config (as its asset takes it in triggered mode)."""

    trigger_interval: str = Field(
        default=_LIVE.trigger_interval,
        description="The latency-critical queries (raw_rides and vendor_counts) start a micro-batch this often, when "
        "data waits (default: CONTINUOUS_TRIGGER_INTERVAL, 500 milliseconds).",
    )
    downstream_trigger_interval: str = Field(
        default=_LIVE.downstream_trigger_interval,
        description="The other queries (raw_pickup_locations, the branches, the enrichment, the join and the windows) "
        "start a micro-batch this often, when data waits (default: CONTINUOUS_DOWNSTREAM_TRIGGER_INTERVAL, "
        "2 minutes).",
    )
    report_every_seconds: float = Field(
        default=_LIVE.report_seconds,
        gt=0,
        description="At most one materialization per table this often (default: CONTINUOUS_REPORT_SECONDS, 30).",
    )
    caught_up_report_seconds: float = Field(
        default=_LIVE.caught_up_report_seconds,
        gt=0,
        description="A table caught up with its sources but with no new rows is reported this often, so that its "
        "freshness policy sees it current (default: a fifth of CONTINUOUS_FRESHNESS_SECONDS, 60).",
    )
    reconcile_every_seconds: float = Field(
        default=_LIVE.reconcile_seconds,
        gt=0,
        description="The window query is stopped for its reconcile at most this often, after new rides (default: "
        "CONTINUOUS_RECONCILE_SECONDS, 300).",
    )

    @classmethod
    def from_settings(cls, live: LiveSettings) -> "ContinuousStreamsConfig":
        """The job's default config: what the environment sets (the tables' own fields keep their defaults)."""
        return cls(
            trigger_interval=live.trigger_interval,
            downstream_trigger_interval=live.downstream_trigger_interval,
            report_every_seconds=live.report_seconds,
            caught_up_report_seconds=live.caught_up_report_seconds,
            reconcile_every_seconds=live.reconcile_seconds,
        )


def continuous_config_class(
    steps: Sequence[StreamedTable], settings: PipelineSettings
) -> type[ContinuousStreamsConfig]:
    """ContinuousStreamsConfig with a field per step that takes run config: the step's config class, its defaults
    from `settings`, so that the continuous run takes the same parameters as the triggered runs."""
    fields: dict[str, Any] = {}
    for step in steps:
        config = step.config_class(settings)
        if config is not None:
            fields[step.step] = (
                config,
                Field(default=config(), description=f"The parameters of {step.step}, as its asset's run config."),
            )
    return pydantic.create_model(
        ContinuousStreamsConfig.__name__, __base__=ContinuousStreamsConfig, __module__=__name__, **fields
    )


class CheckpointPools:
    """The concurrency pool of every checkpoint the run streams, one claim per pool under a step key of its own
    (`continuous_streams:<query>`), so that each can be freed alone.

    A step of another run that waits for one of them (a manual run, a table's maintenance) gets it: the run stops
    that query, frees the pool and queues for it again behind that step, and starts the query once the pool is
    its own again. With run-granular pools (an instance not written by `stack up`), nothing is claimed.
    """

    def __init__(self, context: dg.OpExecutionContext, pools: dict[str, str]) -> None:
        self._storage = context.instance.event_log_storage
        self._run_id = context.run_id
        self._log = context.log
        config = self._storage.get_pool_config()
        granularity = config.pool_granularity.value if config.pool_granularity is not None else None
        if not (self._storage.supports_global_concurrency_limits and granularity == "op"):
            context.log.warning(
                "the instance's concurrency pools are not op-granular (dagster.yaml `concurrency: pools: granularity:"
                " op`, which `streaming-pipeline stack up` writes): this run holds no pool, and a triggered run could "
                "start a query on a checkpoint it streams"
            )
            pools = {}
        for pool in set(pools.values()):
            limits = {limit.name for limit in self._storage.get_pool_limits()}
            if pool not in limits and config.default_pool_limit is not None:
                self._storage.initialize_concurrency_limit_to_default(pool)
        limited = {limit.name for limit in self._storage.get_pool_limits()} if pools else set()
        # A pool without a limit excludes nothing: there is nothing to claim.
        self._pools = {query: pool for query, pool in pools.items() if pool in limited}

    def _key(self, query: str) -> str:
        return f"continuous_streams:{query}"

    def claim(self, query: str) -> bool:
        """Claim (or queue for) the pool of `query`'s checkpoint; True once it is this run's."""
        if query not in self._pools:
            return True
        return self._storage.claim_concurrency_slot(self._pools[query], self._run_id, self._key(query)).is_claimed

    def claim_all(self) -> None:
        """Claim every pool, in a fixed order (no two runs wait for each other's), waiting while a step holds one."""
        for query in sorted(self._pools, key=self._pools.__getitem__):
            said = False
            while not self.claim(query):
                if not said:
                    self._log.info(f"waiting for pool {self._pools[query]}: a step of another run works on it")
                    said = True
                time.sleep(POLL_SECONDS)

    def wanted(self) -> dict[str, str]:
        """The queries whose pool a step of another run waits for: query -> that step, as `step (run id)`."""
        wanted = {}
        for query, pool in self._pools.items():
            for step in self._storage.get_concurrency_info(pool).pending_steps:
                if step.run_id != self._run_id:
                    wanted[query] = f"{step.step_key} (run {step.run_id})"
                    break
        return wanted

    def lend(self, query: str) -> None:
        """Free the pool of `query` for the step waiting for it, and queue for it again behind that step."""
        self._storage.free_concurrency_slot_for_step(self._run_id, self._key(query))
        self.claim(query)

    def free_all(self) -> None:
        for query in self._pools:
            self._storage.free_concurrency_slot_for_step(self._run_id, self._key(query))


def continuous_streams_op(
    sources: Sequence[SourceTopic], steps: Sequence[StreamedTable], config_class: type[ContinuousStreamsConfig]
) -> dg.OpDefinition:
    """The op of the continuous run: the bronze query of each of `sources`, then the live query of each of `steps`;
    its config is a `config_class` (`continuous_config_class`)."""

    def continuous_streams(
        context: dg.OpExecutionContext,
        config: ContinuousStreamsConfig,
        spark: SparkResource,
        kafka: KafkaResource,
        schema_registry: SchemaRegistryResource,
        lakehouse: LakehouseResource,
    ) -> None:
        interval = trigger_interval(config.trigger_interval, name="trigger_interval")
        downstream = trigger_interval(config.downstream_trigger_interval, name="downstream_trigger_interval")
        fast = set(latency_critical_query_names(sources, steps))
        names = live_query_names(sources, steps)
        intervals = {name: interval if name in fast else downstream for name in names}
        pools = CheckpointPools(context, {name: checkpoint_pool(name) for name in names})
        _stop_orphaned_queries(context, spark)
        try:
            pools.claim_all()
            _stream(context, config, sources, steps, intervals, pools, spark, kafka, schema_registry, lakehouse)
        finally:
            pools.free_all()

    return dg.op(
        name="continuous_streams",
        description="Keeps every streaming query of the pipeline running until the run is terminated; holds the pool "
        "of every checkpoint it streams (lending one to a step of another run that waits for it).",
    )(with_config_class(continuous_streams, config_class))


def _stream(
    context: dg.OpExecutionContext,
    config: ContinuousStreamsConfig,
    sources: Sequence[SourceTopic],
    steps: Sequence[StreamedTable],
    intervals: dict[str, str],
    pools: CheckpointPools,
    spark: SparkResource,
    kafka: KafkaResource,
    schema_registry: SchemaRegistryResource,
    lakehouse: LakehouseResource,
) -> None:
    session = spark.get_session()
    session_id = getattr(session, "session_id", None)
    if spark.is_remote and session_id:
        context.instance.add_run_tags(context.run_id, {SESSION_TAG: str(session_id)})
    # Starting a bronze query checks its table, checkpoint and topic (and raises BronzeStateError, naming
    # `streaming-pipeline replay`, when they disagree).
    inputs = LiveQueryInputs(spark=session, lakehouse=lakehouse, run_id=context.run_id, log=context.log)
    queries = [
        *(bronze_query(session, kafka, schema_registry, lakehouse, source=source) for source in sources),
        *(step.live_query(inputs, getattr(config, step.step, None)) for step in steps),
    ]
    runner = ContinuousQueries(
        queries,
        trigger_interval=intervals[queries[0].name],
        intervals=intervals,
        pause_every_seconds=config.reconcile_every_seconds,
        log=context.log,
        active_ids=lambda: {str(query.id) for query in session.streams.active},
    )
    declared = declared_tables(sources, steps)

    def name_table(table: str) -> bool:
        return table in declared and register(session, declared[table].catalog_name, lakehouse.table_path(table))

    reporter = TableReporter(
        kafka,
        lakehouse,
        queries,
        sources,
        declared,
        caught_up_every=config.caught_up_report_seconds,
        name_table=name_table if has_persistent_catalog(session) else None,
    )
    lent: set[str] = set()
    next_report = next_lending_check = time.monotonic()
    next_report += config.report_every_seconds
    try:
        while True:
            with interrupts_held():  # a termination is raised at the end of the round, else in the sleep
                runner.poll()
                now = time.monotonic()
                if now >= next_lending_check:
                    _lend_and_take_back(context, runner, pools, lent)
                    next_lending_check = now + LENDING_CHECK_SECONDS
                if now >= next_report:
                    for event in reporter.events(runner.take_reports(), runner.caught_up()):
                        context.log_event(event)
                    context.log.info(reporter.summary())
                    next_report = now + config.report_every_seconds
            time.sleep(POLL_SECONDS)
    finally:
        # Terminated (Dagster raises DagsterExecutionInterruptedError) or failed: no query outlives the run.
        with interrupts_held():
            runner.stop()


def _stop_orphaned_queries(context: dg.OpExecutionContext, spark: SparkResource) -> None:
    """Stop the queries that continuous runs whose process died left running in the Spark Connect server.

    A killed run's queries go on writing until another query starts on their checkpoints, which this run does only
    once it holds their pools (run monitoring frees a dead run's pools after a while): stopped now, they write
    nothing meanwhile, and nothing is left running if this run ends before its queries start."""
    if not spark.is_remote:
        return  # an in-process driver's queries died with its process
    failed = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=CONTINUOUS_JOB, statuses=[dg.DagsterRunStatus.FAILURE]),
        limit=ORPHAN_RUNS_CHECKED,
    )
    for run in failed:
        session_id = run.tags.get(SESSION_TAG)
        if not session_id:
            continue
        stopped = stop_session_queries(str(spark.remote), session_id)
        if stopped:
            context.log.info(
                f"stopped {len(stopped)} queries that run {run.run_id} left running when its process died: "
                f"{', '.join(stopped)}"
            )


def _lend_and_take_back(
    context: dg.OpExecutionContext, runner: ContinuousQueries, pools: CheckpointPools, lent: set[str]
) -> None:
    """Stop and lend the checkpoints another run's step waits for; start again those that came back."""
    for query, step in pools.wanted().items():
        if query not in lent:
            runner.hold(query)
            pools.lend(query)
            lent.add(query)
            context.log.info(f"{query}: stopped, its checkpoint lent to step {step}")
    for query in sorted(lent):
        if pools.claim(query):
            lent.discard(query)
            runner.resume(query)
            context.log.info(f"{query}: its checkpoint is back, streaming again")


class TableReporter:
    """What the run says of its tables: a materialization per table that has new commits since its last one, with
    the rows those commits wrote; one with no rows every `caught_up_every` seconds for a table whose queries (and
    those of its sources) are caught up, so that an idle table is not late by its freshness policy while a table
    for which data waits and no commit comes is; and the consumer lag of each bronze table when it changed."""

    def __init__(
        self,
        kafka: KafkaResource,
        lakehouse: LakehouseResource,
        queries: Sequence[StreamQuery],
        sources: Sequence[SourceTopic],
        declared: Mapping[str, Table],
        *,
        caught_up_every: float,
        clock: Callable[[], float] = time.monotonic,
        name_table: Callable[[str], object] | None = None,
    ) -> None:
        self._kafka = kafka
        self._name_table = name_table  # gives a table its catalog name, once per run, when it is first seen
        self._named: set[str] = set()
        self._lakehouse = lakehouse
        self._tables = {q.name: q.tables for q in queries}
        by_path = {lakehouse.table_path(t): t for q in queries for t in q.tables}
        # The tables each query reads that another query writes (taxi_zones is loaded, not streamed).
        self._inputs = {q.name: tuple(by_path[p] for p in q.source_paths if p in by_path) for q in queries}
        self._caught_up_every = caught_up_every
        self._clock = clock
        self._sources = {source.bronze_table: source for source in sources}
        self._declared = declared
        self._versions = {t: latest_version(lakehouse.table_path(t)) for ts in self._tables.values() for t in ts}
        self._reported_at: dict[str, float] = {}
        self._lags: dict[str, int] = {}
        self._rows: dict[str, int] = {}
        self._reports: dict[str, StreamRunReport] = {}

    def events(
        self, reports: dict[str, StreamRunReport], caught_up: set[str]
    ) -> list[dg.AssetMaterialization | dg.AssetObservation]:
        """The events of one report; `caught_up`: the queries waiting for data (`ContinuousQueries.caught_up`)."""
        events: list[dg.AssetMaterialization | dg.AssetObservation] = []
        self._rows = {}
        self._reports = reports
        consumed = {table: self._consumed(table) for table in self._sources}
        current = self._current_tables(caught_up)
        for query, tables in self._tables.items():
            report = reports.get(query)
            for table in tables:
                materialization = self._materialization(table, report, consumed.get(table), table in current)
                if materialization is not None:
                    self._reported_at[table] = self._clock()
                    events.append(materialization)
        for table, offsets in consumed.items():
            observation = self._lag(table, offsets) if offsets is not None else None
            if observation is not None:
                events.append(observation)
        return events

    def _current_tables(self, caught_up: set[str]) -> set[str]:
        """The tables every writer of which is caught up, and so are the writers of every table those read."""
        writers: dict[str, set[str]] = {}
        for query, tables in self._tables.items():
            for table in tables:
                writers.setdefault(table, set()).add(query)
        current_queries: set[str] = set()
        changed = True
        while changed:  # bronze first, then what reads it, ...
            changed = False
            for query in caught_up - current_queries:
                if all(writers[t] <= current_queries for t in self._inputs.get(query, ())):
                    current_queries.add(query)
                    changed = True
        return {table for table, queries in writers.items() if queries <= current_queries}

    def summary(self) -> str:
        """One line: the rows each table got since the previous report, and each query's micro-batches."""
        written = ", ".join(f"{t} {n:,}" for t, n in self._rows.items() if n) or "nothing"
        batches = ", ".join(
            f"{name} {r.batches} ({r.trigger_seconds() / r.batches:.1f} s each)"
            for name, r in self._reports.items()
            if r.batches
        )
        return f"since the previous report: rows written: {written}; micro-batches: {batches or 'none'}"

    def _consumed(self, table: str) -> dict[int, int] | None:
        """The Kafka offsets the bronze table has consumed, read once per report (None when unreadable: the bronze
        query says why itself)."""
        try:
            return consumed_offsets(
                self._lakehouse.table_path(table),
                self._lakehouse.checkpoint_path(table),
                table,
                self._sources[table].topic,
            )
        except StreamingPipelineError:
            return None

    def _materialization(
        self, table: str, report: StreamRunReport | None, consumed: dict[int, int] | None, current: bool
    ) -> dg.AssetMaterialization | None:
        path = self._lakehouse.table_path(table)
        version, previous = latest_version(path), self._versions.get(table)
        if version is None:
            return None
        if self._name_table is not None and table not in self._named:
            self._name_table(table)
            self._named.add(table)
        description = None
        if version == previous:
            reported_at = self._reported_at.get(table)
            if not current or (reported_at is not None and self._clock() - reported_at < self._caught_up_every):
                return None
            description = "No new rows: the table is caught up with its sources."
        self._versions[table] = version
        written = sum(c.output_rows for c in commits(path, after=previous) or []) if version != previous else 0
        self._rows[table] = written
        metadata: dict[str, Any] = {
            "rows_written": dg.MetadataValue.int(written),
            "delta_version": dg.MetadataValue.int(version),
            "table_path": dg.MetadataValue.path(path),
        }
        if report is not None:
            metadata["rows_read"] = dg.MetadataValue.int(report.input_rows)
            metadata["micro_batches"] = dg.MetadataValue.int(report.batches)
        rows = row_count(path, version)
        if rows is not None:
            metadata["dagster/row_count"] = dg.MetadataValue.int(rows)
        if version != previous and table in self._declared:  # the columns as they are now: a new field joins them
            schema = current_column_schema(None, path, version, self._declared[table])
            if schema is not None:
                metadata["dagster/column_schema"] = schema
        if consumed is not None:
            metadata["consumed_offsets"] = dg.MetadataValue.json({str(p): o for p, o in consumed.items()})
        return dg.AssetMaterialization(asset_key=table, description=description, metadata=metadata)

    def _lag(self, table: str, consumed: dict[int, int]) -> dg.AssetObservation | None:
        try:
            end = {p: high for p, (_, high) in self._kafka.watermark_offsets(self._sources[table].topic).items()}
        except StreamingPipelineError:
            return None  # Kafka away: the queries say so themselves
        lag = consumer_lag(end, consumed)
        total = sum(lag.values())
        if self._lags.get(table) == total:
            return None
        self._lags[table] = total
        return lag_observation(dg.AssetKey(table), end, lag)


def build_continuous_job(
    sources: Sequence[SourceTopic], steps: Sequence[StreamedTable], live: LiveSettings, settings: PipelineSettings
) -> dg.JobDefinition:
    """The continuous run's job over `sources` and `steps`, its default config from `live` and `settings`."""
    config_class = continuous_config_class(steps, settings)
    streams = continuous_streams_op(sources, steps, config_class)
    config = config_class.from_settings(live)

    @dg.job(
        name=CONTINUOUS_JOB,
        config=dg.RunConfig(ops={streams.name: config}),
        description="The continuous mode: every streaming query of the pipeline, kept running until terminated.",
        tags={"live_mode": "continuous"},
    )
    def continuous_job() -> None:
        streams()

    return continuous_job


def build_continuous_sensor(job: dg.JobDefinition, policy: SensorSettings, live: LiveSettings) -> dg.SensorDefinition:
    @dg.sensor(
        name=CONTINUOUS_SENSOR,
        job=job,
        description=f"Keeps one run of {CONTINUOUS_JOB} in flight: launches it when there is none, and relaunches "
        "it with back-off after a failure. Running by default with LIVE_MODE=continuous.",
        minimum_interval_seconds=policy.interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING if live.continuous else dg.DefaultSensorStatus.STOPPED,
    )
    def continuous_streams_sensor(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        run = continuous_run_in_flight(context.instance)
        if run is not None:
            return dg.SkipReason(f"run {run.run_id} streams ({run.status.value.lower()})")
        failures, since = recent_failures(context.instance, CONTINUOUS_SENSOR)
        if failures and since is not None:
            backoff = retry_backoff_seconds(failures, policy)
            if since < backoff:
                return dg.SkipReason(f"the last {failures} run(s) failed; relaunching {backoff - since:.0f} s from now")
        number = int(context.cursor or 0) + 1
        context.update_cursor(str(number))
        return dg.RunRequest(run_key=f"continuous#{number}")

    return continuous_streams_sensor


@dg.definitions
def defs(context: dg.ComponentLoadContext) -> dg.Definitions:
    """Read when the definitions load: the project's sources and streamed tables, the sensor policy, LIVE_MODE and
    the defaults of the run's config."""
    live, tree = LiveSettings.from_env(), context.component_tree
    job = build_continuous_job(declared_sources(tree), streamed_tables(tree), live, PipelineSettings.from_env())
    return dg.Definitions(jobs=[job], sensors=[build_continuous_sensor(job, SensorSettings.from_env(), live)])
