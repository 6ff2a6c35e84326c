"""Ride and pickup records: the Avro field names, and parsing of TLC-style CSV files into them."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streaming_pipeline.errors import InputDataError

Record = dict[str, Any]

# CSV header (NYC TLC yellow taxi) -> (Avro field, parser, nullable)
_INT, _FLOAT, _STR, _TS = "int", "float", "str", "timestamp"

RIDE_CSV_COLUMNS: dict[str, tuple[str, str, bool]] = {
    "VendorID": ("vendor_id", _INT, True),
    "tpep_pickup_datetime": ("pickup_datetime", _TS, False),
    "tpep_dropoff_datetime": ("dropoff_datetime", _TS, False),
    "passenger_count": ("passenger_count", _INT, True),
    "trip_distance": ("trip_distance", _FLOAT, False),
    "RatecodeID": ("rate_code_id", _INT, True),
    "store_and_fwd_flag": ("store_and_fwd_flag", _STR, True),
    "PULocationID": ("pu_location_id", _INT, False),
    "DOLocationID": ("do_location_id", _INT, False),
    "payment_type": ("payment_type", _INT, True),
    "fare_amount": ("fare_amount", _FLOAT, False),
    "extra": ("extra", _FLOAT, False),
    "mta_tax": ("mta_tax", _FLOAT, False),
    "tip_amount": ("tip_amount", _FLOAT, False),
    "tolls_amount": ("tolls_amount", _FLOAT, False),
    "improvement_surcharge": ("improvement_surcharge", _FLOAT, False),
    "total_amount": ("total_amount", _FLOAT, False),
    "congestion_surcharge": ("congestion_surcharge", _FLOAT, True),
}

PICKUP_CSV_COLUMNS: dict[str, tuple[str, str, bool]] = {
    "PULocationID": ("pu_location_id", _INT, False),
    "tpep_pickup_datetime": ("pickup_datetime", _TS, False),
}


def parse_timestamp(text: str) -> datetime:
    """TLC times are naive wall-clock strings; the lakehouse reads them as UTC (DESIGN section 4)."""
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


def read_csv(path: Path, columns: dict[str, tuple[str, str, bool]]) -> Iterator[CsvRow]:
    """Yield every data row of `path`; a missing file or header column raises, a bad row is yielded as an error."""
    if not path.is_file():
        raise InputDataError(f"CSV file not found: {path}")
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = [name.strip() for name in next(reader)]
        except StopIteration:
            raise InputDataError(f"{path}: the file is empty, expected a header line") from None
        missing = [name for name in columns if name not in header]
        if missing:
            raise InputDataError(
                f"{path}: line 1: header lacks column(s) {', '.join(missing)}; expected the NYC TLC header "
                f"({', '.join(columns)})"
            )
        positions = {name: header.index(name) for name in columns}
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
    return read_csv(path, RIDE_CSV_COLUMNS)


def read_pickups_csv(path: Path) -> Iterator[CsvRow]:
    return read_csv(path, PICKUP_CSV_COLUMNS)
