"""`streaming-pipeline replay`: rebuild a bronze table, and everything downstream of it, from Kafka exactly once.

The way out when a table and its checkpoint no longer agree (a checkpoint reset, a table deleted), when a
topic's offsets went backwards (deleted and recreated) or retention deleted records nobody read, or when a
table should simply be read again from some point:

1. the bronze checkpoint and the checkpoints of every streaming table downstream are moved aside
   (`_checkpoints/_replaced/<name>-<time>`), never deleted;
2. each of those tables gets an empty overwrite commit, so its old content stays readable through Delta time
   travel (`VERSION AS OF`); the bronze commit's marker names the offsets the rebuilt table starts from and its
   Delta transaction (`replay:<asset>`) marks the table as replayed, and the topic's dead letters are removed
   the same way;
3. the job that the offset sensor runs (the bronze asset and everything downstream) runs once, in this
   process, on the Dagster instance of DAGSTER_HOME when it is set, so the UI shows the run.

The new checkpoint's query id names a new txnAppId, so no batch id of the old checkpoint can make Delta skip
a batch of the new one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import dagster as dg

from streaming_pipeline.components.kafka_delta_source.sensors import live_job_names
from streaming_pipeline.devstack.errors import ReplayError
from streaming_pipeline.lakehouse.bronze.decode import reader_schema_of
from streaming_pipeline.lakehouse.bronze.offsets import Offsets, replay_app_id
from streaming_pipeline.lakehouse.engine.delta_log import filesystem, latest_version
from streaming_pipeline.lakehouse.engine.delta_tables import read_table
from streaming_pipeline.lakehouse.engine.object_store import is_object_store
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.schemas import avro_columns
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS, KAFKA_COLUMNS, ddl
from streaming_pipeline.resources.from_settings import resolved
from streaming_pipeline.resources.kafka import KafkaResource
from streaming_pipeline.resources.lakehouse import LakehouseResource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming_pipeline.lakehouse.registry_client import RegistryClient

# Written before the first batch when the bronze table is gone: the payload columns join on the first append.
_KAFKA_COLUMNS_DDL = ddl(KAFKA_COLUMNS)


@dataclass(frozen=True)
class ReplayStart:
    """Where the rebuilt table starts: the earliest offsets still kept, a time, or explicit offsets."""

    earliest: bool = True
    time_ms: int | None = None
    offsets: Offsets | None = None

    @classmethod
    def parse(cls, from_time: str | None = None, from_offsets: str | None = None) -> ReplayStart:
        if from_time is not None:
            try:
                moment = datetime.fromisoformat(from_time)
            except ValueError as exc:
                raise ConfigurationError(
                    f"--from-time {from_time!r} is not an ISO-8601 time (e.g. 2026-11-22T08:00:00Z)"
                ) from exc
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return cls(earliest=False, time_ms=int(moment.timestamp() * 1000))
        if from_offsets is not None:
            offsets: Offsets = {}
            for part in from_offsets.split(","):
                partition, sep, offset = part.strip().partition(":")
                if not sep or not partition.strip().isdigit() or not offset.strip().lstrip("-").isdigit():
                    raise ConfigurationError(
                        f"--from-offsets {from_offsets!r}: expected PARTITION:OFFSET,... (e.g. 0:120,1:98), "
                        f"got {part!r}"
                    )
                offsets[int(partition)] = int(offset)
            return cls(earliest=False, offsets=offsets)
        return cls()

    def describe(self) -> str:
        if self.time_ms is not None:
            return f"time {datetime.fromtimestamp(self.time_ms / 1000, tz=UTC).isoformat()}"
        if self.offsets is not None:
            return "offsets " + ",".join(f"{p}:{o}" for p, o in sorted(self.offsets.items()))
        return "the earliest offsets"


def resolve_start(
    start: ReplayStart, topic: str, watermarks: dict[int, tuple[int, int]], kafka: KafkaResource
) -> Offsets:
    """Concrete starting offsets for every partition, each within what the topic still keeps."""
    if not watermarks:
        raise ReplayError(f"topic {topic!r} does not exist on {kafka.bootstrap_servers}: nothing to replay")
    if start.time_ms is not None:
        return kafka.offsets_for_time(topic, start.time_ms)
    if start.offsets is None:
        return {p: low for p, (low, _) in sorted(watermarks.items())}
    unknown = sorted(set(start.offsets) - set(watermarks))
    if unknown:
        raise ReplayError(
            f"--from-offsets names partition(s) {unknown} that {topic!r} does not have (it has {sorted(watermarks)})"
        )
    resolved = {}
    for partition, (low, high) in sorted(watermarks.items()):
        offset = start.offsets.get(partition, low)
        if not low <= offset <= high:
            raise ReplayError(
                f"--from-offsets {partition}:{offset} is outside what {topic}[{partition}] keeps ({low}..{high}); "
                f"pick an offset in that range or use --from earliest"
            )
        resolved[partition] = offset
    return resolved


@dataclass
class ReplayReport:
    asset_name: str
    topic: str
    starting_offsets: Offsets
    rows_before: int
    version_before: int | None
    rows_after: int = 0
    reset_tables: list[str] = field(default_factory=list)
    moved_checkpoints: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None

    def summary(self) -> str:
        old = (
            f"; the old content stays readable as VERSION AS OF {self.version_before}"
            if self.version_before is not None
            else ""
        )
        return (
            f"replayed {self.asset_name} from {self.topic} at "
            + ",".join(f"{p}:{o}" for p, o in sorted(self.starting_offsets.items()))
            + f": {self.rows_before} row(s) before, {self.rows_after} after{old}; rebuilt downstream: "
            + (", ".join(self.reset_tables) or "none")
        )


def downstream_assets(defs: dg.Definitions, asset_name: str) -> list[str]:
    """Every asset downstream of `asset_name` in the definitions' graph, in topological order."""
    graph = defs.resolve_asset_graph()
    selection = dg.AssetSelection.assets(asset_name).downstream() - dg.AssetSelection.assets(asset_name)
    keys = selection.resolve(graph)
    order = [key for level in graph.toposorted_asset_keys_by_level for key in level]
    return [key.to_user_string() for key in order if key in keys]


