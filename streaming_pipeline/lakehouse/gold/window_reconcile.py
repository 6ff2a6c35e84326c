"""The reconcile step of the ride_window_aggregates stream: late rides and finality, written after the stream.

The late count of a window is (rides of raw_rides in it) - (rides the stream counted on time). Both sides must be the
same version of raw_rides: the one the window stream has consumed (its checkpoint's last committed end offset), never
the latest, which a bronze run may have moved on since. Each reconcile records that version as the txnVersion of its
MERGE (a Delta transaction of appId `reconcile:<table>:<query id>:<raw_rides id>`, which Delta's checkpoints keep, so
it survives log cleanup), and its userMetadata says the same for people reading the history; the next one reads only
the files raw_rides gained since (raw_rides is append-only), and recounts only the windows those rides fall in.
Finality is a predicate on window_end. Upserts are SQL MERGE INTO delta.`path`, which works over Spark Connect and
in-process.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.engine.delta_log import DeltaLog, filesystem, numbered_files, read_text
from streaming_pipeline.lakehouse.engine.delta_tables import delta_path_sql, read_table, small_table, sum_columns
from streaming_pipeline.lakehouse.engine.run_log import Log
from streaming_pipeline.lakehouse.engine.sink_position import delta_source_version
from streaming_pipeline.lakehouse.engine.streams import EPOCH, from_epoch_micros
from streaming_pipeline.lakehouse.gold.transformations import ride_window_aggregates, window_late_counts
from streaming_pipeline.lakehouse.tables import RAW_RIDES

# pyspark is imported in the functions that use it: the asset checks import this module, and the sensors and
# checks load without Spark's client (streaming_pipeline_tests/test_import_weight.py).
if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from streaming_pipeline.lakehouse.connections import Lakehouse

WINDOWS = "ride_window_aggregates"  # its declaration: defs/gold/ride_window_aggregates.py
# The key of a window row in the MERGEs of the stream's upserts and of the reconcile (null vendors match).
WINDOW_KEY = "t.window_start = s.window_start AND t.vendor_id <=> s.vendor_id"
RECONCILE_WRITER = f"reconcile:{WINDOWS}"
_MAX_RANGES = 64  # pickup-time ranges in the filter that lets Delta skip files of raw_rides
_MAX_KEYS_IN_MERGE = 1000  # window starts listed in the MERGE condition so that Delta skips files of the table


@dataclass
class WindowReconcile:
    """What the reconcile step of a windows run did."""

    raw_rides_version: int | None = None  # the raw_rides version the window stream has consumed, now reconciled
    previous_version: int | None = None  # the version the previous reconcile recorded (None: none usable)
    full: bool = False  # every window recounted (first reconcile, reset checkpoint, rewritten raw_rides)
    new_rides: int = 0  # rides of raw_rides read because they were added since the previous reconcile
    windows: int = 0  # windows whose late count or finality was written
    late_rides_found: int = 0  # rides newly counted as late
    watermark: Any = None
    reason: str = ""
    seconds: float = 0.0  # how long it took


@dataclass(frozen=True)
class StreamPosition:
    """Where a query reading one Delta table stands after its last committed micro-batch, from its checkpoint."""

    query_id: str
    table_id: str  # the Delta table's id (reservoirId)
    version: int | None  # every commit up to this version has been read, none after; None: inside a version
    watermark_micros: int  # the query's event-time watermark for its next micro-batch (epoch microseconds)


def stream_position(checkpoint_dir: str) -> StreamPosition | None:
    """Read from the checkpoint's files (any storage fsspec reaches, no Spark job): the commit log's last entry,
    then that batch's offsets and the query id.

    Args:
        checkpoint_dir: The query's checkpoint location (a path or URL).

    Returns:
        The query's position, or None when the checkpoint has no committed micro-batch (or its offsets are not those
        of one Delta source).
    """
    fs, root = filesystem(checkpoint_dir)
    watermark_ms = batch = None
    for number in reversed(numbered_files(fs, f"{root}/commits")):
        text = read_text(f"{checkpoint_dir}/commits/{number}") or ""
        entry = next((json.loads(line) for line in text.splitlines() if "nextBatchWatermarkMs" in line), None)
        if entry is not None:
            watermark_ms, batch = int(entry["nextBatchWatermarkMs"]), number
            break
    if batch is None or watermark_ms is None:
        return None
    offsets_text = read_text(f"{checkpoint_dir}/offsets/{batch}") or ""
    metadata_text = read_text(f"{checkpoint_dir}/metadata") or ""
    offsets = [json.loads(line) for line in offsets_text.splitlines() if '"reservoirVersion"' in line]
    query = [json.loads(line) for line in metadata_text.splitlines() if line.strip().startswith("{")]
    if len(offsets) != 1 or not query:
        return None
    offset = offsets[0]
    version = delta_source_version(offset)
    return StreamPosition(str(query[0]["id"]), str(offset["reservoirId"]), version, watermark_ms * 1000)


def reconcile_app_id(position: StreamPosition) -> str:
    """The Delta txnAppId of the reconciles of one window stream (query) over one raw_rides table: its txnVersion
    is the raw_rides version reconciled.

    Args:
        position: The window stream's position (its query id and raw_rides' table id).

    Returns:
        `reconcile:<table>:<query id>:<raw_rides id>`.
    """
    return f"{RECONCILE_WRITER}:{position.query_id}:{position.table_id}"


def _last_reconcile(table_path: str, position: StreamPosition) -> tuple[bool, int | None]:
    """(whether the windows table exists, the raw_rides version its newest reconcile of this window stream
    recorded), from the table's Delta transactions: read from the newest checkpoint on."""
    log = DeltaLog(table_path)
    latest = log.latest_version()
    if latest is None:
        return False, None
    app_id = reconcile_app_id(position)
    mine = [t for t in log.transactions(version=latest).values() if t.app_id.split("~", 1)[0] == app_id]
    newest = max(mine, key=lambda t: t.last_updated or 0, default=None)
    return True, None if newest is None else newest.version


