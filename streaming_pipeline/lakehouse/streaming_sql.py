"""A streaming table's SQL, read as Lakeflow and Spark Declarative Pipelines read it: `STREAM(t)` is the table `t`
read as a stream, any other table is read as it is at each micro-batch, `${name}` is a parameter. What the query
reads, and whether it aggregates, comes from the SQL itself (parsed with sqlglot); the engine runs the SQL as
written, each table reference replaced by the DataFrame that reads it (`spark.sql`'s DataFrame arguments).

Plain Python, importing neither Dagster nor Spark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import ParseError, TokenError

from streaming_pipeline.lakehouse.errors import ConfigurationError

PARAMETER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# sqlglot (30.x) reads `GROUP BY window(...)` as the start of a WINDOW clause and fails; Spark's time-window
# functions are renamed, keeping their length (positions stay), in the copy that is parsed, never in what runs.
_WINDOW_FUNCTION = re.compile(r"\b(window)(\s*\()", re.IGNORECASE)


class StreamingSqlError(ConfigurationError):
    """A streaming table's SQL that cannot be read: the message names the line and column."""


@dataclass(frozen=True)
class TableReference:
    """One place the SQL names a table: `start`..`end` (inclusive) is the text to replace."""

    table: str
    streamed: bool
    start: int
    end: int


@dataclass(frozen=True)
class StreamingSql:
    """A streaming table's SQL, read: the tables it streams (`STREAM(t)`) and reads as they are, the parameters it
    uses, whether it aggregates, and the plain columns its outermost query groups by."""

    text: str
    references: tuple[TableReference, ...]
    parameters: tuple[str, ...]
    aggregates: bool
    grouped_by: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None  # its outermost query's columns, when it names each (no `*`)

    @property
    def streamed(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.table for r in self.references if r.streamed))

    @property
    def static(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.table for r in self.references if not r.streamed))

    @property
    def reads(self) -> tuple[str, ...]:
        """Every table it reads, streamed first, each once."""
        return tuple(dict.fromkeys([*self.streamed, *self.static]))

    def with_arguments(self) -> tuple[str, dict[str, tuple[str, bool]]]:
        """The SQL with each table reference replaced by a `{argument}` of `spark.sql` (the SQL's own braces
        doubled), and what each argument reads: (table, streamed)."""
        arguments: dict[str, tuple[str, bool]] = {}
        names: dict[tuple[str, bool], str] = {}
        pieces, position = [], 0
        for reference in sorted(self.references, key=lambda r: r.start):
            key = (reference.table, reference.streamed)
            if key not in names:
                names[key] = f"{'stream' if reference.streamed else 'table'}_{len(names)}"
                arguments[names[key]] = key
            pieces.append(_escape_braces(self.text[position : reference.start]))
            pieces.append("{" + names[key] + "}")
            position = reference.end + 1
        pieces.append(_escape_braces(self.text[position:]))
        return "".join(pieces), arguments


def _escape_braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def parameters_in(sql: str) -> tuple[str, ...]:
    """The `${name}` parameters of `sql`, each once, in order."""
    return tuple(dict.fromkeys(PARAMETER.findall(sql)))


def substitute(sql: str, values: Mapping[str, object]) -> str:
    """`sql` with each `${name}` replaced by its value as written (quote a string parameter in the SQL:
    `'${region}'`)."""
    missing = sorted(set(parameters_in(sql)) - set(values))
    if missing:
        raise StreamingSqlError(f"the SQL uses {', '.join('${' + m + '}' for m in missing)}, which has no value")
    return PARAMETER.sub(lambda match: str(values[match.group(1)]), sql)


