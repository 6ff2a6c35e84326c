"""End to end on the real embedded stack: the session's materialized lakehouse (materialized_lakehouse.py: the TLC
sample and pickups near its dropoffs, undecodable records, then more rides with late ones in a second run) against
what pandas computes from the produced records."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from streaming_pipeline.lakehouse.tables import RIDES_TOPIC
from streaming_pipeline_tests.conftest import TLC_RIDE_COLUMNS
from streaming_pipeline_tests.materialized_lakehouse import MaterializedLakehouse

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLES = [
    "raw_rides",
    "raw_pickup_locations",
    "dead_letter_records",
    "vendor_counts",
    "ride_window_aggregates",
    "ride_pickup_joins",
    "high_amount_rides",
    "low_amount_rides",
    "taxi_zones",
    "rides_enriched",
]
LOOKUP = Path(__file__).resolve().parents[1] / "streaming_pipeline" / "lakehouse" / "data" / "taxi_zone_lookup.csv"
GAP = pd.Timedelta(minutes=10)
WINDOW = "10min"
WATERMARK_DELAY = pd.Timedelta(minutes=15)


def _expected_joins(rides: pd.DataFrame, pickups: pd.DataFrame) -> list[tuple]:
    pairs = rides[["vendor_id", "do_location_id", "dropoff_datetime"]].merge(
        pickups, left_on="do_location_id", right_on="pu_location_id"
    )
    pairs = pairs[(pairs["pickup_datetime"] - pairs["dropoff_datetime"]).abs() <= GAP]
    return sorted(
        (int(r.vendor_id), int(r.do_location_id), r.pickup_datetime, r.dropoff_datetime) for r in pairs.itertuples()
    )


def _expected_windows(rides: pd.DataFrame) -> dict[tuple, tuple[int, float]]:
    frame = rides.assign(window_start=rides["pickup_datetime"].dt.floor(WINDOW))
    grouped = frame.groupby(["window_start", "vendor_id"]).agg(n=("total_amount", "size"), s=("total_amount", "sum"))
    return {(ws.to_pydatetime(), int(v)): (int(r.n), round(float(r.s), 2)) for (ws, v), r in grouped.iterrows()}


def _table(spark, lakehouse: MaterializedLakehouse, name: str) -> pd.DataFrame:
    return spark.read.format("delta").load(lakehouse.table_path(name)).toPandas()


def _check_tables(spark, resources: MaterializedLakehouse, rides: pd.DataFrame, pickups: pd.DataFrame) -> None:
    raw = _table(spark, resources, "raw_rides")
    assert len(raw) == len(rides)
    key = ["pickup_datetime", "dropoff_datetime", "pu_location_id", "do_location_id", "total_amount"]
    got = raw[list(TLC_RIDE_COLUMNS.values())].sort_values(key).reset_index(drop=True)
    want = rides[list(TLC_RIDE_COLUMNS.values())].sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert raw[["kafka_topic", "kafka_partition", "kafka_offset"]].drop_duplicates().shape[0] == len(rides)
    assert set(raw["kafka_topic"]) == {RIDES_TOPIC}

    counts = _table(spark, resources, "vendor_counts")
    assert (
        dict(zip(counts["vendor_id"], counts["trip_count"], strict=True)) == rides["vendor_id"].value_counts().to_dict()
    )

    windows = _table(spark, resources, "ride_window_aggregates")
    got_windows = {
        (r.window_start.to_pydatetime(), int(r.vendor_id)): (
            int(r.trip_count + r.late_trip_count),
            round(float(r.total_amount_sum), 2),
        )
        for r in windows.itertuples()
    }
    expected = _expected_windows(rides)
    assert {k: v[0] for k, v in got_windows.items()} == {k: v[0] for k, v in expected.items()}
    on_time = windows[windows["late_trip_count"] == 0]
    for r in on_time.itertuples():
        assert round(float(r.total_amount_sum), 2) == expected[(r.window_start.to_pydatetime(), int(r.vendor_id))][1]
    assert (windows["window_end"] - windows["window_start"] == pd.Timedelta(minutes=10)).all()
    watermark = rides["pickup_datetime"].max() - WATERMARK_DELAY
    assert windows["is_final"].tolist() == (windows["window_end"] <= watermark).tolist()

    joins = _table(spark, resources, "ride_pickup_joins")
    got_joins = sorted(
        (int(r.vendor_id), int(r.location_id), r.pickup_datetime, r.dropoff_datetime) for r in joins.itertuples()
    )
    assert got_joins == _expected_joins(rides, pickups)
    dead = _table(spark, resources, "dead_letter_records")
    assert sorted(zip(dead["kafka_topic"], dead["kafka_partition"], dead["kafka_offset"], strict=True)) == sorted(
        (bad.topic, bad.partition, bad.offset) for bad in resources.bad
    )

    # Branching: >= 40 high, < 40 low (the CSV and the synthetic rides have no null amounts).
    amounts = ["pickup_datetime", "dropoff_datetime", "pu_location_id", "total_amount"]
    for table, chosen in (
        ("high_amount_rides", rides["total_amount"] >= 40),
        ("low_amount_rides", rides["total_amount"] < 40),
    ):
        got_branch = _table(spark, resources, table)
        assert list(got_branch.columns) == list(raw.columns), table
        assert sorted(map(tuple, got_branch[amounts].values.tolist())) == sorted(
            map(tuple, rides[chosen][amounts].values.tolist())
        ), table

    # Enrichment: a pandas merge with the lookup read as plain CSV, every ride once: the first run's rides with the
    # zones as shipped, the second's with the zone renamed on the topic between the runs.
    lookup = pd.read_csv(LOOKUP, keep_default_na=False).rename(
        columns={"locationid": "location_id"}
    )  # zone 265 is "NA"
    renamed = resources.renamed_zone
    renamed_lookup = lookup.assign(
        zone=lookup["zone"].where(lookup["location_id"] != renamed.location_id, renamed.new_name)
    )

    def enriched(part: pd.DataFrame, zones: pd.DataFrame) -> pd.DataFrame:
        side = zones[["location_id", "borough", "zone"]]
        return part.merge(
            side.rename(columns={"location_id": "pu_location_id", "borough": "pu_borough", "zone": "pu_zone"}),
            on="pu_location_id",
            how="left",
        ).merge(
            side.rename(columns={"location_id": "do_location_id", "borough": "do_borough", "zone": "do_zone"}),
            on="do_location_id",
            how="left",
        )

    first, later = rides.iloc[: resources.first_run_rides], rides.iloc[resources.first_run_rides :]
    assert (first["pu_location_id"] == renamed.location_id).any() and (
        later["pu_location_id"] == renamed.location_id
    ).any()
    expected_enriched = pd.concat([enriched(first, lookup), enriched(later, renamed_lookup)], ignore_index=True)
    zone_columns = [
        "pickup_datetime",
        "pu_location_id",
        "do_location_id",
        "total_amount",
        "pu_borough",
        "pu_zone",
        "do_borough",
        "do_zone",
    ]
    got_enriched = _table(spark, resources, "rides_enriched")
    assert len(got_enriched) == len(rides)
    assert sorted(
        map(
            tuple,
            got_enriched[zone_columns].astype(object).where(got_enriched[zone_columns].notna(), None).values.tolist(),
        )
    ) == sorted(
        map(
            tuple,
            expected_enriched[zone_columns]
            .astype(object)
            .where(expected_enriched[zone_columns].notna(), None)
            .values.tolist(),
        )
    )
    # The zones: 265, one renamed; its history has both names, the old one closed when the new one came.
    zones = _table(spark, resources, "taxi_zones")
    assert len(zones) == 265
    assert dict(zip(zones["location_id"], zones["zone"], strict=True)) == dict(
        zip(renamed_lookup["location_id"], renamed_lookup["zone"], strict=True)
    )
    history = _table(spark, resources, "taxi_zones_history")
    assert len(history) == 266
    versions = history[history["location_id"] == renamed.location_id].sort_values("valid_from")
    assert versions["zone"].tolist() == [renamed.old_name, renamed.new_name]
    assert versions["is_current"].tolist() == [False, True]
    assert versions["valid_to"].iloc[0] == versions["valid_from"].iloc[1] and pd.isna(versions["valid_to"].iloc[1])


def test_every_table_holds_exactly_what_was_produced_after_two_runs(materialized_lakehouse, spark) -> None:
    lakehouse = materialized_lakehouse
    _check_tables(spark, lakehouse, lakehouse.rides, lakehouse.pickups)
    assert len(_table(spark, lakehouse, "ride_pickup_joins")) > 0  # the sample really exercises the join
    windows = _table(spark, lakehouse, "ride_window_aggregates")
    assert windows["late_trip_count"].sum() > 0  # and the late rides the windows
    # Every asset check of both runs passed, but rides_enriched's expectations (warnings): they counted the rides that
    # break each rule, computed here from the rides produced (a NaN or NaT breaks a rule, as a NULL does).
    evaluations = [e for run in lakehouse.runs for e in run.get_asset_check_evaluations()]
    rides, zones = lakehouse.rides, set(_table(spark, lakehouse, "taxi_zones")["location_id"])
    broken = {
        "dropoff_after_pickup": int((~(rides["dropoff_datetime"] > rides["pickup_datetime"])).sum()),
        "amount_not_negative": int((~(rides["total_amount"] >= 0)).sum()),
        "known_pickup_zone": int((~rides["pu_location_id"].isin(zones)).sum()),
        "known_dropoff_zone": int((~rides["do_location_id"].isin(zones)).sum()),
    }
    failed = [(e.asset_key.to_user_string(), e.check_name) for e in evaluations if not e.passed]
    assert evaluations and [check for check in failed if check[1] not in broken] == []
    counted = {
        rule: sum(e.metadata["violations"].value for e in evaluations if e.check_name == rule) for rule in broken
    }
    assert counted == broken and broken["amount_not_negative"] == 1  # the sample's one ride with a negative amount


def test_a_run_with_no_new_record_changes_no_table(materialized_lakehouse) -> None:
    before, after = materialized_lakehouse.versions
    assert set(before) >= set(TABLES) and all(version is not None for version in before.values())
    assert after == before