@dataclass(frozen=True)
class WindowsCount:
    """What the windows table counts, read at one version of it: every ride of raw_rides at `raw_rides_version`,
    each once (on time in trip_count, or late in late_trip_count), when the table is right."""

    windows_version: int
    raw_rides_version: int
    counted: int  # sum(trip_count + late_trip_count) at windows_version
    reconciled: bool  # pinned at a reconcile's commit (else: the table and the stream as they stood, unreconciled)


def windows_count(spark: SparkSession, lakehouse: Lakehouse, *, commits_back: int = 200) -> WindowsCount | None:
    """The windows' count at a version of the table that pairs with a version of raw_rides, also while the window
    stream writes: the newest reconcile commit of the current stream (among the last `commits_back` commits) was
    made with the stream stopped at the raw_rides version it records. Before any, the table and the stream's
    position as they stand, read again afterwards to make sure no micro-batch came in between (three attempts).
    None before the stream has read a whole version of raw_rides, or when it kept writing through each attempt.

    Args:
        spark: The session to read the table with.
        lakehouse: Where the windows table and its checkpoint are.
        commits_back: How many of the table's newest commits to look through for a reconcile commit.

    Returns:
        The count and the versions it pairs, or None (see above).
    """
    path = lakehouse.table_path(WINDOWS)
    for _ in range(3):
        position = stream_position(lakehouse.checkpoint_path(WINDOWS))
        log = DeltaLog(path)
        latest = log.latest_version()
        if position is None or position.version is None or latest is None:
            return None
        pinned = _newest_reconcile_commit(log, position, latest, commits_back)
        version, rides_version = pinned if pinned is not None else (latest, position.version)
        counted = sum(sum_columns(spark, path, ["trip_count", "late_trip_count"], version=version).values())
        if pinned is not None:
            return WindowsCount(version, rides_version, counted, reconciled=True)
        if stream_position(lakehouse.checkpoint_path(WINDOWS)) == position and log.latest_version() == latest:
            return WindowsCount(version, rides_version, counted, reconciled=False)
    return None


def _newest_reconcile_commit(
    log: DeltaLog, position: StreamPosition, latest: int, commits_back: int
) -> tuple[int, int] | None:
    """(the table version, the raw_rides version it reconciled) of the newest reconcile of this window stream over
    this raw_rides table among the `commits_back` newest commits; None when there is none."""
    for index, commit in enumerate(log.commits(latest=latest)):
        if index >= commits_back:
            return None
        marker = commit.user_metadata or {}
        if (
            marker.get("writer") == RECONCILE_WRITER
            and marker.get("query_id") == position.query_id
            and marker.get("raw_rides_id") == position.table_id
        ):
            return commit.version, int(marker["raw_rides_version"])
    return None


