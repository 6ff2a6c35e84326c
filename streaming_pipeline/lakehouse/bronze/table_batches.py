"""The foreachBatch handler of a table topic's table (a source declared `mode: upsert`): decode one micro-batch's keys
and values, set its undecodable records aside in the dead-letter table, MERGE the latest record of each key into the
table (a tombstone deletes the key's row), and with history, every version of each key into `<table>_history`.

Like `bronze.batches`, it imports no Dagster and holds plain data only, and what it did comes back through the Delta
log: after the MERGEs, an empty append to the table carries the batch's Delta transaction (txnAppId
`bronze:<asset>:<checkpoint id>`, txnVersion = batch id) and its marker, so the sensor, the checks and `replay` read
what a table topic's table has consumed exactly as they read a stream's bronze table.

Exactly once without a transaction spanning the three tables: each write is idempotent on its own, so a batch run
again after a crash (Spark runs the batch it had not committed) changes nothing that the first attempt wrote.
- the dead letters are appended with their own transaction (skipped when the table has the batch);
- the current table's MERGE only replaces a row by a record of a higher offset (of the same partition) and only
  inserts the newest record of a key, so applying a batch twice leaves the table as once;
- the history's MERGE inserts a version only when no row has its Kafka coordinates, and closes a key's current
  version only for a record of a higher offset.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse.bronze.batches import (
    bronze_app_id,
    current_schemas,
    dead_letter_app_id,
    worker_registry,
)
from streaming_pipeline.lakehouse.bronze.offsets import checkpoint_batch_offsets, checkpoint_id
from streaming_pipeline.lakehouse.engine.delta_tables import append_once, delta_path_sql, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass
class TableBatchWriter:
    """The foreachBatch handler of one table topic's table (and its history table when `history_path` is set)."""

    registry_url: str
    registry_auth: str | None
    key_subject: str
    value_subject: str
    fallback_key_schema: str
    fallback_value_schema: str
    key_fields: tuple[str, ...]
    value_fields: tuple[str, ...]
    table_path: str
    dead_letter_path: str
    asset_name: str
    checkpoint_dir: str
    history_path: str | None = None
    valid_from_field: str = ""
    registry_ca: str | None = None
    registry_keystore: str | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        from streaming_pipeline.lakehouse.bronze.decode import dead_letter_rows
        from streaming_pipeline.lakehouse.bronze.keyed import (
            TOMBSTONE,
            decode_keyed_records,
            first_change_per_key,
            key_versions,
            keyed_rows,
            latest_per_key,
        )

        registry = worker_registry(self.registry_url, self.registry_auth, self.registry_ca, self.registry_keystore)
        cp_id = checkpoint_id(self.checkpoint_dir)
        app_id = bronze_app_id(self.asset_name, cp_id)
        batch_name = f"micro-batch {batch_id} of {self.asset_name}"
        key_schemas, key_reader = current_schemas(
            registry, self.key_subject, self.fallback_key_schema, batch, batch_name
        )
        value_schemas, value_reader = current_schemas(
            registry, self.value_subject, self.fallback_value_schema, batch, batch_name
        )
        extra: dict[str, Any] = {
            "checkpoint_id": cp_id,
            "kafka_offsets": checkpoint_batch_offsets(self.checkpoint_dir, batch_id),
            "writer_schema_ids": sorted(value_schemas),
            "key_schema_ids": sorted(key_schemas),
        }
        attempt = uuid.uuid4().hex
        decoded = decode_keyed_records(batch, key_schemas, key_reader, value_schemas, value_reader).persist()
        try:
            dead_letters = dead_letter_rows(decoded)
            # Only a batch with undecodable records writes to the table every source shares (an empty commit there
            # would race other runs' first writes of it for nothing).
            if not dead_letters.isEmpty():
                append_once(
                    dead_letters, self.dead_letter_path, dead_letter_app_id(app_id), batch_id, attempt, extra=extra
                )
            rows = keyed_rows(decoded, self.key_fields, self.value_fields)
            columns = [c for c in rows.columns if c != TOMBSTONE]
            self._ensure_columns(rows.select(*columns), self.table_path)
            extra.update(self._merge_latest(latest_per_key(rows, self.key_fields), columns, batch_id))
            if self.history_path is not None:
                valid_from = F.col(self.valid_from_field) if self.valid_from_field else None
                versions = key_versions(rows, self.key_fields, valid_from).drop(TOMBSTONE)
                self._ensure_columns(versions, self.history_path)
                closes = first_change_per_key(rows, self.key_fields, valid_from)
                extra.update(self._merge_history(versions, closes, batch_id))
            # The batch's transaction and marker: what the table has consumed (an empty append commits them).
            append_once(rows.select(*columns).limit(0), self.table_path, app_id, batch_id, attempt, extra=extra)
        finally:
            decoded.unpersist()

    @staticmethod
    def _ensure_columns(rows: DataFrame, path: str) -> None:
        """Create the table at `path` with the columns of `rows`, or add the ones it lacks (a field a new version of
        the schema added), by an empty append."""
        if table_exists(path) and set(rows.columns) <= set(rows.sparkSession.read.format("delta").load(path).columns):
            return
        rows.limit(0).write.format("delta").mode("append").option("mergeSchema", "true").save(path)

    def _merge_latest(self, latest: DataFrame, columns: list[str], batch_id: int) -> dict[str, int]:
        """MERGE the newest record of each key: a tombstone deletes the key's row, a value replaces an older one or
        is inserted. Returns the rows inserted, updated and deleted."""
        from streaming_pipeline.lakehouse.bronze.keyed import TOMBSTONE

        newer = "(s.kafka_partition <> t.kafka_partition OR s.kafka_offset > t.kafka_offset)"
        view = self._view("latest", batch_id)
        row = self._merge(
            latest,
            view,
            f"MERGE INTO {delta_path_sql(self.table_path)} t USING {view} s ON {_keys_equal(self.key_fields)} "
            f"WHEN MATCHED AND s.{TOMBSTONE} AND {newer} THEN DELETE "
            f"WHEN MATCHED AND NOT s.{TOMBSTONE} AND {newer} THEN UPDATE SET "
            + ", ".join(f"{_quoted(c)} = s.{_quoted(c)}" for c in columns)
            + f" WHEN NOT MATCHED AND NOT s.{TOMBSTONE} THEN INSERT ({', '.join(map(_quoted, columns))}) "
            f"VALUES ({', '.join('s.' + _quoted(c) for c in columns)})",
        )
        return {
            "rows_inserted": row.get("num_inserted_rows", 0),
            "rows_updated": row.get("num_updated_rows", 0),
            "rows_deleted": row.get("num_deleted_rows", 0),
        }

    def _merge_history(self, versions: DataFrame, closes: DataFrame, batch_id: int) -> dict[str, int]:
        """MERGE into the history table: close each key's current version that a record of this batch supersedes
        (`valid_to`, `is_current` false), and insert the batch's versions. Returns the versions inserted and
        closed."""
        from pyspark.sql import functions as F

        assert self.history_path is not None
        columns = versions.columns
        staged = versions.withColumn("_change", F.lit("version")).unionByName(
            closes.withColumn("_change", F.lit("close")), allowMissingColumns=True
        )
        keys = _keys_equal(self.key_fields)
        on = (
            f"({keys} AND s._change = 'close' AND t.is_current AND "
            "(s.kafka_partition <> t.kafka_partition OR s.kafka_offset > t.kafka_offset)) OR "
            f"({keys} AND s._change = 'version' AND t.kafka_partition = s.kafka_partition "
            "AND t.kafka_offset = s.kafka_offset)"
        )
        view = self._view("history", batch_id)
        row = self._merge(
            staged,
            view,
            f"MERGE INTO {delta_path_sql(self.history_path)} t USING {view} s ON {on} "
            "WHEN MATCHED AND s._change = 'close' THEN UPDATE SET valid_to = s.valid_from, is_current = false "
            f"WHEN NOT MATCHED AND s._change = 'version' THEN INSERT ({', '.join(map(_quoted, columns))}) "
            f"VALUES ({', '.join('s.' + _quoted(c) for c in columns)})",
        )
        return {"versions_inserted": row.get("num_inserted_rows", 0), "versions_closed": row.get("num_updated_rows", 0)}

    @staticmethod
    def _merge(source: DataFrame, view: str, statement: str) -> dict[str, int]:
        """Run the MERGE `statement`, whose source is `source` as the temporary view `view`; returns Delta's metrics
        of it (`num_inserted_rows`, ...)."""
        spark = source.sparkSession
        source.createOrReplaceTempView(view)
        try:
            metrics = spark.sql(statement).collect()
        finally:
            spark.catalog.dropTempView(view)
        return {name: int(value or 0) for name, value in (metrics[0].asDict() if metrics else {}).items()}

    def _view(self, what: str, batch_id: int) -> str:
        return f"{what}_{re.sub(r'[^A-Za-z0-9_]', '_', self.asset_name)}_{batch_id}_{uuid.uuid4().hex[:8]}"


def _quoted(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def _keys_equal(key_fields: tuple[str, ...]) -> str:
    """The MERGE condition of one key: every key field equal (null-safe)."""
    return " AND ".join(f"t.{_quoted(k)} <=> s.{_quoted(k)}" for k in key_fields)


def marker_counts(markers: list[dict[str, Any]], name: str) -> int:
    """The sum of a count (`rows_inserted`, `rows_deleted`, ...) over the markers of a table topic's batches."""
    return sum(int(m.get(name) or 0) for m in markers)
