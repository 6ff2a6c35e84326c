"""The TLC zone lookup as records of the `taxi_zones` table topic (`devstack.records.read_csv`, what `streaming-pipeline
produce zones --csv` sends): the shipped file, another file, either letter case of the TLC header, a malformed row.

Expected rows are computed here with the csv module or written by hand, never with the code under test.
"""

from __future__ import annotations

from pathlib import Path

from streaming_pipeline.devstack.records import read_csv, shipped_zone_lookup
from streaming_pipeline.lakehouse.tables import TAXI_ZONE_LOOKUP
from streaming_pipeline_tests.lakehouse.silver.zone_helpers import PACKAGED_LOOKUP, lookup_by_csv_module


def test_the_shipped_lookup_gives_the_265_tlc_zones_as_records_of_the_table_topic() -> None:
    assert shipped_zone_lookup() == PACKAGED_LOOKUP
    rows = list(read_csv(shipped_zone_lookup(), TAXI_ZONE_LOOKUP))
    assert all(row.error is None for row in rows)
    records = {r.record["location_id"]: r.record for r in rows if r.record is not None}
    expected = lookup_by_csv_module()
    assert len(rows) == 265 == len(expected) == len(records)
    assert {k: (r["borough"], r["zone"], r["service_zone"]) for k, r in records.items()} == expected
    assert records[1] == {"location_id": 1, "borough": "EWR", "zone": "Newark Airport", "service_zone": "EWR"}


def test_another_lookup_in_the_tlc_header_s_other_letter_case_and_a_malformed_row(tmp_path: Path) -> None:
    own = tmp_path / "zones.csv"
    own.write_text(
        'LocationID,Borough,Zone,service_zone\n7,Queens,Astoria,Boro Zone\n4,Manhattan,"Alphabet City",\n'
        "seven,Queens,Astoria,Boro Zone\n"
    )
    rows = list(read_csv(own, TAXI_ZONE_LOOKUP))
    assert [r.record for r in rows[:2]] == [
        {"location_id": 7, "borough": "Queens", "zone": "Astoria", "service_zone": "Boro Zone"},
        {"location_id": 4, "borough": "Manhattan", "zone": "Alphabet City", "service_zone": None},
    ]
    assert rows[2].record is None and rows[2].error is not None
    assert f"{own}: line 4: column LocationID: cannot read 'seven' as int" in rows[2].error
