"""The foreachBatch handler of the bronze tables: decode one micro-batch of Confluent Avro, append its rows
exactly once, and its undecodable records to the dead-letter table.

The handler runs where Spark calls it: in this process for an in-process session, in a Python worker of the
Spark Connect server otherwise, which unpickles it and so imports this module. So the module imports no Dagster
(a worker starts faster without it), and the handler holds plain data only (no resource, session, client or
logger). What it did comes back through the Delta log: each commit carries a marker (`userMetadata`) naming
the writer and the batch, and its row count.

Exactly once: every Delta append of a micro-batch carries (txnAppId, txnVersion=batch id), so a batch replayed
after a crash is skipped by the tables that already have it. The txnAppId names the checkpoint
(`bronze:<asset>:<checkpoint id>`), so a new checkpoint never inherits the batch ids of an old one.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.bronze.offsets import bronze_app_prefix, checkpoint_batch_offsets, checkpoint_id
from streaming_pipeline.lakehouse.engine.delta_log import DeltaLog
from streaming_pipeline.lakehouse.engine.delta_tables import append_once
from streaming_pipeline.lakehouse.errors import RegistryUnavailableError
from streaming_pipeline.lakehouse.expectations import (
    RULES_BROKEN,
    Expectation,
    broken_rules,
    drop_rules,
    dropped_rows,
    quarantine_app_id,
    quarantine_rows,
    refuse_fail_violations,
    rule_metrics,
)
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streaming_pipeline.lakehouse.registry_client import RegistryClient

_REGISTRIES: dict[tuple[str, str | None, str | None, str | None], RegistryClient] = {}


def worker_registry(url: str, basic_auth_user_info: str | None, ca: str | None, keystore: str | None) -> RegistryClient:
    """One registry client per worker process, reused across micro-batches (its schema cache too)."""
    from streaming_pipeline.lakehouse.registry_client import RegistryClient

    key = (url, basic_auth_user_info, ca, keystore)
    if key not in _REGISTRIES:
        _REGISTRIES[key] = RegistryClient(
            url=url, basic_auth_user_info=basic_auth_user_info, ssl_ca_location=ca, ssl_keystore_location=keystore
        )
    return _REGISTRIES[key]


@dataclass
class BronzeBatchWriter:
    """The foreachBatch handler of one bronze table.

    One pass decodes the micro-batch and appends the good rows while an Observation counts the rest; only
    a batch with undecodable records is decoded again, for the dead letters. Writer schemas are the versions
    of the topic's value subject (topic name strategy), looked up per batch so that a version registered
    mid-run is read with its own fields; a record whose schema id is not one of them is a dead letter.
    """

    registry_url: str
    registry_auth: str | None
    subject: str
    fallback_reader_schema: str
    table_path: str
    dead_letter_path: str
    asset_name: str
    checkpoint_dir: str
    registry_ca: str | None = None  # the registry's HTTPS: its CA file, this client's key and certificates
    registry_keystore: str | None = None
    #: The source's rules on the decoded rows, and where its `drop` rules set rows aside (`write_checked`).
    expectations: tuple[Expectation, ...] = ()
    quarantine_path: str | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        from streaming_pipeline.lakehouse.bronze.decode import (
            bronze_rows,
            dead_letter_rows,
            decode_avro_frames,
            reader_schema_of,
            split_confluent_frames,
        )

        steps = _StepTimer()
        registry = worker_registry(self.registry_url, self.registry_auth, self.registry_ca, self.registry_keystore)
        cp_id = checkpoint_id(self.checkpoint_dir)
        app_id = bronze_app_id(self.asset_name, cp_id)
        kafka_offsets = checkpoint_batch_offsets(self.checkpoint_dir, batch_id)
        steps.lap("checkpoint")
        written = _committed_batch(self.table_path, app_id, batch_id)
        steps.lap("committed_check")
        if written is not None and "writer_schema_ids" in written:
            # A batch replayed after a crash, whose rows are in the table already: its dead letters must come from
            # the same decoding as its rows (the schemas of that attempt), not from what the registry holds today.
            writer_schemas, latest = self._schemas_of(registry, written, batch_id)
        else:
            writer_schemas, latest = current_schemas(
                registry,
                self.subject,
                self.fallback_reader_schema,
                batch,
                f"micro-batch {batch_id} of {self.asset_name}",
            )
        steps.lap("registry")
        # The marker records the checkpoint, this batch's end offsets (what the table has consumed, readable from
        # the Delta log by the sensor and the checks on any storage), the schemas its records were decoded with
        # (the reader schema derives from them: the latest version plus the fields only earlier ones have), and the
        # milliseconds the handler spent before the append, per step (`bench live` reports them).
        extra = {
            "checkpoint_id": cp_id,
            "kafka_offsets": kafka_offsets,
            "writer_schema_ids": sorted(writer_schemas),
            "reader_schema_id": _schema_id_of(writer_schemas, latest),
            "handler_ms": steps.laps,
        }
        reader_schema = reader_schema_of(writer_schemas, latest)
        decoded = decode_avro_frames(split_confluent_frames(batch), writer_schemas, reader_schema)
        attempt = uuid.uuid4().hex
        if self.expectations:
            self._write_checked(decoded, batch_id, app_id, attempt, extra, replayed=written is not None)
            return
        observation = Observation(f"bronze-{batch_id}-{attempt}")
        observed = decoded.observe(
            observation,
            F.count(F.lit(1)).alias("records"),
            F.count(F.when(F.col("error").isNull(), 1)).alias("good"),
        )
        written_now = append_once(
            bronze_rows(observed), self.table_path, app_id, batch_id, attempt, extra=extra, merge_schema=True
        )
        # Delta skips an append whose txnVersion it already has (a batch replayed after a crash) without running
        # the query; the Observation is only read when this very attempt committed.
        if written_now:
            metrics = observation.get
            if int(metrics["records"]) == int(metrics["good"]):
                return
        append_once(
            dead_letter_rows(decoded), self.dead_letter_path, dead_letter_app_id(app_id), batch_id, attempt, extra=extra
        )

    def _write_checked(
        self, decoded: DataFrame, batch_id: int, app_id: str, attempt: str, extra: dict[str, Any], *, replayed: bool
    ) -> None:
        """Write a micro-batch with the source's rules: first what they find in its rows (`rule_metrics`, in the
        table commit's marker, where the runs' checks read it), a `fail` rule broken raising before anything is
        written; then the rows no `drop` rule set aside to the table, the others to the quarantine table, and the
        undecodable records to the dead letters, each once (a replay after a crash writes what it lacks: the rows
        and the rules' verdicts are the same, decoded with the same schemas)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        from streaming_pipeline.lakehouse.bronze.decode import bronze_rows, dead_letter_rows

        rules, dropping = self.expectations, drop_rules(self.expectations)
        decoded = decoded.persist()
        try:
            rows = bronze_rows(decoded).withColumn(RULES_BROKEN, broken_rules(rules))
            found: dict[str, Any] = {}
            has_dead_letters = True
            if not replayed:
                # One job: the rules' counts, and (observed on the way) whether any record is a dead letter.
                decoding = Observation(f"bronze-checked-{batch_id}-{attempt}")
                observed = decoded.observe(decoding, F.count(F.col("error")).alias("dead_letters"))
                columns = [c for c in rows.columns if c != RULES_BROKEN]
                found = bronze_rows(observed).agg(*rule_metrics(rules, columns)).collect()[0].asDict()
                has_dead_letters = int(decoding.get["dead_letters"]) > 0
                refuse_fail_violations(found, self.asset_name, batch_id, rules)
            kept = rows.where(~dropped_rows(dropping)) if dropping else rows
            written = append_once(
                kept.drop(RULES_BROKEN),
                self.table_path,
                app_id,
                batch_id,
                attempt,
                extra={**extra, "expectations": found},
                merge_schema=True,
            )
            if dropping and self.quarantine_path and (not written or found.get("dropped")):
                quarantined = quarantine_rows(rows.where(dropped_rows(dropping)), batch_id)
                append_once(
                    quarantined, self.quarantine_path, quarantine_app_id(app_id), batch_id, attempt, merge_schema=True
                )
            if not written or has_dead_letters:
                append_once(
                    dead_letter_rows(decoded),
                    self.dead_letter_path,
                    dead_letter_app_id(app_id),
                    batch_id,
                    attempt,
                    extra=extra,
                )
        finally:
            decoded.unpersist()

    def _schemas_of(
        self, registry: RegistryClient, marker: dict[str, Any], batch_id: int
    ) -> tuple[dict[int, str], str]:
        """The writer schemas a committed batch was decoded with and its latest one's text, by their ids (ids never
        change meaning)."""
        ids = [int(i) for i in marker["writer_schema_ids"]]
        reader_id = marker.get("reader_schema_id")
        texts = {i: registry.schema_by_id(i) for i in {*ids, *([int(reader_id)] if reader_id is not None else [])}}
        missing = sorted(i for i, text in texts.items() if text is None)
        if missing:
            raise RegistryUnavailableError(
                f"micro-batch {batch_id} of {self.asset_name} is being replayed after a crash and was decoded with "
                f"schema ids {missing}, which the schema registry at {self.registry_url} no longer knows; its dead "
                "letters cannot be derived as its rows were. Restore those schemas (or the registry's data) and run "
                "again."
            )
        writer_schemas = {i: str(texts[i]) for i in ids}
        return writer_schemas, str(texts[int(reader_id)]) if reader_id is not None else self.fallback_reader_schema


def current_schemas(
    registry: RegistryClient, subject: str, fallback: str, batch: DataFrame, batch_name: str
) -> tuple[dict[int, str], str]:
    """The versions of `subject` now (writer schemas by id) and the latest one's text (`fallback` when none).

    A registry without the subject while `batch` (`batch_name`, for the error) has records raises: an emptied or
    wrong registry would turn every record into a dead letter while the checkpoint moves on, so the stream stops
    instead, before anything of the batch is written."""
    writer_schemas = registry.subject_schemas(subject)
    if not writer_schemas and not batch.isEmpty():
        raise RegistryUnavailableError(
            f"the schema registry at {registry.url} has no versions of subject {subject!r}, so no record of "
            f"{batch_name} could be decoded; check SCHEMA_REGISTRY_URL, or register the schema "
            "(`streaming-pipeline produce` does). Nothing was written and the batch will be read again."
        )
    latest = registry.latest(subject)
    return writer_schemas, latest[1] if latest else fallback


class _StepTimer:
    """Milliseconds per step of the handler, each from the end of the one before."""

    def __init__(self) -> None:
        self.laps: dict[str, int] = {}
        self._since = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.laps[step] = round(1000 * (now - self._since))
        self._since = now


def _committed_batch(table_path: str, app_id: str, batch_id: int) -> dict[str, Any] | None:
    """The marker of batch `batch_id` of writer `app_id` when the table has it already (a replay after a crash),
    else None. The writer's Delta transaction says whether the table has the batch (one read from the newest
    checkpoint on); only then are the newest commits read, back to the writer's latest one. None also when log
    cleanup removed that commit: the batch's dead letters are then decoded with today's schemas."""
    log = DeltaLog(table_path)
    latest = log.latest_version()
    if latest is None:
        return None
    txn = log.transactions(version=latest).get(app_id)
    if txn is None or txn.version < batch_id:
        return None
    for commit in log.commits(latest=latest):
        marker = commit.user_metadata or {}
        if marker.get("app_id") == app_id:
            return marker if marker.get("batch_id") == batch_id else None
    return None


def _schema_id_of(writer_schemas: dict[int, str], latest: str) -> int | None:
    """The id of the latest version among the writer schemas, else None (the fallback schema)."""
    matches = [schema_id for schema_id, text in writer_schemas.items() if text == latest]
    return max(matches) if matches else None


def bronze_app_id(asset_name: str, checkpoint: str | None) -> str:
    """The Delta txnAppId of a bronze query: one per checkpoint, so a new checkpoint never inherits the
    batch ids of an old one."""
    return f"{bronze_app_prefix(asset_name)}{checkpoint}"


def dead_letter_app_id(app_id: str) -> str:
    return f"{app_id}->{DEAD_LETTER_RECORDS.name}"
