"""Expectations: rules on the rows of a streaming table or a source, each a name, a Spark SQL boolean expression over
the row and what a violation does, with the meaning of Lakeflow's expectations:

- `warn`: the row is written; its violation is counted;
- `drop`: the row is not written to the table but set aside in the table's quarantine table, as it was, with the
  names of the rules it broke, the micro-batch and when; it never vanishes;
- `fail`: the micro-batch fails before anything of it is written, with an error naming the table, the rule and the
  violating row's values; its records are read again by the next run.

A rule holds for a row when its expression is true: false and NULL are violations, as in Delta's CHECK constraints
(write `x IS NULL OR x >= 0` to accept a missing value).

What each micro-batch broke (`rule_metrics`: the rows checked, each rule's violations and a few violating values) is
observed as it passes, in a streaming table's query's progress (`DataFrame.observe`), which reports a micro-batch
once it is committed; a source's bronze handler computes it on the decoded micro-batch and keeps it in the marker of
the table's commit (`streaming_pipeline.lakehouse.bronze.batches`). Either way a micro-batch run again after a crash
is counted once.

A table that drops rows writes each micro-batch twice, the kept rows then the quarantined ones, each with Delta's
idempotent writes (txnAppId, txnVersion): a micro-batch run again after a crash between the two writes skips the
first and writes the second, so each row is in one of the two tables, once.

Plain Python and Spark, no Dagster: the handler runs in the engine's Python worker.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from streaming_pipeline.lakehouse.engine.delta_tables import append_once
from streaming_pipeline.lakehouse.engine.sink_position import checkpoint_query_id
from streaming_pipeline.lakehouse.errors import ConfigurationError, ExpectationError
from streaming_pipeline.lakehouse.table_model import Column as TableColumn

if TYPE_CHECKING:
    import sqlglot.expressions as exp
    from pyspark.sql import Column, DataFrame

Action = Literal["warn", "drop", "fail"]
ACTIONS: tuple[Action, ...] = ("warn", "drop", "fail")
#: The observation of a table's expectations in its query's progress.
OBSERVATION = "expectations"
#: How many violating rows' values each rule's counts carry.
SAMPLE_SIZE = 5
#: The quarantine table's columns after the row's own.
RULES_BROKEN, BATCH_ID, QUARANTINED_AT = "_rules_broken", "_batch_id", "_quarantined_at"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IDENTIFIER = re.compile(r"`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Expectation:
    """A rule on a table's rows: `name`, the Spark SQL boolean `constraint` over the row, and what a violation does
    (`on_violation`)."""

    name: str
    constraint: str
    on_violation: Action = "warn"

    def violated(self) -> Column:
        """True for a row that breaks the rule (its constraint false or NULL)."""
        from pyspark.sql import functions as F

        return ~F.coalesce(F.expr(self.constraint), F.lit(False))

    def values(self, columns: Sequence[str]) -> Column:
        """A row's values of the columns the rule reads (of `columns`, the row's; all of them when it names none of
        them), as JSON: what a count's sample and a failure show."""
        from pyspark.sql import functions as F

        named = spelled_columns([self], columns)
        values = F.struct(*[F.col(f"`{c}`") for c in named or columns])
        return F.to_json(values, {"ignoreNullFields": "false"})


def spelled_columns(expectations: Sequence[Expectation], columns: Sequence[str]) -> list[str]:
    """The columns of `columns` whose names the rules' constraints spell (a word or a `quoted` name, any case): what
    a violating row's values show. Without parsing (sqlglot stays out of the engine's Python worker)."""
    words = {(quoted or word).lower() for rule in expectations for quoted, word in _IDENTIFIER.findall(rule.constraint)}
    return [c for c in columns if c.lower() in words]


def constraint_columns(constraint: str) -> tuple[str, ...]:
    """The columns a constraint names (parsed with sqlglot, Spark's dialect)."""
    import sqlglot.expressions as exp

    return tuple(dict.fromkeys(c.name for c in _parsed(constraint).find_all(exp.Column)))


def _parsed(constraint: str) -> exp.Expr:
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        parsed = sqlglot.parse_one(constraint, read="spark")
    except (ParseError, TokenError) as exc:
        raise ConfigurationError(f"{constraint!r} does not parse: {str(exc).splitlines()[0]}") from None
    if parsed is None:
        raise ConfigurationError("the constraint is empty")
    return parsed


