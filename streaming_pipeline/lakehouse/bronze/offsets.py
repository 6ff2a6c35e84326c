"""What a bronze table has consumed from Kafka, and whether its table, checkpoint and topic still agree.

Spark-free, for the sensors, the checks and the start of every bronze run. Files are read through fsspec
(`engine.delta_log`), so a lakehouse given as a plain path, a `file://` URI or an object-store URI (`s3a://`, through
pyarrow's S3 client) reads the same way.

Two records of consumption exist, and together they say it exactly for as long as the pipeline runs:
- the bronze table's Delta transactions: every bronze batch is appended atomically with a `txn` action
  (appId `bronze:<asset>:<checkpoint id>`, version = batch id), and a replay empties the table with appId
  `replay:<asset>`. Delta's checkpoints keep `txn` actions, so they survive log cleanup (unlike the commits'
  `userMetadata`, which the bronze commits still carry for people reading the history);
- the query checkpoint: Spark writes `offsets/<batch>` (the batch's end offsets) before a micro-batch and
  `commits/<batch>` after it, `sources/0/0` (the offsets the query started from) before its first batch, and
  `metadata` ({"id": ...}) once, when the checkpoint is created. Spark keeps the newest 100 batches.

So what a table has consumed is the end offsets, in its checkpoint, of the newest batch its transactions name.
The two are compared at the start of every run (`check_bronze_state`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from streaming_pipeline.lakehouse.engine.delta_log import DeltaLog, commits, filesystem, numbered_files, read_text
from streaming_pipeline.lakehouse.engine.sink_position import checkpoint_last_commit, checkpoint_query_id
from streaming_pipeline.lakehouse.errors import BronzeStateError

Offsets = dict[int, int]


def replay_hint(asset_name: str, start: str = "earliest") -> str:
    return f"`streaming-pipeline replay {asset_name} --from {start}`"


# -- the checkpoint ------------------------------------------------------------------------------------------


def checkpoint_id(checkpoint_dir: str) -> str | None:
    """The id Spark gave the checkpoint when it created it (its `metadata` file); None before the first run."""
    return checkpoint_query_id(checkpoint_dir)


def checkpoint_batch_offsets(checkpoint_dir: str, batch_id: int) -> dict[str, Offsets]:
    """{topic: {partition: end offset}} of micro-batch `batch_id` (from `offsets/<batch>`); {} when absent."""
    text = read_text(f"{checkpoint_dir.rstrip('/')}/offsets/{batch_id}")
    if not text:
        return {}
    # v1, then the batch's metadata, then one line per source: the Kafka source's is {topic: {partition: offset}}.
    for line in text.splitlines()[2:]:
        offsets = json.loads(line)
        return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in offsets.items()}
    return {}


def checkpoint_last_batch(checkpoint_dir: str) -> int | None:
    """The newest batch id in the checkpoint's offset log (planned, maybe not committed); None when empty."""
    fs, path = filesystem(checkpoint_dir.rstrip("/") + "/offsets")
    batches = numbered_files(fs, path)
    return batches[-1] if batches else None


def checkpoint_kafka_offsets(checkpoint_dir: str) -> dict[str, Offsets]:
    """{topic: {partition: next offset}} up to which a bronze query has committed; {} before its first commit."""
    fs, path = filesystem(checkpoint_dir.rstrip("/") + "/commits")
    for batch in reversed(numbered_files(fs, path)):
        offsets = checkpoint_batch_offsets(checkpoint_dir, batch)
        if offsets:
            return offsets
    return {}


# -- the table's transactions ----------------------------------------------------------------------------