@dataclass(frozen=True)
class AddedFile:
    """A data file a commit added, with the statistics Delta wrote for it (None: none)."""

    path: str
    stats: dict[str, Any] | None


def _appended_files(spark: SparkSession, path: str, after: int, until: int) -> list[AddedFile] | None:
    """The data files that the commits (after, until] of the Delta table at `path` added; None unless those
    commits only appended rows (or rewrote files without changing rows, as OPTIMIZE does), the table maps no
    column names (the files hold its columns under their own names) and the log still holds the commits. Read
    from the commits themselves (Delta's log protocol), no Spark job: the cost follows the new commits."""
    from urllib.parse import unquote

    log = DeltaLog(path)
    root = path.rstrip("/")
    if _column_mapping(spark, path, until):
        return None
    files = []
    for version in range(after + 1, until + 1):
        actions = log.actions(version)
        if actions is None:
            return None  # a commit file is gone (log clean-up)
        for action in actions:
            add, remove, metadata = action.get("add"), action.get("remove"), action.get("metaData")
            if remove is not None and remove.get("dataChange") is not False:
                return None  # rows deleted or rewritten
            if metadata is not None and _maps_columns(metadata):
                return None
            if add is not None and add.get("dataChange") is not False:
                if add.get("deletionVector") is not None:
                    return None
                relative = unquote(add["path"])
                absolute = relative if "://" in relative or relative.startswith("/") else f"{root}/{relative}"
                files.append(AddedFile(absolute, json.loads(add["stats"]) if add.get("stats") else None))
    return sorted(files, key=lambda f: f.path)


def _column_mapping(spark: SparkSession, path: str, version: int) -> bool:
    """Whether the table at `path` maps its column names at `version` (its files then name columns otherwise): from
    the version's checksum file (`.crc`, which Delta writes with every commit, with the table's metadata), else
    from Spark."""
    text = read_text(f"{path.rstrip('/')}/_delta_log/{version:020d}.crc")
    metadata = (json.loads(text) if text else {}).get("metadata")
    if isinstance(metadata, dict):
        return _maps_columns(metadata)
    properties = spark.sql(f"DESCRIBE DETAIL {delta_path_sql(path)}").select("properties").collect()[0][0] or {}
    return _maps_columns({"configuration": properties})


def _maps_columns(metadata: dict[str, Any]) -> bool:
    return (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none") not in ("none", None)


def _covering_ranges(windows: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """At most `limit` [start, end) ranges covering every window: adjacent windows merge, then the smallest gaps
    close until few enough are left (a coarser filter reads more, never less)."""
    ranges: list[list[int]] = []
    for start, end in sorted(set(windows)):
        if ranges and start <= ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], end)
        else:
            ranges.append([start, end])
    while len(ranges) > limit:
        gap = min(range(len(ranges) - 1), key=lambda i: ranges[i + 1][0] - ranges[i][1])
        ranges[gap][1] = ranges[gap + 1][1]
        del ranges[gap + 1]
    return [(start, end) for start, end in ranges]


def _micros(value: int) -> Column:
    from pyspark.sql import functions as F

    return F.timestamp_micros(F.lit(value))


def _in_ranges(column: str, ranges: list[tuple[int, int]]) -> Column:
    """`column` in one of the [start, end) ranges of epoch microseconds; false when there is none."""
    from pyspark.sql import functions as F

    terms = [(F.col(column) >= _micros(s)) & (F.col(column) < _micros(e)) for s, e in ranges]
    return reduce(lambda a, b: a | b, terms) if terms else F.lit(False)


def _same_window(left: DataFrame, right: DataFrame, how: str) -> DataFrame:
    """`left` semi- or anti-joined with `right` on (window_start, vendor_id), null vendors matching."""
    from pyspark.sql import functions as F

    keys = right.select(F.col("window_start").alias("_k_start"), F.col("vendor_id").alias("_k_vendor"))
    condition = (F.col("window_start") == F.col("_k_start")) & F.col("vendor_id").eqNullSafe(F.col("_k_vendor"))
    return left.join(keys, condition, how)