def read_sql(sql: str, values: Mapping[str, object]) -> StreamingSql:
    """`sql`, its parameters given `values`, read: its table references, parameters and aggregation.

    Raises:
        StreamingSqlError: SQL that does not parse (with its line and column), more than one statement, a statement
            that is not a query, `STREAM t` without parentheses, or a qualified table name (`db.t`).
    """
    text = substitute(sql, values)
    parsed_text = _WINDOW_FUNCTION.sub(lambda m: "wind0w" + m.group(2), text)
    try:
        statements = [s for s in sqlglot.parse(parsed_text, read="spark") if s is not None]
    except (ParseError, TokenError) as exc:
        raise StreamingSqlError(f"the SQL does not parse: {_first_error(exc)}") from exc
    if len(statements) != 1:
        raise StreamingSqlError(f"the SQL holds {len(statements)} statements: a streaming table is one query")
    query = statements[0]
    if not isinstance(query, exp.Query):
        raise StreamingSqlError("the SQL is not a query: a streaming table is one SELECT (or WITH ... SELECT)")
    ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    references = []
    for table in query.find_all(exp.Table):
        if table.find_ancestor(exp.Hint) is not None:
            continue  # `/*+ BROADCAST(z) */` names an alias of the query, not a table
        references.extend(_references(table, ctes, parsed_text))
    aggregates = any(True for _ in query.find_all(exp.AggFunc)) or any(True for _ in query.find_all(exp.Group))
    group = query.args.get("group")
    grouped_by = tuple(c.name for c in group.expressions if isinstance(c, exp.Column)) if group else ()
    return StreamingSql(text, tuple(references), parameters_in(sql), aggregates, grouped_by, _columns(query))


def _columns(query: exp.Query) -> tuple[str, ...] | None:
    """The columns of the outermost query when it names each of them; None when it has a `*` (or a set operation)."""
    if not isinstance(query, exp.Select) or any(
        isinstance(e.unalias(), exp.Star) or isinstance(e, exp.Star) for e in query.expressions
    ):
        return None
    if any(isinstance(e, exp.Column) and isinstance(e.this, exp.Star) for e in query.expressions):
        return None
    names = tuple(query.named_selects)
    return names if len(names) == len(query.expressions) and all(names) else None


def _references(table: exp.Table, ctes: set[str], text: str) -> list[TableReference]:
    if isinstance(table.this, exp.Anonymous) and table.this.name.upper() == "STREAM":
        arguments = table.this.expressions
        if len(arguments) != 1 or not isinstance(arguments[0], exp.Column) or arguments[0].table:
            raise StreamingSqlError(f"{_where(table.this, text)}: STREAM takes one table name: STREAM(<table>)")
        identifier = arguments[0].this
        start = _keyword_start(text, identifier.meta["start"], "STREAM")
        end = text.index(")", identifier.meta["end"] + 1)
        return [TableReference(identifier.name, True, start, end)]
    if not isinstance(table.this, exp.Identifier):
        return []  # a table-valued function: not a table of the lakehouse
    if table.name.upper() == "STREAM" and table.alias:
        raise StreamingSqlError(f"{_where(table.this, text)}: write STREAM({table.alias}), with parentheses")
    if table.db or table.catalog:
        raise StreamingSqlError(
            f"{_where(table.this, text)}: {table.sql(dialect='spark')}: name a table of the lakehouse by its asset "
            f"name ({table.name})"
        )
    if table.name in ctes:
        return []
    return [TableReference(table.name, False, table.this.meta["start"], table.this.meta["end"])]


def _keyword_start(text: str, before: int, keyword: str) -> int:
    """Where `keyword` starts, the last word before `before` (only spaces and one '(' between)."""
    found = re.search(rf"{keyword}\s*\(\s*$", text[:before], re.IGNORECASE)
    if found is None:
        raise StreamingSqlError(f"{keyword} at {before} is not followed by '('")
    return found.start()


def _where(node: exp.Expression, text: str) -> str:
    meta = node.meta or {}
    if "line" in meta:
        return f"line {meta['line']}, column {meta['col']}"
    return "the SQL"


def _first_error(exc: ParseError | TokenError) -> str:
    if isinstance(exc, ParseError) and exc.errors:
        error = exc.errors[0]
        return f"line {error.get('line')}, column {error.get('col')}: {error.get('description')}"
    return str(exc).splitlines()[0]