def checkpoint_start_offsets(checkpoint_dir: str) -> dict[str, Offsets]:
    """{topic: {partition: offset}} where the query's Kafka source started (resolved when the checkpoint's first
    batch was planned: `sources/0/0`); {} before that. Spark never cleans this file up."""
    text = read_text(checkpoint_dir.rstrip("/") + "/sources/0/0")
    if not text:
        return {}
    # A zero byte (Spark 2.1 compatibility), the version line, then {topic: {partition: offset}}.
    for line in text.lstrip("\x00").splitlines():
        if line.startswith("{"):
            offsets = json.loads(line)
            return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in offsets.items()}
    return {}


def bronze_app_prefix(asset_name: str) -> str:
    return f"bronze:{asset_name}:"


def replay_app_id(asset_name: str) -> str:
    """The Delta txnAppId of the commit by which `streaming-pipeline replay` empties a bronze table."""
    return f"replay:{asset_name}"


@dataclass(frozen=True)
class BronzePosition:
    """Where a bronze table stands, from its Delta transactions (which checkpoints keep, unlike commit info).

    Every bronze batch is appended with (txnAppId `bronze:<asset>:<checkpoint id>`, txnVersion = batch id), and a
    replay empties the table with txnAppId `replay:<asset>`; the newest of them (by the time Delta recorded)
    says what the table holds: the batches of one checkpoint up to `batch_id`, or a replay with no batch since.
    """

    table_exists: bool
    checkpoint_id: str | None = None
    batch_id: int | None = None
    replayed: bool = False


def bronze_position(table_uri: str, asset_name: str) -> BronzePosition:
    log = DeltaLog(table_uri)
    latest = log.latest_version()
    if latest is None:
        return BronzePosition(table_exists=False)
    found = log.transactions(version=latest)
    prefix = bronze_app_prefix(asset_name)
    batches = [txn for txn in found.values() if txn.app_id.startswith(prefix)]
    newest = max(batches, key=lambda txn: txn.last_updated or 0, default=None)
    replay = found.get(replay_app_id(asset_name))
    if replay is not None and (newest is None or (replay.last_updated or 0) >= (newest.last_updated or 0)):
        return BronzePosition(table_exists=True, replayed=True)
    if newest is None:
        return BronzePosition(table_exists=True)
    return BronzePosition(True, checkpoint_id=newest.app_id.removeprefix(prefix), batch_id=newest.version)


def replay_start_offsets(table_uri: str, asset_name: str, topic: str) -> Offsets:
    """The offsets the newest replay of the table starts from, named by the replay's commit (a recent one: no
    bronze batch has been committed since); BronzeStateError when log cleanup removed that commit."""
    for commit in commits(table_uri) or []:
        marker = commit.user_metadata or {}
        if marker.get("replay_of") == asset_name:
            parts = (marker.get("starting_offsets") or {}).get(topic) or {}
            return {int(p): int(o) for p, o in parts.items()}
    raise BronzeStateError(
        f"{asset_name}: the table at {table_uri} was emptied by a replay whose first batch never ran, and the commit "
        "that says where it starts is no longer in the Delta log (log cleanup after delta.logRetentionDuration). "
        f"Run the replay again: {replay_hint(asset_name)} (or --from-offsets/--from-time)."
    )


def _batch_offsets(position: BronzePosition, checkpoint_dir: str, asset_name: str, topic: str) -> Offsets:
    """The end offsets of the table's newest batch, from its checkpoint's offset log (Spark writes `offsets/<batch>`
    before the batch and keeps the newest ones)."""
    assert position.batch_id is not None
    current = checkpoint_id(checkpoint_dir)
    if current != position.checkpoint_id:
        state = "is gone or empty" if current is None else f"is now {current}"
        raise BronzeStateError(
            f"{asset_name}: the table holds micro-batches up to {position.batch_id} of checkpoint "
            f"{position.checkpoint_id}, but the checkpoint {checkpoint_dir} {state} (deleted, reset or replaced?): "
            f"what the table has consumed cannot be known. Rebuild it with {replay_hint(asset_name)} "
            "(or --from-offsets/--from-time)."
        )
    offsets = checkpoint_batch_offsets(checkpoint_dir, position.batch_id)
    if not offsets:
        raise BronzeStateError(
            f"{asset_name}: the table holds micro-batch {position.batch_id} of checkpoint {checkpoint_dir}, whose "
            "offset log no longer has that batch (was the checkpoint restored from an older copy?). Rebuild the "
            f"table with {replay_hint(asset_name)}."
        )
    return offsets.get(topic, {})


