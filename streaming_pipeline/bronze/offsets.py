"""What a bronze table has consumed from Kafka, and whether its table, checkpoint and topic still agree.

Spark-free, for the sensors, the checks and the start of every bronze run. Files are read through fsspec
(`engine.delta_log`), so a lakehouse given as a plain path, a `file://` URI or an object-store URI (`s3a://`, with
s3fs installed) reads the same way.

Two records of consumption exist:
- the query checkpoint: Spark writes `offsets/<batch>` before a micro-batch and `commits/<batch>` after it,
  and `metadata` ({"id": ...}) once, when the checkpoint is created;
- the bronze table's Delta log: every bronze commit carries a marker (`userMetadata`) with the writer
  (txnAppId `bronze:<asset>:<checkpoint id>`), the batch id and the Kafka end offsets of that batch. A replay
  commits a marker that names the offsets the rebuilt table starts from.

The table's markers are what the sensor and the checks read: they are what is durably in Delta, on any
storage. The checkpoint is compared with them at the start of a run (`check_bronze_state`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from streaming_pipeline.engine.delta_log import commits, filesystem, numbered_files, read_text
from streaming_pipeline.errors import BronzeStateError

Offsets = dict[int, int]


def replay_hint(asset_name: str, start: str = "earliest") -> str:
    return f"`streaming-pipeline replay {asset_name} --from {start}`"


# -- the checkpoint ------------------------------------------------------------------------------------------


def checkpoint_id(checkpoint_dir: str) -> str | None:
    """The id Spark gave the checkpoint when it created it (its `metadata` file); None before the first run."""
    text = read_text(checkpoint_dir.rstrip("/") + "/metadata")
    if not text:
        return None
    return str(json.loads(text.splitlines()[0])["id"])


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


def checkpoint_last_commit(checkpoint_dir: str) -> int | None:
    """The newest batch id the query committed (its sink had it before the commit file); None when none."""
    fs, path = filesystem(checkpoint_dir.rstrip("/") + "/commits")
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


# -- the table's markers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """The `userMetadata` of one Delta commit, with the commit's version."""

    version: int
    metadata: dict[str, Any]

    @property
    def is_replay(self) -> bool:
        return "replay_of" in self.metadata

    def kafka_offsets(self, topic: str) -> Offsets:
        """The offsets this commit says the table has consumed up to (a replay: starts from)."""
        key = "starting_offsets" if self.is_replay else "kafka_offsets"
        parts = (self.metadata.get(key) or {}).get(topic) or {}
        return {int(p): int(o) for p, o in parts.items()}


def delta_markers(table_uri: str) -> Iterator[Marker] | None:
    """The commit markers in the table's Delta log, newest first, read lazily; None when there is no table."""
    found = commits(table_uri)
    if found is None:
        return None
    return (Marker(commit.version, commit.user_metadata) for commit in found if commit.user_metadata is not None)


def bronze_app_prefix(asset_name: str) -> str:
    return f"bronze:{asset_name}:"


@dataclass(frozen=True)
class BronzePosition:
    """Where a bronze table stands, from its newest bronze or replay marker."""

    table_exists: bool
    marker: Marker | None = None

    @property
    def checkpoint_id(self) -> str | None:
        return None if self.marker is None else self.marker.metadata.get("checkpoint_id")

    def consumed(self, topic: str) -> Offsets:
        return {} if self.marker is None else self.marker.kafka_offsets(topic)


def bronze_position(table_uri: str, asset_name: str) -> BronzePosition:
    markers = delta_markers(table_uri)
    if markers is None:
        return BronzePosition(table_exists=False)
    prefix = bronze_app_prefix(asset_name)
    for marker in markers:
        if marker.metadata.get("replay_of") == asset_name or str(marker.metadata.get("app_id", "")).startswith(prefix):
            return BronzePosition(table_exists=True, marker=marker)
    return BronzePosition(table_exists=True)


def table_start_offsets(table_uri: str, asset_name: str, topic: str) -> Offsets:
    """The offsets the table's content starts at: where its newest replay started it, else the topic's start (0)."""
    for marker in delta_markers(table_uri) or []:
        if marker.metadata.get("replay_of") == asset_name:
            return marker.kafka_offsets(topic)
    return {}


def consumed_offsets(table_uri: str, asset_name: str, topic: str) -> Offsets:
    """{partition: next offset} that the bronze table holds everything below; {} before its first batch."""
    return bronze_position(table_uri, asset_name).consumed(topic)


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
    marker = position.marker
    # A batch is appended to the table before the checkpoint commits it; a batch planned but not committed
    # (a crash, a failed run) is simply run again.
    if marker is None or marker.is_replay:
        if last_commit is not None:
            state = "does not exist" if not position.table_exists else "has no batch of it"
            raise BronzeStateError(
                f"{asset_name}: the checkpoint has committed batches up to {last_commit} but the table {state} "
                f"(was the table deleted or recreated while its checkpoint was kept?): {where}. {lost} {recover}"
            )
        return position
    table_batch = int(marker.metadata["batch_id"])
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
    asset_name: str, topic: str, consumed: Offsets, watermarks: dict[int, tuple[int, int]]
) -> TopicProblems:
    """Compare the consumed offsets with the topic's (earliest, end) offsets per partition."""
    backwards, deleted = {}, {}
    for partition, offset in sorted(consumed.items()):
        low, high = watermarks.get(partition, (0, 0))
        if offset > high:
            backwards[partition] = (offset, high)
        elif offset < low:
            deleted[partition] = (offset, low)
    return TopicProblems(asset_name, topic, backwards, deleted)