def reconcile_ride_windows(
    spark: SparkSession, lakehouse: Lakehouse, *, window_duration: str, log: Log | None = None
) -> WindowReconcile:
    """Late counts and finality of the windows, at the raw_rides version the window stream has consumed.

    Writes one MERGE commit whose userMetadata records that version; nothing when no ride was added since the
    previous reconcile. Cost: the rides added since then, the windows they fall in (Delta skips the files of
    raw_rides outside their pickup times), and the windows not final yet.

    Args:
        spark: The session to run on (its `txnAppId`/`txnVersion` and commit metadata are set for the MERGE, then
            unset).
        lakehouse: Where raw_rides, the windows table and its checkpoint are.
        window_duration: The windows' length, a Spark interval (the stream's).
        log: Where to report what the reconcile did (nowhere when None).

    Returns:
        What the reconcile did, and why (`reason`).
    """
    from pyspark.sql import functions as F

    table_path = lakehouse.table_path(WINDOWS)
    result = WindowReconcile()
    point = _reconcile_point(spark, lakehouse, result)
    if point is None:
        return result
    position, version = point
    files = _files_to_reconcile(spark, lakehouse, version, result)
    if files is not None and _nothing_can_change(spark, lakehouse, window_duration, position, files):
        result.reason = (
            f"skipped: no ride of the {len(files)} file(s) added after raw_rides version {result.previous_version} "
            "falls in a window the watermark has passed, and no window closed"
        )
        if log is not None:
            log.info(f"{WINDOWS}: reconcile at raw_rides version {version} {result.reason}")
        return result
    windows = read_table(spark, table_path)
    is_final = F.col("window_end") <= _micros(position.watermark_micros)
    counts, current = _counts_to_reconcile(spark, lakehouse, window_duration, version, windows, files, result)
    changed = _changed_windows(counts, current, windows, is_final, broadcast=not result.full)
    result.windows, result.late_rides_found = len(changed), sum(int(r["late_found"]) for r in changed)
    if changed:
        reconciled_at = {
            "writer": RECONCILE_WRITER,
            "raw_rides_version": version,
            "raw_rides_id": position.table_id,
            "query_id": position.query_id,
            "full": result.full,
        }
        app_id = reconcile_app_id(position)
        if result.previous_version is not None and result.previous_version > version:
            # The window checkpoint went back (restored from a copy): Delta would skip a txnVersion below the one
            # it has, so this reconcile and the next ones record under a new appId of the same stream.
            app_id = f"{app_id}~{uuid.uuid4().hex}"
        _merge_reconciled(spark, table_path, changed, reconciled_at, txn=(app_id, version))
    if log is not None:
        log.info(
            f"{WINDOWS}: reconciled at raw_rides version {version} ({result.reason}): "
            f"{result.windows} window(s) written, {result.late_rides_found} late ride(s) found"
        )
    return result


def _reconcile_point(
    spark: SparkSession, lakehouse: Lakehouse, result: WindowReconcile
) -> tuple[StreamPosition, int] | None:
    """Where the window stream is and the raw_rides version it has consumed (sets `result.previous_version`, the
    version the previous reconcile recorded); None, with `result.reason` saying why, when there is nothing to
    reconcile."""
    position = stream_position(lakehouse.checkpoint_path(WINDOWS))
    if position is None or position.version is None:
        result.reason = "the window stream has not consumed a whole version of raw_rides yet"
        return None
    exists, result.previous_version = _last_reconcile(lakehouse.table_path(WINDOWS), position)
    if not exists:
        result.reason = "no window yet"
        return None
    result.raw_rides_version = version = position.version
    result.watermark = from_epoch_micros(position.watermark_micros)
    if result.previous_version == version:
        result.reason = "no ride since the previous reconcile"
        return None
    return position, version


def _files_to_reconcile(
    spark: SparkSession, lakehouse: Lakehouse, version: int, result: WindowReconcile
) -> list[AddedFile] | None:
    """The files raw_rides gained after the previous reconcile, up to `version`; None when every window must be
    recounted instead (`result.full` and `result.reason` say why)."""
    previous, full_reason = result.previous_version, None
    files: list[AddedFile] | None = None
    if previous is None or previous > version:
        full_reason = "no earlier reconcile of this window stream"
    elif (files := _appended_files(spark, lakehouse.table_path(RAW_RIDES.name), previous, version)) is None:
        full_reason = (
            f"raw_rides changed other than by appends after version {previous}, maps its column names, or log "
            "cleanup removed its commits since (the windows were last reconciled more than "
            "delta.logRetentionDuration ago)"
        )
    if full_reason is not None:
        result.full, result.reason = True, full_reason
        return None
    return files


