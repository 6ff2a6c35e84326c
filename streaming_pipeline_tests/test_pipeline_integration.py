"""End to end on the real embedded stack: CSV -> Kafka -> every Delta table, against pandas."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from streaming_pipeline.definitions import pipeline_definitions
from streaming_pipeline.devstack.cli import main as cli_main
from streaming_pipeline.devstack.producer import produce, rows_from_records
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.engine.delta_log import latest_version
from streaming_pipeline.tables import RIDES_TOPIC
from streaming_pipeline_tests.conftest import TLC_RIDE_COLUMNS

pytestmark = pytest.mark.integration

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
LOOKUP = Path(__file__).resolve().parents[1] / "streaming_pipeline" / "data" / "taxi_zone_lookup.csv"
GAP = pd.Timedelta(minutes=10)
WINDOW = "10min"
WATERMARK_DELAY = pd.Timedelta(minutes=15)


def _expected_rides(rides_csv: Path) -> pd.DataFrame:
    frame = pd.read_csv(rides_csv).rename(columns=TLC_RIDE_COLUMNS)
    for column in ("pickup_datetime", "dropoff_datetime"):
        frame[column] = pd.to_datetime(frame[column])
    return frame


def _write_pickups_csv(rides: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Pickups at the dropoff zones of some rides: on the inclusive bound, just outside it, and between."""
    offsets = [
        timedelta(minutes=-10),
        timedelta(minutes=10),
        timedelta(minutes=10, seconds=1),
        timedelta(minutes=-10, seconds=-1),
        timedelta(minutes=3),
        timedelta(0),
    ]
    rows = []
    for index, ride in rides.iloc[::5].reset_index(drop=True).iterrows():
        rows.append(
            {
                "PULocationID": int(ride["do_location_id"]),
                "tpep_pickup_datetime": ride["dropoff_datetime"] + offsets[index % len(offsets)],
            }
        )
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["PULocationID", "tpep_pickup_datetime"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "tpep_pickup_datetime": row["tpep_pickup_datetime"].strftime("%Y-%m-%d %H:%M:%S")})
    return pd.DataFrame(
        {
            "pu_location_id": [r["PULocationID"] for r in rows],
            "pickup_datetime": [r["tpep_pickup_datetime"] for r in rows],
        }
    )


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


def _produce(stack, kind: str, csv_path: Path) -> None:
    code = cli_main(
        [
            "produce",
            kind,
            "--csv",
            str(csv_path),
            "--no-progress",
            "--bootstrap-servers",
            stack.bootstrap_servers,
            "--schema-registry-url",
            stack.schema_registry_url,
        ]
    )
    assert code == 0


def _table(spark, resources, name: str) -> pd.DataFrame:
    return spark.read.format("delta").load(resources["lakehouse"].table_path(name)).toPandas()


def _versions(spark, resources) -> dict[str, int | None]:
    return {name: latest_version(resources["lakehouse"].table_path(name)) for name in TABLES}


def _check_tables(spark, resources, rides: pd.DataFrame, pickups: pd.DataFrame) -> None:
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
    assert len(_table(spark, resources, "dead_letter_records")) == 0

    # Branching: >= 40 high, < 40 low (the CSV and the Avro schema have no null amounts).
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

    # Enrichment: a pandas merge with the lookup read as plain CSV; every ride once.
    lookup = pd.read_csv(LOOKUP, keep_default_na=False).rename(
        columns={"locationid": "location_id"}
    )  # zone 265 is "NA"
    expected_enriched = rides.merge(
        lookup[["location_id", "borough", "zone"]].rename(
            columns={"location_id": "pu_location_id", "borough": "pu_borough", "zone": "pu_zone"}
        ),
        on="pu_location_id",
        how="left",
    ).merge(
        lookup[["location_id", "borough", "zone"]].rename(
            columns={"location_id": "do_location_id", "borough": "do_borough", "zone": "do_zone"}
        ),
        on="do_location_id",
        how="left",
    )
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
    assert len(_table(spark, resources, "taxi_zones")) == 265


def test_csv_rides_and_pickups_reach_every_table_exactly_and_reruns_change_nothing(
    stack, pipeline_resources, spark, rides_csv: Path, tmp_path: Path
) -> None:
    rides = _expected_rides(rides_csv)
    pickups = _write_pickups_csv(rides, tmp_path / "pickups.csv")
    _produce(stack, "rides", rides_csv)
    _produce(stack, "pickups", tmp_path / "pickups.csv")

    assert dg.materialize(pipeline_definitions().assets, resources=pipeline_resources).success
    _check_tables(spark, pipeline_resources, rides, pickups)
    joins = _table(spark, pipeline_resources, "ride_pickup_joins")
    assert len(joins) > 0  # the sample really exercises the join
    # The engine writes no Hadoop checksum twins (spark_conf/local.conf): each commit is its JSON and Delta's .crc.
    for name in TABLES:
        log = Path(pipeline_resources["lakehouse"].table_path(name)) / "_delta_log"
        assert not log.is_dir() or [f.name for f in log.iterdir() if f.name.startswith(".")] == [], name

    before = _versions(spark, pipeline_resources)
    assert dg.materialize(pipeline_definitions().assets, resources=pipeline_resources).success
    assert _versions(spark, pipeline_resources) == before

    # More data later: rides after the sample's last pickup, and pickups near their dropoffs.
    options = SyntheticOptions(seed=7, start=datetime(2020, 7, 1, 2, 0, tzinfo=UTC), mean_gap_seconds=30)
    more = list(synthetic_rides(40, options))
    result = produce(
        pipeline_resources["kafka"],
        pipeline_resources["schema_registry"].get_client(),
        RIDES_TOPIC,
        rows_from_records(more),
        show_progress=False,
    )
    assert (result.sent, result.failed) == (40, 0)
    more_pickups = [
        {"pu_location_id": r["do_location_id"], "pickup_datetime": r["dropoff_datetime"] + timedelta(minutes=2)}
        for r in more[::4]
    ]
    result = produce(
        pipeline_resources["kafka"],
        pipeline_resources["schema_registry"].get_client(),
        "pickup_locations",
        rows_from_records(more_pickups),
        show_progress=False,
    )
    assert (result.sent, result.failed) == (len(more_pickups), 0)

    assert dg.materialize(pipeline_definitions().assets, resources=pipeline_resources).success
    more_frame = pd.DataFrame(more)
    for column in ("pickup_datetime", "dropoff_datetime"):
        more_frame[column] = pd.to_datetime(more_frame[column]).dt.tz_localize(None)
    all_rides = pd.concat([rides, more_frame], ignore_index=True)
    more_pickups_frame = pd.DataFrame(more_pickups)
    more_pickups_frame["pickup_datetime"] = pd.to_datetime(more_pickups_frame["pickup_datetime"]).dt.tz_localize(None)
    all_pickups = pd.concat([pickups, more_pickups_frame], ignore_index=True)
    _check_tables(spark, pipeline_resources, all_rides, all_pickups)
