"""What the continuous run reports of its tables: materializations with the rows each report's commits wrote, a
table caught up with its sources now and then, and the consumer lag of each bronze table. No Dagster definitions
here: the continuous run's op logs these events."""

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from streaming_pipeline.components.asset_metadata import current_column_schema
from streaming_pipeline.components.expectation_checks import check_evaluations, expectation_metadata
from streaming_pipeline.components.kafka_delta_source.sensors import lag_observation
from streaming_pipeline.lakehouse.bronze.offsets import consumed_offsets, consumer_lag
from streaming_pipeline.lakehouse.engine.delta_log import commits, latest_version
from streaming_pipeline.lakehouse.engine.streams import StreamQuery, StreamRunReport
from streaming_pipeline.lakehouse.engine.table_snapshot import row_count
from streaming_pipeline.lakehouse.errors import StreamingPipelineError
from streaming_pipeline.lakehouse.expectations import Expectation, ExpectationCounts, counts_of, counts_of_observed
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.table_model import Table
from streaming_pipeline.resources import KafkaResource, LakehouseResource


class TableReporter:
    """What the run says of its tables: a materialization per table that has new commits since its last one, with
    the rows those commits wrote; one with no rows every `caught_up_every` seconds for a table whose queries (and
    those of its sources) are caught up, so that an idle table is not late by its freshness policy while a table
    for which data waits and no commit comes is; and the consumer lag of each bronze table when it changed.

    Args:
        kafka: Where the bronze tables' topics' end offsets are read.
        lakehouse: Where the tables and the bronze checkpoints are.
        queries: The run's queries, with the tables each writes and the paths each reads.
        sources: The sources whose bronze tables the run streams.
        declared: The declared tables, by name (their column schemas).
        caught_up_every: How often a caught-up table with no new commit is reported, in seconds.
        clock: Seconds, monotonic (a test's own clock).
        name_table: Gives a table its catalog name; called once per run for each table, when it is first seen.
        expectations: Per query, the table its rules are on and the rules: what its micro-batches found is in the
            table's materialization, and each rule's check is evaluated on them.
    """

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
        expectations: Mapping[str, tuple[str, Sequence[Expectation]]] | None = None,
    ) -> None:
        self._kafka = kafka
        self._name_table = name_table  # gives a table its catalog name, once per run, when it is first seen
        self._named: set[str] = set()
        self._lakehouse = lakehouse
        self._tables = {q.name: q.tables for q in queries}
        by_path = {lakehouse.table_path(t): t for q in queries for t in q.tables}
        # The tables each query reads that another query writes (a loaded table, which no query streams, is not one).
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
        self._expectations = dict(expectations or {})

    def events(
        self, reports: dict[str, StreamRunReport], caught_up: set[str]
    ) -> list[dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation]:
        """The events of one report.

        Args:
            reports: Each query's micro-batches since the previous report (`ContinuousQueries.take_reports`).
            caught_up: The queries waiting for data (`ContinuousQueries.caught_up`).

        Returns:
            A materialization per table to report (with the check evaluations of its expectations, when its
            micro-batches checked rows), then an observation per bronze table whose lag changed.
        """
        events: list[dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation] = []
        self._rows = {}
        self._reports = reports
        consumed = {table: self._consumed(table) for table in self._sources}
        current = self._current_tables(caught_up)
        for query, tables in self._tables.items():
            report = reports.get(query)
            checked_table, rules = self._expectations.get(query, ("", ()))
            counts = counts_of(report.progresses if report is not None else [], rules)
            for table in tables:
                table_rules, found = rules, counts if table == checked_table and counts.rows else None
                source = self._sources.get(table)
                if source is not None and source.expectations:  # a source's: in its table's commits
                    table_rules = source.expectations
                    found = self._source_counts(table, table_rules)
                checked = expectation_metadata(found, table_rules) if found is not None else {}
                materialization = self._materialization(table, report, consumed.get(table), table in current, checked)
                if materialization is not None:
                    self._reported_at[table] = self._clock()
                    events.append(materialization)
                if found is not None:
                    events.extend(check_evaluations(table, found, table_rules))
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
        """The last report in one line.

        Returns:
            The rows each table got since the previous report, and each query's micro-batches.
        """
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

    def _source_counts(self, table: str, rules: Sequence[Expectation]) -> ExpectationCounts | None:
        """What a source's rules found in the micro-batches its bronze table committed since the last report (each
        commit's marker holds its batch's counts); None when it committed none that checked rows."""
        since = commits(self._lakehouse.table_path(table), after=self._versions.get(table))
        found = counts_of_observed([(c.user_metadata or {}).get("expectations") for c in since or []], rules)
        return found if found.rows else None

    def _materialization(
        self,
        table: str,
        report: StreamRunReport | None,
        consumed: dict[int, int] | None,
        current: bool,
        checked: Mapping[str, Any] | None = None,
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
        metadata.update(checked or {})  # what the table's expectations found in the micro-batches reported
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
