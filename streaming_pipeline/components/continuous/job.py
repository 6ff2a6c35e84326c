"""The continuous run's job: its one op, which keeps every streaming query of the pipeline running, and the op's
config (docs/continuous-mode.md)."""

import time
from collections.abc import Sequence
from typing import Any

import dagster as dg
import pydantic
from pydantic import Field

from streaming_pipeline.components.asset_metadata import checkpoint_pool
from streaming_pipeline.components.continuous.checkpoint_pools import CheckpointPools, lend_and_take_back
from streaming_pipeline.components.continuous.table_reporter import TableReporter
from streaming_pipeline.components.live_runs import CONTINUOUS_JOB
from streaming_pipeline.components.streamed_table import (
    QueryInputs,
    StreamedTable,
    declared_tables,
    latency_critical_query_names,
    live_query_names,
    with_config_class,
)
from streaming_pipeline.lakehouse.bronze.ingestion import bronze_query
from streaming_pipeline.lakehouse.engine.catalog import has_persistent_catalog, register
from streaming_pipeline.lakehouse.engine.continuous import ContinuousQueries
from streaming_pipeline.lakehouse.engine.interrupts import interrupts_held
from streaming_pipeline.lakehouse.engine.spark import stop_session_queries
from streaming_pipeline.lakehouse.settings import LiveSettings, trigger_interval
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.resources import KafkaResource, LakehouseResource, SchemaRegistryResource, SparkResource

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
        description="The queries of the tables a user waits for (the steps declared latency-critical, the bronze "
        "tables they read, and each bronze table no step reads; every query when no step is latency-critical) "
        "start a micro-batch this often, when data waits (default: CONTINUOUS_TRIGGER_INTERVAL, 500 milliseconds).",
    )
    downstream_trigger_interval: str = Field(
        default=_LIVE.downstream_trigger_interval,
        description="Every other query of the run starts a micro-batch this often, when data waits (default: "
        "CONTINUOUS_DOWNSTREAM_TRIGGER_INTERVAL, 2 minutes).",
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
        """The job's default config: what the environment sets (the tables' own fields keep their defaults).

        Args:
            live: The continuous mode's settings, read from the environment.

        Returns:
            The config, of this class (the job's config class with the tables' fields).
        """
        return cls(
            trigger_interval=live.trigger_interval,
            downstream_trigger_interval=live.downstream_trigger_interval,
            report_every_seconds=live.report_seconds,
            caught_up_report_seconds=live.caught_up_report_seconds,
            reconcile_every_seconds=live.reconcile_seconds,
        )


def continuous_config_class(steps: Sequence[StreamedTable]) -> type[ContinuousStreamsConfig]:
    """ContinuousStreamsConfig with a field per step that takes run config, so that the continuous run takes the
    same parameters as the triggered runs.

    Args:
        steps: The streamed tables the run streams (each step's config takes its defaults from the environment).

    Returns:
        A subclass of ContinuousStreamsConfig with one field per step that takes config (the step's config class).
    """
    fields: dict[str, Any] = {}
    for step in steps:
        config = step.config_class()
        if config is not None:
            fields[step.step] = (
                config,
                Field(default=config(), description=f"The parameters of {step.step}, as its asset's run config."),
            )
    return pydantic.create_model(
        ContinuousStreamsConfig.__name__, __base__=ContinuousStreamsConfig, __module__=__name__, **fields
    )


def continuous_streams_op(
    sources: Sequence[SourceTopic], steps: Sequence[StreamedTable], config_class: type[ContinuousStreamsConfig]
) -> dg.OpDefinition:
    """The op of the continuous run: the bronze query of each of `sources`, then the live query of each of `steps`.

    Args:
        sources: The sources whose bronze tables the run streams.
        steps: The streamed tables whose live queries the run streams.
        config_class: The op's config class (`continuous_config_class`).

    Returns:
        The op, which runs until the run is terminated.
    """

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
            pools.claim_all(POLL_SECONDS)
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
    inputs = QueryInputs(spark=session, lakehouse=lakehouse, run_id=context.run_id, log=context.log)
    queries = [
        *(bronze_query(session, kafka, schema_registry, lakehouse, source=source) for source in sources),
        *(step.query(inputs, getattr(config, step.step, None)) for step in steps),
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
        expectations={step.step: (step.table_names[0], step.expectations) for step in steps if step.expectations},
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
                    lend_and_take_back(context, runner, pools, lent)
                    next_lending_check = now + LENDING_CHECK_SECONDS
                if now >= next_report:
                    for event in reporter.events(runner.take_reports(), runner.caught_up()):
                        context.log_event(event)  # type: ignore[arg-type]  # it logs AssetCheckEvaluation too
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


def build_continuous_job(
    sources: Sequence[SourceTopic], steps: Sequence[StreamedTable], live: LiveSettings
) -> dg.JobDefinition:
    """The continuous run's job: one op that streams the queries of `sources` and `steps`.

    Args:
        sources: The sources whose bronze tables the run streams.
        steps: The streamed tables whose queries the run streams (their config's defaults read from the environment).
        live: The continuous mode's settings: the default config of the run.

    Returns:
        The job `continuous_streams_job`.
    """
    config_class = continuous_config_class(steps)
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
