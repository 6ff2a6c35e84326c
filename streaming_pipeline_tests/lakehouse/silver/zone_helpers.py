"""The TLC zone lookup shipped with the package, read with the csv module: the expected side of the zone tests."""

from __future__ import annotations

import csv
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
PACKAGED_LOOKUP = REPO_ROOT / "streaming_pipeline" / "lakehouse" / "data" / "taxi_zone_lookup.csv"


def lookup_by_csv_module() -> dict[int, tuple[str, str, str]]:
    """{location id: (borough, zone, service_zone)}, by position: the TLC header's letter case varies."""
    with PACKAGED_LOOKUP.open(newline="") as handle:
        reader = csv.reader(handle)
        next(reader)
        return {int(row[0]): (row[1], row[2], row[3]) for row in reader}