def check_expectations(expectations: Sequence[Expectation], columns: Sequence[str] | None) -> None:
    """Raise ConfigurationError for what cannot be a table's rules: a name that is not an identifier, two rules of
    one name, an unknown action, a constraint that does not parse or cannot be a row's truth value (a query, an
    aggregate, a value), or that names a column the table does not have (`columns`, when the table's columns are
    known before it runs)."""
    import sqlglot.expressions as exp

    # What cannot be a row's truth value: a literal (TRUE and FALSE are booleans, not literals, to sqlglot), arithmetic.
    not_a_condition = (exp.Literal, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.DPipe, exp.Concat)
    seen: set[str] = set()
    for rule in expectations:
        where = f"expectation {rule.name!r}"
        if not _NAME.fullmatch(rule.name):
            raise ConfigurationError(f"{where}: the name is not an identifier (letters, digits and _)")
        if rule.name.lower() in seen:
            raise ConfigurationError(f"{where} is declared twice: each rule of a table has a name of its own")
        seen.add(rule.name.lower())
        if rule.on_violation not in ACTIONS:
            raise ConfigurationError(
                f"{where}: unknown on_violation {rule.on_violation!r} (one of {', '.join(ACTIONS)})"
            )
        try:
            parsed = _parsed(rule.constraint)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
        inner = parsed.unnest()
        if isinstance(inner, exp.Query) or any(True for _ in parsed.find_all(exp.Query)):
            raise ConfigurationError(f"{where}: {rule.constraint!r} holds a query; a rule reads the row only")
        if any(True for _ in parsed.find_all(exp.AggFunc)):
            raise ConfigurationError(f"{where}: {rule.constraint!r} aggregates; a rule reads one row at a time")
        if isinstance(inner, not_a_condition):
            raise ConfigurationError(
                f"{where}: {rule.constraint!r} is not a boolean expression (a condition on the row, such as "
                "`total >= 0`)"
            )
        if columns is not None:
            known = {c.lower() for c in columns}
            unknown = [c for c in constraint_columns(rule.constraint) if c.lower() not in known]
            if unknown:
                raise ConfigurationError(
                    f"{where}: {rule.constraint!r} names {', '.join(unknown)}, not a column of the table (its "
                    f"columns: {', '.join(columns)})"
                )


def checked(rows: DataFrame, table: str, expectations: Sequence[Expectation]) -> DataFrame:
    """`rows` with the table's rules observed as they pass (`OBSERVATION`: the rows, each rule's violations and a
    few violating values), and with `drop` rules each row carrying the rules it broke (`RULES_BROKEN`: every rule,
    so that a quarantined row says all it broke). A constraint the rows cannot take (an unknown column, not a
    boolean) raises ExpectationError naming the table and the rule. (`fail` rules are the handler's:
    `FailOnViolation`.)"""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    columns = rows.columns
    for rule in expectations:
        try:
            kind = rows.select(F.expr(rule.constraint).alias("holds")).schema["holds"].dataType
        except Exception as exc:
            raise ExpectationError(
                f"{table}: expectation {rule.name!r} ({rule.constraint}) cannot be evaluated on the table's rows "
                f"(columns: {', '.join(columns)}): {str(exc).splitlines()[0]}"
            ) from None
        if not isinstance(kind, BooleanType):
            raise ExpectationError(
                f"{table}: expectation {rule.name!r} ({rule.constraint}) is of type {kind.simpleString()}, not a "
                "boolean: a rule is a condition on the row"
            )
    rows = rows.observe(OBSERVATION, *rule_metrics(expectations, columns))
    if not drop_rules(expectations):
        return rows
    return rows.withColumn(RULES_BROKEN, broken_rules(expectations))


def rule_metrics(expectations: Sequence[Expectation], columns: Sequence[str]) -> list[Column]:
    """The aggregates of what rules find in rows of `columns`: the rows, each rule's violations and a few violating
    rows' values, and the rows a `drop` rule sets aside (`dropped`, with drop rules only): what `counts_of_observed`
    sums."""
    from pyspark.sql import functions as F

    metrics = [F.count(F.lit(1)).alias("rows")]
    for rule in expectations:
        metrics.append(F.count(F.when(rule.violated(), 1)).alias(f"violations_{rule.name}"))
        sample = F.collect_list(F.when(rule.violated(), rule.values(columns)))
        metrics.append(F.slice(sample, 1, SAMPLE_SIZE).alias(f"sample_{rule.name}"))
    dropping = [rule for rule in expectations if rule.on_violation == "drop"]
    if dropping:
        metrics.append(F.count(F.when(_any(rule.violated() for rule in dropping), 1)).alias("dropped"))
    return metrics


def broken_rules(expectations: Sequence[Expectation]) -> Column:
    """The names of the rules a row breaks (every rule, so that a quarantined row says all it broke)."""
    from pyspark.sql import functions as F

    return F.filter(
        F.array(*[F.when(rule.violated(), F.lit(rule.name)) for rule in expectations]), lambda name: name.isNotNull()
    )