def _nothing_can_change(
    spark: SparkSession, lakehouse: Lakehouse, window_duration: str, position: StreamPosition, files: list[AddedFile]
) -> bool:
    """Whether a reconcile would write nothing: no ride of `files` can be late (by their statistics, the earliest
    pickup of each falls in a window ending after the watermark, which only grows, so no ride of theirs met a
    passed watermark) and no window that is not final has ended by the watermark. Unknown statistics: False."""
    from streaming_pipeline.lakehouse.settings import interval_seconds

    duration = interval_seconds(window_duration, name="window_duration") * 1_000_000
    for file in files:
        stats = file.stats or {}
        earliest = (stats.get("minValues") or {}).get("pickup_datetime")
        if earliest is None or (stats.get("nullCount") or {}).get("pickup_datetime") != 0:
            return False
        start = _epoch_micros(earliest) // duration * duration  # Spark's tumbling windows start at the epoch
        if start + duration <= position.watermark_micros:
            return False
    windows = small_table(spark, lakehouse.table_path(WINDOWS))
    if windows is None:
        return False
    watermark = _naive_utc_timestamp(position.watermark_micros)
    return not bool(((~windows["is_final"].astype(bool)) & (windows["window_end"] <= watermark)).any())


def _epoch_micros(text: str) -> int:
    """A timestamp of Delta's statistics ('2026-01-01T00:00:00.000Z', milliseconds at most) in epoch
    microseconds."""
    from datetime import datetime

    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:  # a timestamp without time zone: the session's, UTC
        moment = moment.replace(tzinfo=EPOCH.tzinfo)
    return int((moment - EPOCH).total_seconds() * 1_000_000)


def _naive_utc_timestamp(micros: int) -> Any:
    """Epoch microseconds as a pandas timestamp, naive in UTC (as `small_table` gives timestamps)."""
    import pandas as pd

    return pd.Timestamp(micros, unit="us")


def _counts_to_reconcile(
    spark: SparkSession,
    lakehouse: Lakehouse,
    window_duration: str,
    version: int,
    windows: DataFrame,
    files: list[AddedFile] | None,
    result: WindowReconcile,
) -> tuple[DataFrame, DataFrame]:
    """(the windows' counts of the rides in raw_rides at the stream's version, the table's windows to compare them
    with). Every window on a full recount (`files` None); otherwise only the windows that the rides of `files`
    (added since the previous reconcile) fall in."""
    rides = spark.read.format("delta").option("versionAsOf", version).load(lakehouse.table_path(RAW_RIDES.name))
    if files is None:
        return ride_window_aggregates(rides, window_duration), windows
    counts, current = _counts_of_touched_windows(
        spark, window_duration, rides, windows, [f.path for f in files], result
    )
    result.reason = (
        f"{result.new_rides} ride(s) in {len(files)} file(s) added after raw_rides version {result.previous_version}"
    )
    return counts, current


