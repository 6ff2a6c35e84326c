"""Unit tests of `silver.taxi_zones` (the shipped TLC lookup and how Spark reads it) and of the TAXI_ZONES_CSV
override (`settings.PipelineSettings`), exact rows.

Expected rows are computed here with the csv module or written by hand, never with the code under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import read_parameter
from streaming_pipeline.lakehouse.silver.taxi_zones import read_taxi_zones, shipped_taxi_zones_csv
from streaming_pipeline_tests.lakehouse.silver.zone_helpers import PACKAGED_LOOKUP, lookup_by_csv_module


@pytest.fixture()
def no_zones_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAXI_ZONES_CSV", raising=False)


@pytest.fixture()
def zones(spark):  # type: ignore[no-untyped-def]
    return read_taxi_zones(spark, shipped_taxi_zones_csv())


def test_read_taxi_zones_gives_the_265_tlc_zones_with_exact_columns(zones) -> None:
    assert zones.dtypes == [
        ("location_id", "int"),
        ("borough", "string"),
        ("zone", "string"),
        ("service_zone", "string"),
    ]
    rows = [tuple(row) for row in zones.collect()]
    expected = lookup_by_csv_module()
    assert len(rows) == 265 == len(expected)
    assert {row[0]: row[1:] for row in rows} == expected
    assert (1, "EWR", "Newark Airport", "EWR") in rows


def test_the_default_lookup_is_the_one_shipped_with_the_package(no_zones_override) -> None:
    assert read_parameter("file", "TAXI_ZONES_CSV") is None  # no override: the taxi_zones asset reads the shipped one
    assert Path(shipped_taxi_zones_csv()) == PACKAGED_LOOKUP
    shared = PACKAGED_LOOKUP.parents[4] / "shared" / "data" / "taxi_zone_lookup.csv"
    if shared.is_file():
        assert PACKAGED_LOOKUP.read_bytes() == shared.read_bytes()


def test_taxi_zones_csv_overrides_the_lookup(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "zones.csv"
    own.write_text('LocationID,Borough,Zone,service_zone\n7,Queens,Astoria,Boro Zone\n4,Manhattan,"Alphabet City",\n')
    monkeypatch.setenv("TAXI_ZONES_CSV", str(own))

    configured = read_parameter("file", "TAXI_ZONES_CSV")
    assert isinstance(configured, str)
    assert configured == str(own.resolve())
    assert sorted(tuple(r) for r in read_taxi_zones(spark, configured).collect()) == [
        (4, "Manhattan", "Alphabet City", None),
        (7, "Queens", "Astoria", "Boro Zone"),
    ]


def test_a_missing_taxi_zones_csv_names_the_variable_and_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    missing = tmp_path / "nowhere.csv"
    monkeypatch.setenv("TAXI_ZONES_CSV", str(missing))
    with pytest.raises(ConfigurationError) as caught:
        read_parameter("file", "TAXI_ZONES_CSV")
    assert "TAXI_ZONES_CSV" in str(caught.value) and str(missing) in str(caught.value)


def test_a_malformed_lookup_row_fails_instead_of_losing_a_zone(spark, tmp_path: Path) -> None:
    bad = tmp_path / "zones.csv"
    bad.write_text("LocationID,Borough,Zone,service_zone\n7,Queens,Astoria,Boro Zone\nseven,Queens,Astoria,Boro Zone\n")
    # The exception's class depends on the session (Py4JJavaError on a classic one); Spark's reason does not.
    with pytest.raises(Exception, match="MALFORMED_RECORD_IN_PARSING"):
        read_taxi_zones(spark, str(bad)).collect()