def _any(conditions: Any) -> Column:
    import functools
    import operator

    return functools.reduce(operator.or_, conditions)


@dataclass(frozen=True)
class ExpectationCounts:
    """What a table's rules found in some micro-batches: the rows checked, and per rule its violations and a few
    violating rows' values."""

    rows: int = 0
    violations: Mapping[str, int] = field(default_factory=dict)
    samples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    dropped: int = 0  # rows set aside: each broke at least one `drop` rule


def counts_of(progresses: Sequence[Mapping[str, Any]], expectations: Sequence[Expectation]) -> ExpectationCounts:
    """The sums over micro-batches' progress reports (each one committed, reported once) of what the rules found."""
    return counts_of_observed(
        [(progress.get("observedMetrics") or {}).get(OBSERVATION) for progress in progresses], expectations
    )


def counts_of_observed(
    found: Sequence[Mapping[str, Any] | None], expectations: Sequence[Expectation]
) -> ExpectationCounts:
    """The sums of what the rules found in micro-batches, each the values of `rule_metrics` (None: not checked)."""
    rows = dropped = 0
    violations = {rule.name: 0 for rule in expectations}
    samples: dict[str, list[str]] = {rule.name: [] for rule in expectations}
    for observed in found:
        if not observed:
            continue
        rows += int(observed.get("rows") or 0)
        dropped += int(observed.get("dropped") or 0)
        for rule in expectations:
            violations[rule.name] += int(observed.get(f"violations_{rule.name}") or 0)
            room = SAMPLE_SIZE - len(samples[rule.name])
            samples[rule.name].extend(list(observed.get(f"sample_{rule.name}") or [])[: max(room, 0)])
    return ExpectationCounts(rows, violations, {name: tuple(values) for name, values in samples.items()}, dropped)


@dataclass(frozen=True)
class CheckedRows:
    """What a table's rules make of some rows (`checked_rows`): the rows written, those set aside (with
    `RULES_BROKEN`), and the counts."""

    kept: DataFrame
    quarantined: DataFrame
    counts: ExpectationCounts


def checked_rows(rows: DataFrame, table: str, expectations: Sequence[Expectation]) -> CheckedRows:
    """The rules applied to batch `rows` as a micro-batch of the table gets them, for a unit test: a `fail` rule
    broken raises the ExpectationError the run would; otherwise the rows kept, those quarantined and the counts."""
    flagged = rows.withColumn(RULES_BROKEN, broken_rules(expectations)) if expectations else rows
    found = flagged.agg(*rule_metrics(expectations, rows.columns)).collect()[0].asDict()
    refuse_fail_violations(found, table, 0, expectations)
    dropping = drop_rules(expectations)
    dropped = dropped_rows(dropping) if dropping else None
    kept = flagged.where(~dropped) if dropped is not None else flagged
    quarantined = flagged.where(dropped) if dropped is not None else flagged.limit(0)
    return CheckedRows(
        kept.drop(RULES_BROKEN) if expectations else kept, quarantined, counts_of_observed([found], expectations)
    )


@dataclass
class FailOnViolation:
    """foreachBatch handler of a table with `fail` rules, around the one that writes its micro-batches: a micro-batch
    in which a row breaks one fails before anything of it is written, with an ExpectationError naming the table,
    the rules and a few violating rows' values; its records are read again by the next run."""

    handler: Callable[[DataFrame, int], None]
    table: str
    rules: tuple[Expectation, ...]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        batch = batch.persist()  # computed once: by this check, then by the writes
        try:
            values = F.to_json(
                F.struct(*[F.col(f"`{c}`") for c in self._columns(batch.columns)]), {"ignoreNullFields": "false"}
            )
            found = batch.select(broken_rules(self.rules).alias("broken"), values.alias("values"))
            violating = found.where(F.size("broken") > 0).limit(SAMPLE_SIZE).collect()
            if violating:
                names = list(dict.fromkeys(name for row in violating for name in row["broken"]))
                raise violation_error(self.table, batch_id, self.rules, names, [row["values"] for row in violating])
            self.handler(batch, batch_id)
        finally:
            batch.unpersist()

    def _columns(self, columns: Sequence[str]) -> list[str]:
        return spelled_columns(self.rules, columns) or list(columns)


def refuse_fail_violations(
    found: Mapping[str, Any], table: str, batch_id: int, expectations: Sequence[Expectation]
) -> None:
    """Raise `violation_error` when what `rule_metrics` found in a micro-batch (`found`) has violations of a `fail`
    rule, with the values it sampled."""
    broken = [rule.name for rule in fail_rules(expectations) if found[f"violations_{rule.name}"]]
    if broken:
        values = [value for name in broken for value in found[f"sample_{name}"]][:SAMPLE_SIZE]
        raise violation_error(table, batch_id, expectations, broken, values)


