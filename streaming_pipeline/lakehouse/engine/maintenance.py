"""Delta table maintenance through Spark SQL: OPTIMIZE (bin-packing compaction), VACUUM, and where the log's newest
checkpoint stands (docs/maintenance.md).

Everything goes through Spark SQL on `delta.\\`path\\``, with no DeltaTable handle and no Py4J, so the same code runs
over Spark Connect (the warm engine) and in an in-process session. The figures come from `DESCRIBE DETAIL`
(`numFiles`, `sizeInBytes`) and from the `_delta_log` files (versions, `_last_checkpoint`), read without Spark.

What this module does not do, because Delta does it by itself:

- **Checkpoints.** Delta 4.x has no SQL command that writes one. Its post-commit hook (`hooks/CheckpointHook.scala`)
  writes a checkpoint at every version that is a multiple of `delta.checkpointInterval` (10), so a reader replays
  at most 9 commit files after the newest checkpoint; a failed checkpoint is only logged. The result reports the
  version in `_delta_log/_last_checkpoint`, and `checkpoint_lag` says how many commits lie after it.
- **Log cleanup.** When Delta writes a checkpoint it also deletes the commit files and checkpoints older than
  `delta.logRetentionDuration` (7 days in the spark_conf profiles) that the newest checkpoint makes unnecessary, unless
  `delta.enableExpiredLogCleanup` is false (`MetadataCleanup.scala`).
- **Compaction after writes.** Auto compaction (`spark.databricks.delta.autoCompact.enabled` in `spark_conf/`)
  compacts small files in a post-commit hook of the writer; OPTIMIZE here catches what it leaves (it waits for 50
  small files).

VACUUM deletes only files that no version younger than the retention needs: files removed from the table (by
OPTIMIZE, auto compaction, an overwrite or a MERGE) more than `retention` hours ago, and files no commit ever
referenced (a write that failed) older than that. A file a running writer has just written is new, so it is kept;
a version within the retention stays readable (time travel, replay's `VERSION AS OF`).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.engine.delta_log import latest_version, read_text
from streaming_pipeline.lakehouse.engine.delta_tables import delta_path_sql
from streaming_pipeline.lakehouse.errors import ConfigurationError, MaintenanceError
from streaming_pipeline.lakehouse.settings import DEFAULT_VACUUM_RETENTION_HOURS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: The shortest VACUUM retention allowed: Delta's default `delta.deletedFileRetentionDuration` (interval 1 week).
#: Shorter, VACUUM could delete files that a stream behind by less than that, or a time travel or replay within the
#: documented window, still reads.
MIN_VACUUM_RETENTION_HOURS = 168.0
#: Delta's default `delta.checkpointInterval`: a checkpoint at every version that is a multiple of it.
DEFAULT_CHECKPOINT_INTERVAL = 10
#: Delta's own switch for VACUUM START / VACUUM END commits (on by default for file://, hdfs://, abfss://, gs://).
VACUUM_LOGGING_CONF = "spark.databricks.delta.vacuum.logging.enabled"
#: How many tasks VACUUM lists the table's directories with.
VACUUM_LISTING_CONF = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
#: Delta 4.1+ ignores VACUUM's `RETAIN n HOURS` unless n is 0 (and keeps the table's deletedFileRetentionDuration)
#: while this internal setting is true, its default; maintenance sets it false so that the retention asked is the one
#: kept (never less than the table's own: Delta's retentionDurationCheck still applies, and so does ours).
VACUUM_RETENTION_IGNORED_CONF = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"
#: How often OPTIMIZE is tried when a concurrent writer's commit conflicts with it (Delta's DELTA_CONCURRENT_*).
OPTIMIZE_ATTEMPTS = 3

_DELTA_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+)\s+(week|day|hour|minute|second)s?\s*$", re.IGNORECASE)
#: Delta's conflict errors (DELTA_CONCURRENT_DELETE_READ, ConcurrentDeleteDeleteException, ...).
_CONFLICT = re.compile(r"DELTA_CONCURRENT|Concurrent\w*Exception")
_UNIT_HOURS = {"week": 168.0, "day": 24.0, "hour": 1.0, "minute": 1 / 60, "second": 1 / 3600}


def check_retention(hours: float, *, what: str = "the VACUUM retention") -> float:
    """`hours` when it is at least MIN_VACUUM_RETENTION_HOURS; a ConfigurationError naming the value and the
    minimum otherwise."""
    if not math.isfinite(hours):
        raise ConfigurationError(f"{what} of {hours} hours is not a number of hours. Nothing was done")
    if hours < MIN_VACUUM_RETENTION_HOURS:
        raise ConfigurationError(
            f"{what} of {hours:g} hours is below the safe minimum of {MIN_VACUUM_RETENTION_HOURS:g} hours (7 days, "
            "Delta's default delta.deletedFileRetentionDuration): VACUUM could delete files that a running stream, "
            "a time travel or a replay still reads. Nothing was done"
        )
    return hours


@dataclass(frozen=True)
class MaintenanceResult:
    """What one maintenance pass did to one table. Files and bytes are DESCRIBE DETAIL's `numFiles` and
    `sizeInBytes` (the current version's data files); versions are the table's newest version before and after."""

    path: str
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    version_before: int
    version_after: int
    #: files VACUUM deleted (found by its DRY RUN just before)
    vacuumed_files: int
    vacuum_retention_hours: float
    #: the version of the newest checkpoint (`_delta_log/_last_checkpoint`); None before the first
    checkpoint_version: int | None
    seconds: float
    #: the table's `delta.checkpointInterval`: Delta checkpoints every version that is a multiple of it
    checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL

    @property
    def checkpoint_lag(self) -> int:
        """Commits after the newest checkpoint, which a reader replays on top of it (Delta keeps this below
        `delta.checkpointInterval`; more means a checkpoint failed, which Delta only logs)."""
        return self.version_after - (-1 if self.checkpoint_version is None else self.checkpoint_version)

    @property
    def checkpoint_overdue(self) -> bool:
        """Whether Delta should have written a newer checkpoint by now (it only logs a checkpoint that failed)."""
        newest_due = self.version_after - self.version_after % self.checkpoint_interval
        return newest_due > 0 and (self.checkpoint_version is None or self.checkpoint_version < newest_due)

    def figures(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        checkpoint = (
            "no checkpoint yet"
            if self.checkpoint_version is None
            else f"checkpoint at version {self.checkpoint_version} ({self.checkpoint_lag} commit(s) after it)"
        )
        if self.checkpoint_overdue:
            checkpoint += f" (more than delta.checkpointInterval={self.checkpoint_interval}: a checkpoint failed?)"
        return (
            f"{self.files_before} -> {self.files_after} file(s), {_size(self.bytes_before)} -> "
            f"{_size(self.bytes_after)}, version {self.version_before} -> {self.version_after}, "
            f"{self.vacuumed_files} file(s) vacuumed (retain {self.vacuum_retention_hours:g} h), {checkpoint}, "
            f"{self.seconds:.1f} s"
        )


def _size(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def maintain_table(
    spark: SparkSession,
    path: str,
    *,
    vacuum_retention_hours: float = DEFAULT_VACUUM_RETENTION_HOURS,
    log_vacuum: bool = False,
) -> MaintenanceResult:
    """OPTIMIZE the Delta table at `path`, then VACUUM it keeping `vacuum_retention_hours` of history.

    Raises ConfigurationError (a retention below MIN_VACUUM_RETENTION_HOURS, or below the table's own
    `delta.deletedFileRetentionDuration`) and MaintenanceError (no Delta table at `path`) before anything is done.

    VACUUM runs with Delta's vacuum logging off unless `log_vacuum`: its VACUUM START and VACUUM END commits would
    give every table two commits a day whether or not anything changed, so checkpoints and log cleanup would go on in
    a table that nothing writes, and the commits that carry the writers' markers would age out of the log.

    OPTIMIZE only rewrites files (`dataChange=false`): it never conflicts with a blind append, and a stream reading
    the table skips its commit. A writer that removes files (MERGE, an overwrite, a complete-mode sink) can conflict
    with it, which is why the Dagster job runs each table's maintenance in the pool of the stream that writes it.
    An OPTIMIZE that loses such a race (to another compaction) is tried again, up to OPTIMIZE_ATTEMPTS times.
    """
    check_retention(vacuum_retention_hours)
    version_before = latest_version(path)
    if version_before is None:
        raise MaintenanceError(f"no Delta table at {path}: nothing to maintain, nothing was done")
    started = time.monotonic()
    table = delta_path_sql(path)
    before = _detail(spark, table)
    _check_table_retention(path, before.get("properties") or {}, vacuum_retention_hours)
    _optimize(spark, table)
    vacuumed = _vacuum(spark, table, vacuum_retention_hours, log_vacuum=log_vacuum)
    after = _detail(spark, table)
    version_after = latest_version(path)
    return MaintenanceResult(
        path=path,
        files_before=int(before["numFiles"] or 0),
        files_after=int(after["numFiles"] or 0),
        bytes_before=int(before["sizeInBytes"] or 0),
        bytes_after=int(after["sizeInBytes"] or 0),
        version_before=version_before,
        version_after=version_before if version_after is None else version_after,
        vacuumed_files=vacuumed,
        vacuum_retention_hours=vacuum_retention_hours,
        checkpoint_version=last_checkpoint_version(path),
        seconds=round(time.monotonic() - started, 3),
        checkpoint_interval=_checkpoint_interval(after.get("properties") or {}),
    )


def _detail(spark: SparkSession, table: str) -> dict[str, Any]:
    row = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]
    return row.asDict()


def _checkpoint_interval(properties: dict[str, str]) -> int:
    text = str(properties.get("delta.checkpointInterval") or "")
    return int(text) if text.isdigit() and int(text) > 0 else DEFAULT_CHECKPOINT_INTERVAL


def _check_table_retention(path: str, properties: dict[str, str], hours: float) -> None:
    """A table whose own delta.deletedFileRetentionDuration is longer than `hours` would make Delta refuse the
    VACUUM halfway (after OPTIMIZE); refuse it here, first."""
    configured = properties.get("delta.deletedFileRetentionDuration")
    match = _DELTA_INTERVAL.match(configured or "")
    if match is None:
        return
    table_hours = int(match.group(1)) * _UNIT_HOURS[match.group(2).lower()]
    if hours < table_hours:
        raise ConfigurationError(
            f"the VACUUM retention of {hours:g} hours is below the table's own delta.deletedFileRetentionDuration "
            f"({configured!r}, {table_hours:g} hours) at {path}. Nothing was done"
        )


def _optimize(spark: SparkSession, table: str) -> None:
    for attempt in range(1, OPTIMIZE_ATTEMPTS + 1):
        try:
            spark.sql(f"OPTIMIZE {table}").collect()
            return
        except Exception as exc:  # pyspark raises a different class in-process and over Spark Connect
            if not _CONFLICT.search(str(exc)) or attempt == OPTIMIZE_ATTEMPTS:
                raise


def _vacuum(spark: SparkSession, table: str, hours: float, *, log_vacuum: bool) -> int:
    """Files VACUUM deletes: its DRY RUN lists them, and VACUUM runs only when there is something to delete."""
    retain = f"RETAIN {format(hours, 'f').rstrip('0').rstrip('.')} HOURS"  # never 1e+06
    # VACUUM lists the table's directories in as many tasks as parallelPartitionDiscovery.parallelism says, 10,000 by
    # default: 40 s for a small unpartitioned table on 2 cores. The lakehouse's tables are unpartitioned (one
    # directory), so the engine's shuffle parallelism is plenty: 2 s.
    listing_tasks = spark.conf.get("spark.sql.shuffle.partitions", None) or "8"
    with _session_conf(
        spark,
        {
            VACUUM_LOGGING_CONF: "true" if log_vacuum else "false",
            VACUUM_LISTING_CONF: listing_tasks,
            VACUUM_RETENTION_IGNORED_CONF: "false",
        },
    ):
        deletable = spark.sql(f"VACUUM {table} {retain} DRY RUN").count()
        if deletable:
            spark.sql(f"VACUUM {table} {retain}").collect()
    return int(deletable)


@contextmanager
def _session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """Set `conf` in the session for the block, then put back what was there (or unset it)."""
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def last_checkpoint_version(path: str) -> int | None:
    """The version of the table's newest checkpoint, from `_delta_log/_last_checkpoint`; None when there is none."""
    text = read_text(path.rstrip("/") + "/_delta_log/_last_checkpoint")
    if not text:
        return None
    try:
        return int(json.loads(text)["version"])
    except (ValueError, KeyError, TypeError):
        return None
