"""What a table is: its columns (name, Spark SQL type, description) and its layer; the Kafka coordinates every
bronze table carries. Plain Python, importing neither Dagster nor Spark."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

BRONZE = "bronze"
SILVER = "silver"
GOLD = "gold"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark SQL type, lower case as the UI shows it: int, bigint, double, string, timestamp, ...
    description: str | None = None


@dataclass(frozen=True)
class Table:
    name: str
    layer: str  # bronze, silver or gold: the asset group
    columns: tuple[Column, ...]
    #: Its columns are whatever its query gives (a table declared by its SQL): `columns` only describe some of them,
    #: and have no types.
    columns_from_query: bool = False

    @property
    def catalog_name(self) -> str:
        """Its name in Spark's catalog: `<layer>.<table>` (`bronze.raw_rides`, `gold.vendor_counts`)."""
        return f"{self.layer}.{self.name}"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def described_by(self, descriptions: Mapping[str, str]) -> Table:
        """The table with `descriptions` for the columns it does not describe: a declared column without a description
        takes one; a table whose columns are its query's also gains those it does not name (described, untyped)."""
        columns = tuple(
            c if c.description or c.name not in descriptions else replace(c, description=descriptions[c.name])
            for c in self.columns
        )
        if self.columns_from_query:
            named = set(self.column_names)
            columns += tuple(Column(name, "", text) for name, text in descriptions.items() if name not in named)
        return replace(self, columns=columns)

    @property
    def ddl(self) -> str:
        """The schema as Spark DDL (`name TYPE, ...`), for `createDataFrame([], ddl)`."""
        return ddl(self.columns)


def ddl(columns: tuple[Column, ...]) -> str:
    return ", ".join(f"{c.name} {c.type.upper()}" for c in columns)


#: Columns every bronze table carries besides the decoded Avro fields.
KAFKA_COLUMNS = (
    Column("kafka_topic", "string", "Source topic."),
    Column("kafka_partition", "int", "Source partition."),
    Column("kafka_offset", "bigint", "Offset within the partition; (topic, partition, offset) is unique."),
    Column("kafka_timestamp", "timestamp", "Kafka record timestamp (UTC)."),
    Column("schema_id", "int", "Registry id of the writer schema the record was encoded with."),
)
KAFKA_COLUMN_NAMES = [c.name for c in KAFKA_COLUMNS]
#: What identifies a Kafka record in a table that keeps its coordinates.
KAFKA_KEY = ["kafka_topic", "kafka_partition", "kafka_offset"]