def violation_error(
    table: str, batch_id: int, rules: Sequence[Expectation], broken: Collection[str], values: Sequence[str]
) -> ExpectationError:
    """The error of a micro-batch in which rows broke `fail` rules: the table, the rules `broken` (of `rules`) and a
    few violating rows' `values`."""
    named = "; ".join(f"{r.name!r} ({r.constraint})" for r in rules if r.name in broken)
    return ExpectationError(
        f"{table}: micro-batch {batch_id} broke the expectation(s) {named}, whose on_violation is fail, on rows such "
        f"as {', '.join(values)}. Nothing of this micro-batch was written, and the next run reads its records again: "
        "correct them upstream, or change the rule"
    )


@dataclass
class DeltaWriteOnce:
    """foreachBatch handler writing each micro-batch to the Delta table once, as the Delta sink does: `append` its
    rows, or `complete` the whole result overwritten (Delta's idempotent writes, one writer id per checkpoint)."""

    table: str
    table_path: str
    checkpoint: str
    mode: Literal["append", "complete"]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        app_id = table_app_id(self.table, self.checkpoint)
        if self.mode == "append":
            append_once(batch, self.table_path, app_id, batch_id, uuid.uuid4().hex, merge_schema=True)
            return
        writer = batch.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        writer.option("txnAppId", app_id).option("txnVersion", batch_id).save(self.table_path)


@dataclass
class QuarantiningAppend:
    """foreachBatch handler of an append table with `drop` rules: the micro-batch's rows that broke none of them
    appended to the table, then those that did to its quarantine table (the row, the rules it broke, the batch, the
    time), each once per micro-batch (Delta's idempotent writes, one writer id per checkpoint)."""

    table: str
    table_path: str
    quarantine_path: str
    checkpoint: str
    drop_rules: tuple[str, ...]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        attempt, app_id = uuid.uuid4().hex, table_app_id(self.table, self.checkpoint)
        dropped = dropped_rows(self.drop_rules)
        batch = batch.persist()
        try:
            kept = batch.where(~dropped).drop(RULES_BROKEN)
            append_once(kept, self.table_path, app_id, batch_id, attempt, merge_schema=True)
            append_once(
                quarantine_rows(batch.where(dropped), batch_id),
                self.quarantine_path,
                quarantine_app_id(app_id),
                batch_id,
                attempt,
                merge_schema=True,
            )
        finally:
            batch.unpersist()


def dropped_rows(drop_rules: Sequence[str]) -> Column:
    """True for a row (with `RULES_BROKEN`) that broke one of the `drop` rules named."""
    from pyspark.sql import functions as F

    return F.arrays_overlap(F.col(RULES_BROKEN), F.array(*[F.lit(name) for name in drop_rules]))


def quarantine_rows(dropped: DataFrame, batch_id: int) -> DataFrame:
    """Rows set aside (with `RULES_BROKEN`) as the quarantine table holds them: with the micro-batch and the time."""
    from pyspark.sql import functions as F

    return dropped.select(
        *[F.col(f"`{c}`") for c in dropped.columns],
        F.lit(batch_id).cast("bigint").alias(BATCH_ID),
        F.current_timestamp().alias(QUARANTINED_AT),
    )


def quarantine_columns(writer: str) -> tuple[TableColumn, ...]:
    """The columns a quarantine table adds to the row's own, for the rows `writer`'s query sets aside."""
    return (
        TableColumn(RULES_BROKEN, "array<string>", "The names of the rules the row broke (every rule, of any action)."),
        TableColumn(BATCH_ID, "bigint", f"The micro-batch of the {writer} query that set the row aside."),
        TableColumn(QUARANTINED_AT, "timestamp", "When the row was set aside."),
    )


def table_app_id(table: str, checkpoint: str) -> str:
    """The Delta txnAppId of a table's query that writes through a handler: one per checkpoint (the id Spark wrote
    into it when it created it), so that a new checkpoint in the same place (a replay) never inherits the batch ids
    of the old one."""
    return f"{table}@{checkpoint_query_id(checkpoint)}"


def quarantine_app_id(app_id: str) -> str:
    return f"{app_id}->quarantine"


def drop_rules(expectations: Sequence[Expectation]) -> tuple[str, ...]:
    return tuple(rule.name for rule in expectations if rule.on_violation == "drop")


def fail_rules(expectations: Sequence[Expectation]) -> tuple[Expectation, ...]:
    return tuple(rule for rule in expectations if rule.on_violation == "fail")