def position_offsets(
    position: BronzePosition, table_uri: str, checkpoint_dir: str, asset_name: str, topic: str
) -> Offsets:
    """{partition: next offset} that the bronze table holds everything below (a replay: starts from); {} before
    its first batch. BronzeStateError when the table and its checkpoint no longer say it."""
    if position.replayed:
        return replay_start_offsets(table_uri, asset_name, topic)
    if position.batch_id is None:
        return {}
    return _batch_offsets(position, checkpoint_dir, asset_name, topic)


def consumed_offsets(table_uri: str, checkpoint_dir: str, asset_name: str, topic: str) -> Offsets:
    """{partition: next offset} that the bronze table holds everything below; {} before its first batch."""
    return position_offsets(bronze_position(table_uri, asset_name), table_uri, checkpoint_dir, asset_name, topic)


def settled_offsets(table_uri: str, checkpoint_dir: str, asset_name: str, topic: str) -> Offsets:
    """{partition: next offset} below which the bronze table and the dead-letter table are both final, also while
    a query writes them: a micro-batch appends its rows, then its dead letters, then Spark commits it in the
    checkpoint. So it is the newest batch of the table once the checkpoint has committed it, else the batch
    before (the newest is in flight: its dead letters may still come), else where the table starts."""
    position = bronze_position(table_uri, asset_name)
    if position.batch_id is not None and not position.replayed:
        last_commit = checkpoint_last_commit(checkpoint_dir)
        if last_commit is None or last_commit < position.batch_id:
            if position.batch_id == 0:
                return table_start_offsets(table_uri, checkpoint_dir, asset_name, topic)
            position = replace(position, batch_id=position.batch_id - 1)
    return position_offsets(position, table_uri, checkpoint_dir, asset_name, topic)


def table_start_offsets(table_uri: str, checkpoint_dir: str, asset_name: str, topic: str) -> Offsets:
    """The offsets the table's content starts at: where a replay pending its first batch starts it, else where
    the checkpoint that wrote it started (the earliest offsets then, or a replay's); {} for no content."""
    position = bronze_position(table_uri, asset_name)
    if position.replayed:
        return replay_start_offsets(table_uri, asset_name, topic)
    if position.batch_id is None or checkpoint_id(checkpoint_dir) != position.checkpoint_id:
        return {}
    return checkpoint_start_offsets(checkpoint_dir).get(topic, {})


def consumer_lag(end_offsets: Offsets, consumed: Offsets) -> Offsets:
    """Records waiting per partition: end offset minus what the table has consumed (never negative: offsets
    that went backwards are `topic_problems`)."""
    return {partition: max(0, end - consumed.get(partition, 0)) for partition, end in sorted(end_offsets.items())}


# -- agreement between table, checkpoint and topic -------------------------------------------------------