def _runs_in_flight(instance: dg.DagsterInstance, names: set[str]) -> list[str]:
    """The runs in flight that work on one of the tables `names`: a run selecting one of them, a source's live job,
    or the continuous mode's run, which streams every table."""
    from streaming_pipeline.components.live_runs import CONTINUOUS_JOB, IN_FLIGHT

    jobs = {CONTINUOUS_JOB, *(job for name in names for job in live_job_names(dg.AssetKey(name)))}
    found = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=200):
        selected = {key.to_user_string() for key in (run.asset_selection or set())}
        if selected & names or run.job_name in jobs:
            found.append(run.run_id)
    return found


def move_checkpoints_aside(lakehouse: LakehouseResource, names: set[str]) -> dict[str, str]:
    """Move every checkpoint that belongs to one of `names` (`a+b` for a query writing several) to
    `_checkpoints/_replaced/`; {old: new}."""
    fs, root = filesystem(lakehouse.checkpoint_path(""))
    root = root.rstrip("/")
    try:
        entries = [str(e).rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return {}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    moved = {}
    for entry in sorted(entries):
        if entry.startswith("_") or not set(entry.split("+")) & names:
            continue
        target = f"{root}/_replaced/{entry}-{stamp}"
        fs.makedirs(f"{root}/_replaced", exist_ok=True)
        if is_object_store(lakehouse.root):
            _copy_then_delete(fs, f"{root}/{entry}", target)
        else:
            fs.mv(f"{root}/{entry}", target, recursive=True)
        moved[f"{root}/{entry}"] = target
    return moved


def _copy_then_delete(fs: Any, source: str, target: str) -> None:
    """`source`'s objects to `target` on an object store, which has no directory to rename: each copied, then
    the originals deleted. A replay stopped in between leaves the checkpoint in place, to be replayed again."""
    for path in fs.find(source):
        fs.copy(path, f"{target}/{path[len(source) :].lstrip('/')}")
    fs.rm(source, recursive=True)


def empty_table(
    spark: SparkSession,
    path: str,
    marker: dict[str, Any],
    where: str | None = None,
    ddl: str | None = None,
    txn_app_id: str | None = None,
    column_types: dict[str, str] | None = None,
) -> bool:
    """Rewrite the table at `path` without its rows (only the rows matching `where`, when given) in one commit
    carrying `marker`, and a Delta transaction of `txn_app_id` when given (which checkpoints keep: it says that
    the table was emptied, after log cleanup too); a missing table is created from `ddl` when given. An emptied
    table's columns named in `column_types` (name -> Spark SQL type) take those types, so that a type the source's
    schema changed can be written again. True when a commit was made."""
    from pyspark.sql import functions as F

    version = latest_version(path)
    if version is None:
        if ddl is None:
            return False
        frame = spark.createDataFrame([], ddl)
        mode = "append"
    else:
        current = read_table(spark, path)
        # Delta reads the snapshot it overwrites (the old files stay until VACUUM), so no checkpoint is needed; and
        # over Spark Connect a localCheckpoint() would be bound to the process's active session, not to `spark`.
        frame = current.where(~F.expr(where)) if where else current.limit(0)
        mode = "overwrite"
    wanted = column_types if where is None and column_types else {}
    retyped = {
        f.name: wanted[f.name]
        for f in frame.schema.fields
        if f.name in wanted and f.dataType.simpleString() != wanted[f.name]
    }
    if retyped:
        frame = frame.select(*[F.col(c).cast(retyped[c]).alias(c) if c in retyped else F.col(c) for c in frame.columns])
    writer = frame.write.format("delta").mode(mode).option("userMetadata", json.dumps(marker, sort_keys=True))
    if retyped:
        writer = writer.option("overwriteSchema", "true")
    if txn_app_id is not None:
        # The version this commit gets: it grows with every replay, as Delta wants of a txnVersion.
        writer = writer.option("txnAppId", txn_app_id).option("txnVersion", 0 if version is None else version + 1)
    writer.save(path)
    return True


def replay(
    asset_name: str,
    start: ReplayStart,
    *,
    defs: dg.Definitions,
    sources: Sequence[SourceTopic],
    instance: dg.DagsterInstance,
    progress: Callable[[str], None] = print,
) -> ReplayReport:
    """Rebuild the bronze table `asset_name` of one of `sources` and everything downstream of it in `defs` (a
    project's definitions, with its resources), on `instance`."""
    by_table = {s.bronze_table: s for s in sources}
    if asset_name not in by_table:
        raise ReplayError(f"{asset_name!r} is not a bronze asset; replay one of {sorted(by_table)}")
    source = by_table[asset_name]
    topic = source.topic
    resources = defs.resources
    if resources is None or not {"kafka", "lakehouse", "spark", "schema_registry"} <= set(resources):
        raise ReplayError(
            "the definitions bind no kafka, lakehouse, spark and schema_registry resources: bind them once, as "
            "`dg scaffold defs` does in defs/resources.py"
        )
    kafka: KafkaResource = resolved(resources["kafka"])
    lakehouse: LakehouseResource = resources["lakehouse"]
    downstream = [name for name in downstream_assets(defs, asset_name) if name != DEAD_LETTER_RECORDS.name]
    busy = _runs_in_flight(instance, {asset_name, *downstream})
    if busy:
        raise ReplayError(
            f"run(s) {', '.join(busy)} work on {asset_name} or its downstream tables; wait for them (or cancel them in "
            "the UI) and replay again. A run of continuous_streams_job never ends by itself: stop "
            "continuous_streams_sensor, which relaunches it, then terminate the run"
        )
    offsets = resolve_start(start, topic, kafka.watermark_offsets(topic), kafka)
    spark = resources["spark"].get_session()
    table_path = lakehouse.table_path(asset_name)
    version_before = latest_version(table_path)
    rows_before = read_table(spark, table_path).count() if version_before is not None else 0
    report = ReplayReport(asset_name, topic, offsets, rows_before, version_before)
    progress(f"replay {asset_name}: {rows_before} row(s) now; rebuilding from {topic} at {start.describe()}")

    # Read before anything moves: a registry that does not answer stops the replay with nothing changed.
    column_types = latest_column_types(resolved(resources["schema_registry"]).get_client(), source)
    report.moved_checkpoints = move_checkpoints_aside(lakehouse, {asset_name, *downstream})
    for old, new in report.moved_checkpoints.items():
        progress(f"  checkpoint {old} moved to {new}")
    report.reset_tables = _empty_tables(spark, lakehouse, report, downstream, column_types)
    progress(
        f"  emptied {asset_name} and {len(report.reset_tables)} downstream table(s); the old versions stay readable"
    )

    job = defs.resolve_job_def(live_job_names(dg.AssetKey(asset_name))[0])
    progress(f"  running {job.name} ({1 + len(downstream)} asset(s))")
    report.run_id = _rebuild(job, instance, asset_name)
    report.rows_after = read_table(spark, table_path).count()
    return report


def latest_column_types(registry: RegistryClient, source: SourceTopic) -> dict[str, str]:
    """The Spark SQL type of each field of the schema the source's records are decoded into now (the latest version
    plus the fields only earlier ones have); empty when the registry has no version of the source's subject."""
    latest = registry.latest(source.value_subject)
    if latest is None:
        return {}
    reader = reader_schema_of(registry.subject_schemas(source.value_subject), latest[1])
    return {column.name: column.type for column in avro_columns(reader)}


def _empty_tables(
    spark: SparkSession,
    lakehouse: LakehouseResource,
    report: ReplayReport,
    downstream: list[str],
    column_types: dict[str, str],
) -> list[str]:
    """Empty the replayed table (its commit records where the replay starts), its topic's dead letters and the
    downstream tables, each in a commit of its own, their columns of the source's fields retyped to
    `column_types`; return the downstream tables that had rows to empty."""
    asset_name, topic, stamp = report.asset_name, report.topic, datetime.now(UTC).isoformat()
    empty_table(
        spark,
        lakehouse.table_path(asset_name),
        {
            "replay_of": asset_name,
            "starting_offsets": {topic: {str(p): o for p, o in report.starting_offsets.items()}},
            "replaced_version": report.version_before,
            "replayed_at": stamp,
        },
        ddl=_KAFKA_COLUMNS_DDL,
        txn_app_id=replay_app_id(asset_name),
        column_types=column_types,
    )
    quoted = topic.replace("'", "''")
    empty_table(
        spark,
        lakehouse.table_path(DEAD_LETTER_RECORDS.name),
        {"replay_of_dead_letters": asset_name, "replayed_at": stamp},
        where=f"kafka_topic = '{quoted}'",
    )
    reset = {"reset_by_replay_of": asset_name, "replayed_at": stamp}
    return [
        name for name in downstream if empty_table(spark, lakehouse.table_path(name), reset, column_types=column_types)
    ]


def _rebuild(job: dg.JobDefinition, instance: dg.DagsterInstance, asset_name: str) -> str:
    """Run `job` (the replayed asset and everything downstream) in process; its run id, or ReplayError naming the
    failed steps' errors."""
    result = job.execute_in_process(
        instance=instance, raise_on_error=False, tags={"streaming-pipeline/replay": asset_name}
    )
    if not result.success:
        failures = [str(e.event_specific_data.error.message).strip() for e in result.all_events if e.is_step_failure]  # type: ignore[union-attr]
        raise ReplayError(
            f"the rebuild run {result.run_id} of {asset_name} failed: "
            f"{'; '.join(failures) or 'see the run in the UI'}. "
            "The old content is kept in the Delta history; fix the cause and replay again"
        )
    return result.run_id