def _counts_of_touched_windows(
    spark: SparkSession,
    window_duration: str,
    rides: DataFrame,
    windows: DataFrame,
    files: list[str],
    result: WindowReconcile,
) -> tuple[DataFrame, DataFrame]:
    """The counts and the table's rows of the windows that the rides in `files` (added to raw_rides since the
    previous reconcile) fall in; sets `result.new_rides`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    # The files as Delta wrote them (no column mapping, no deletion vector: appends), with the table's types.
    columns = StructType([rides.schema[c] for c in ("pickup_datetime", "vendor_id", "total_amount")])
    touched = (
        ride_window_aggregates(spark.read.schema(columns).parquet(*files), window_duration)
        .select(
            F.unix_micros("window_start").alias("s"),
            F.unix_micros("window_end").alias("e"),
            "vendor_id",
            "trip_count",
        )
        .collect()
        if files
        else []
    )
    result.new_rides = sum(int(r["trip_count"]) for r in touched)
    ranges = _covering_ranges([(int(r["s"]), int(r["e"])) for r in touched], _MAX_RANGES)
    keys = spark.createDataFrame([(int(r["s"]), r["vendor_id"]) for r in touched], "s long, vendor_id int").select(
        F.timestamp_micros("s").alias("window_start"), "vendor_id"
    )
    counts = _same_window(
        ride_window_aggregates(rides.where(_in_ranges("pickup_datetime", ranges)), window_duration),
        F.broadcast(keys),
        "left_semi",
    )
    # Few windows: broadcast them rather than shuffle both sides of each join.
    return counts, F.broadcast(windows.where(_in_ranges("window_start", ranges)))


def _changed_windows(
    counts: DataFrame, current: DataFrame, windows: DataFrame, is_final: Column, *, broadcast: bool
) -> list[Any]:
    """The windows whose late count or finality changes (start_us, end_us, vendor_id, late_trip_count, is_final,
    late_found), brought to the driver."""
    from pyspark.sql import functions as F

    recounted = window_late_counts(counts, current).select(
        "window_start",
        "window_end",
        "vendor_id",
        "late_trip_count",
        is_final.alias("is_final"),
        (F.col("late_trip_count") - F.col("previous_late_trip_count")).alias("late_found"),
    )
    # Windows the watermark passed since the previous reconcile keep their counts and become final.
    newly_final = _same_window(
        windows.where(~F.col("is_final") & is_final).select(
            "window_start",
            "window_end",
            "vendor_id",
            "late_trip_count",
            F.lit(True).alias("is_final"),
            F.lit(0).cast("long").alias("late_found"),
        ),
        F.broadcast(recounted) if broadcast else recounted,
        "left_anti",
    )
    # The changes are computed once and brought to the driver (one row per window written: few, except on a full
    # recount, and then a few per hour of rides), so that the counts and the MERGE see the same rows. Not
    # localCheckpoint(): over Spark Connect its result is bound to the process's active session, which need not
    # be `spark` (a replay runs its job beside its own session), and it then fails with "No DataFrame with id".
    return (
        recounted.unionByName(newly_final)
        .select(
            F.unix_micros("window_start").alias("start_us"),
            F.unix_micros("window_end").alias("end_us"),
            "vendor_id",
            F.col("late_trip_count").cast("long").alias("late_trip_count"),
            "is_final",
            F.col("late_found").cast("long").alias("late_found"),
        )
        .collect()
    )


def _merge_reconciled(
    spark: SparkSession, table_path: str, changed: list[Any], marker: dict[str, Any], *, txn: tuple[str, int]
) -> None:
    """One MERGE of the `changed` windows (rows of `_changed_windows`), its commit marked with `marker` and with the
    Delta transaction `txn` (appId, the raw_rides version it reconciled)."""
    from pyspark.sql import functions as F

    changes = spark.createDataFrame(
        [(r["start_us"], r["end_us"], r["vendor_id"], r["late_trip_count"], r["is_final"]) for r in changed],
        "start_us long, end_us long, vendor_id int, late_trip_count long, is_final boolean",
    ).select(
        F.timestamp_micros("start_us").alias("window_start"),
        F.timestamp_micros("end_us").alias("window_end"),
        "vendor_id",
        "late_trip_count",
        "is_final",
    )
    view = "window_reconcile_changes"
    changes.createOrReplaceTempView(view)
    # Listing the window starts (when they are few) lets Delta skip the files of the table that hold none of them.
    starts = sorted({int(r["start_us"]) for r in changed})
    listed = starts if len(starts) <= _MAX_KEYS_IN_MERGE else []
    pruning = f" AND t.window_start IN ({', '.join(f'timestamp_micros({s})' for s in listed)})" if listed else ""
    # Delta's idempotent DML: the session's txnAppId/txnVersion go into the MERGE's commit as a `txn` action.
    settings = {
        "spark.databricks.delta.commitInfo.userMetadata": json.dumps(marker, sort_keys=True),
        "spark.databricks.delta.write.txnAppId": txn[0],
        "spark.databricks.delta.write.txnVersion": str(txn[1]),
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        spark.sql(
            f"MERGE INTO {delta_path_sql(table_path)} t USING {view} s ON {WINDOW_KEY}{pruning} "
            "WHEN MATCHED THEN UPDATE SET late_trip_count = s.late_trip_count, is_final = s.is_final "
            "WHEN NOT MATCHED THEN INSERT (window_start, window_end, vendor_id, trip_count, total_amount_sum, "
            "max_pickup_datetime, late_trip_count, is_final) VALUES (s.window_start, s.window_end, s.vendor_id, 0, "
            "0.0, NULL, s.late_trip_count, s.is_final)"
        )
    finally:
        for key in settings:
            spark.conf.unset(key)
        spark.catalog.dropTempView(view)