def check_bronze_state(table_uri: str, checkpoint_dir: str, asset_name: str) -> BronzePosition:
    """Raise BronzeStateError when the table and its checkpoint do not belong together.

    A checkpoint deleted or reset while the table was kept would re-read the topic (duplicates); a table
    deleted or recreated while its checkpoint was kept would never get the records the checkpoint has
    passed (loss). Both need a replay, which rebuilds the table from Kafka with a new checkpoint.
    """
    position = bronze_position(table_uri, asset_name)
    current_id = checkpoint_id(checkpoint_dir)
    last_batch = checkpoint_last_batch(checkpoint_dir)
    last_commit = checkpoint_last_commit(checkpoint_dir)
    where = f"table {table_uri} and checkpoint {checkpoint_dir}"
    recover = f"Rebuild the table from Kafka with {replay_hint(asset_name)} (or --from-offsets/--from-time)."
    lost = "Running on would never re-read what the checkpoint has passed."
    # A batch is appended to the table before the checkpoint commits it; a batch planned but not committed
    # (a crash, a failed run) is simply run again.
    table_batch = position.batch_id
    if table_batch is None:
        if last_commit is not None:
            state = "does not exist" if not position.table_exists else "has no batch of it"
            raise BronzeStateError(
                f"{asset_name}: the checkpoint has committed batches up to {last_commit} but the table {state} "
                f"(was the table deleted or recreated while its checkpoint was kept?): {where}. {lost} {recover}"
            )
        return position
    if current_id is None or last_batch is None:
        raise BronzeStateError(
            f"{asset_name}: the table holds micro-batches up to {table_batch} of checkpoint "
            f"{position.checkpoint_id}, but the checkpoint is gone or empty (deleted or reset?): {where}. "
            f"Running on would read the topic again into the same table. {recover}"
        )
    if position.checkpoint_id != current_id:
        raise BronzeStateError(
            f"{asset_name}: the table was written by checkpoint {position.checkpoint_id} but the checkpoint now "
            f"is {current_id} (replaced or reset?): {where}. {recover}"
        )
    if table_batch > last_batch:
        raise BronzeStateError(
            f"{asset_name}: the table holds batch {table_batch} but the checkpoint's newest batch is {last_batch} "
            f"(the checkpoint was restored from an older copy?): {where}. {recover}"
        )
    if last_commit is not None and last_commit > table_batch:
        raise BronzeStateError(
            f"{asset_name}: the checkpoint committed batch {last_commit} but the table's newest batch is {table_batch} "
            f"(the table was restored to an older version?): {where}. {lost} {recover}"
        )
    return position


@dataclass(frozen=True)
class TopicProblems:
    """Partitions where the consumed offsets no longer fit the topic's [earliest, end] offsets."""

    asset_name: str
    topic: str
    went_backwards: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition: (consumed, end)
    deleted_unread: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition: (consumed, earliest)

    def __bool__(self) -> bool:
        return bool(self.went_backwards or self.deleted_unread)

    def message(self) -> str:
        parts = []
        if self.went_backwards:
            detail = ", ".join(
                f"[{p}] consumed up to {c}, topic ends at {e}" for p, (c, e) in sorted(self.went_backwards.items())
            )
            parts.append(f"offsets went backwards (was the topic deleted and recreated?): {detail}")
        if self.deleted_unread:
            detail = ", ".join(
                f"[{p}] offsets {c}..{e - 1} ({e - c} record(s))" for p, (c, e) in sorted(self.deleted_unread.items())
            )
            parts.append(f"records were deleted (retention) before {self.asset_name} read them: {detail}")
        return (
            f"{self.asset_name} cannot go on reading {self.topic}: "
            + "; ".join(parts)
            + f". Rebuild the table from what the topic holds now with {replay_hint(self.asset_name)}."
        )


def topic_problems(
    asset_name: str, topic: str, consumed: Offsets, watermarks: dict[int, tuple[int, int]], *, table_topic: bool = False
) -> TopicProblems:
    """Compare the consumed offsets with the topic's (earliest, end) offsets per partition. For a `table_topic`,
    records deleted before they were read are no problem: what a compacted topic drops is superseded by a newer
    record of the same key, which the table reads."""
    backwards, deleted = {}, {}
    for partition, offset in sorted(consumed.items()):
        low, high = watermarks.get(partition, (0, 0))
        if offset > high:
            backwards[partition] = (offset, high)
        elif offset < low and not table_topic:
            deleted[partition] = (offset, low)
    return TopicProblems(asset_name, topic, backwards, deleted)
