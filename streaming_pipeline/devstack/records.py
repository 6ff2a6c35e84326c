"""Records of a source topic read from a CSV file: by the Avro field names, or by the TLC header a source maps."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from streaming_pipeline.lakehouse.errors import InputDataError
from streaming_pipeline.lakehouse.schemas import avro_columns, load_schema
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.tables import RIDES

Record = dict[str, Any]

_INT, _FLOAT, _STR, _TS = "int", "float", "str", "timestamp"
# Column type (from the value schema) -> how a CSV cell is read.
_KINDS = {"int": _INT, "bigint": _INT, "float": _FLOAT, "double": _FLOAT, "string": _STR, "timestamp": _TS}


#: The NYC TLC exports' CSV headers, by topic: TLC column -> Avro field, where they differ.
TLC_HEADERS = {
    "rides": {
        "VendorID": "vendor_id",
        "tpep_pickup_datetime": "pickup_datetime",
        "tpep_dropoff_datetime": "dropoff_datetime",
        "RatecodeID": "rate_code_id",
        "PULocationID": "pu_location_id",
        "DOLocationID": "do_location_id",
    },
    "pickup_locations": {"PULocationID": "pu_location_id", "tpep_pickup_datetime": "pickup_datetime"},
    "taxi_zones": {"LocationID": "location_id", "Borough": "borough", "Zone": "zone"},
}


def csv_columns(source: SourceTopic) -> dict[str, tuple[str, str, bool]]:
    """CSV column -> (Avro field, how a cell is read, nullable), derived from the source's value schema: the column
    is the field's name unless the topic has a TLC header for it (`TLC_HEADERS`)."""
    text = load_schema(source.value_schema)
    header_of = {field: header for header, field in TLC_HEADERS.get(source.topic, {}).items()}
    columns: dict[str, tuple[str, str, bool]] = {}
    for avro_field, column in zip(json.loads(text)["fields"], avro_columns(text), strict=True):
        if column.type not in _KINDS:
            raise InputDataError(f"{source.value_schema}: field {column.name} ({column.type}) cannot be read from CSV")
        nullable = isinstance(avro_field["type"], list) and "null" in avro_field["type"]
        columns[header_of.get(column.name, column.name)] = (column.name, _KINDS[column.type], nullable)
    return columns


def shipped_zone_lookup() -> Path:
    """The NYC TLC taxi-zone lookup (265 zones, public reference data) shipped with the package: what
    `streaming-pipeline produce zones --csv` sends to the `taxi_zones` table topic when given no file."""
    return Path(str(resources.files("streaming_pipeline.lakehouse") / "data" / "taxi_zone_lookup.csv"))


def parse_timestamp(text: str) -> datetime:
    """TLC times are naive wall-clock strings; the lakehouse reads them as UTC (docs/design.md)."""
    parsed = datetime.fromisoformat(text.strip())
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _parse_int(text: str) -> int:
    value = float(text)  # TLC exports sometimes write integers as '1.0'
    if not value.is_integer():
        raise ValueError(f"{text!r} is not a whole number")
    return int(value)


_PARSERS: dict[str, Callable[[str], Any]] = {
    _INT: _parse_int,
    _FLOAT: float,
    _STR: str,
    _TS: parse_timestamp,
}


@dataclass(frozen=True)
class CsvRow:
    """One data row of a CSV file: its 1-based line number and either a record or the reason it is malformed."""

    line_number: int
    record: Record | None
    error: str | None = None


def read_csv(path: Path, source: SourceTopic) -> Iterator[CsvRow]:
    """Yield every data row of `path` as a record of `source`; a missing file or header column raises, a bad row is
    yielded as an error. Header names match in any letter case (TLC has shipped `LocationID` and `locationid`)."""
    columns = csv_columns(source)
    if not path.is_file():
        raise InputDataError(f"CSV file not found: {path}")
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = [name.strip() for name in next(reader)]
        except StopIteration:
            raise InputDataError(f"{path}: the file is empty, expected a header line") from None
        lowered = [name.lower() for name in header]
        missing = [name for name in columns if name.lower() not in lowered]
        if missing:
            raise InputDataError(
                f"{path}: line 1: header lacks column(s) {', '.join(missing)}; expected the NYC TLC header "
                f"({', '.join(columns)})"
            )
        positions = {name: lowered.index(name.lower()) for name in columns}
        for row in reader:
            line_number = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                yield CsvRow(
                    line_number, None, f"{path}: line {line_number}: expected {len(header)} cells, got {len(row)}"
                )
                continue
            record: Record = {}
            problem = None
            for name, (field, kind, nullable) in columns.items():
                cell = row[positions[name]].strip()
                if cell == "":
                    if not nullable:
                        problem = f"{path}: line {line_number}: column {name} is empty but required"
                        break
                    record[field] = None
                    continue
                try:
                    record[field] = _PARSERS[kind](cell)
                except ValueError as exc:
                    problem = f"{path}: line {line_number}: column {name}: cannot read {cell!r} as {kind} ({exc})"
                    break
            yield CsvRow(line_number, None if problem else record, problem)


def read_rides_csv(path: Path) -> Iterator[CsvRow]:
    return read_csv(path, RIDES)
