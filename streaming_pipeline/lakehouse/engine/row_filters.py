"""Conditions on a table's rows that a check counts by (`RowFilter`), each said once and evaluated by either
reader: pyarrow over the files delta-rs lists (no Spark job, `table_snapshot`), or Spark where delta-rs cannot
read the table. Both keep a row only where the condition is true (a null comparison keeps none)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow.compute as pc
    from pyspark.sql import Column


@dataclass(frozen=True)
class RowFilter:
    """A condition on rows, as a Spark column and as a pyarrow expression (built when asked for: each reader's
    library is imported only by its own path). `text` says it for a check's metadata."""

    text: str
    spark: Callable[[], Column]
    arrow: Callable[[], pc.Expression]


def not_null(column: str) -> RowFilter:
    def spark() -> Column:
        from pyspark.sql import functions as F

        return F.col(column).isNotNull()

    def arrow() -> pc.Expression:
        import pyarrow.compute as pc

        return pc.field(column).is_valid()

    return RowFilter(f"{column} IS NOT NULL", spark, arrow)


def equal_to(column: str, value: str | int) -> RowFilter:
    def spark() -> Column:
        from pyspark.sql import functions as F

        return F.col(column) == F.lit(value)

    def arrow() -> pc.Expression:
        import pyarrow.compute as pc

        return pc.field(column) == value

    return RowFilter(f"{column} = {value!r}", spark, arrow)


def kafka_offsets_below(offsets: Mapping[int, int]) -> RowFilter:
    """The records of the partitions in `offsets` below their offset there (none when `offsets` is empty)."""
    ordered = sorted(offsets.items())

    def spark() -> Column:
        from pyspark.sql import functions as F

        condition = F.lit(False)
        for partition, offset in ordered:
            condition = condition | ((F.col("kafka_partition") == partition) & (F.col("kafka_offset") < offset))
        return condition

    def arrow() -> pc.Expression:
        import pyarrow.compute as pc

        condition = pc.scalar(False)
        for partition, offset in ordered:
            condition = condition | ((pc.field("kafka_partition") == partition) & (pc.field("kafka_offset") < offset))
        return condition

    text = " OR ".join(f"(kafka_partition = {p} AND kafka_offset < {o})" for p, o in ordered) or "FALSE"
    return RowFilter(text, spark, arrow)


def all_of(*filters: RowFilter) -> RowFilter:
    """Rows where every one of `filters` holds."""
    return RowFilter(
        " AND ".join(f"({f.text})" for f in filters),
        lambda: reduce(lambda a, b: a & b, (f.spark() for f in filters)),
        lambda: reduce(lambda a, b: a & b, (f.arrow() for f in filters)),
    )
