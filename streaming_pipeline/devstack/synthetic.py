"""Deterministic synthetic NYC-taxi-like rides and pickup events.

Distributions are rough fits of TLC yellow-taxi data: two vendors (~1:2), trips of a few miles
(log-normal), city speeds of ~11 mph, Manhattan zones far more frequent than the outer boroughs,
fares by the 2020 meter (2.50 + 2.50/mile + 0.50/min), tips mostly on card payments.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from streaming_pipeline.devstack.records import Record
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.sources import SourceTopic

DEFAULT_START = datetime(2020, 7, 1, tzinfo=UTC)

# Busy Manhattan zones (Midtown, Upper East/West Side, airports, ...) and their relative weight.
_BUSY_ZONES = [236, 237, 161, 162, 230, 170, 142, 239, 186, 48, 163, 234, 68, 107, 79, 141, 140, 238, 132, 138]


@dataclass(frozen=True)
class SyntheticOptions:
    seed: int = 42
    start: datetime = DEFAULT_START
    mean_gap_seconds: float = 2.0
    out_of_order_fraction: float = 0.0
    out_of_order_max_seconds: float = 300.0
    late_fraction: float = 0.0
    late_by_seconds: float = 3600.0


def _zone(rng: random.Random) -> int:
    return rng.choice(_BUSY_ZONES) if rng.random() < 0.6 else rng.randint(1, 265)


def _ride(rng: random.Random, pickup: datetime) -> Record:
    vendor_id = 1 if rng.random() < 0.34 else 2
    distance = round(min(rng.lognormvariate(math.log(1.8), 0.8), 60.0), 2)
    minutes = max(1.0, distance / 11.0 * 60.0 * rng.uniform(0.7, 1.4))
    dropoff = pickup + timedelta(seconds=round(minutes * 60))
    payment_type = 1 if rng.random() < 0.7 else 2
    rate_code_id = 2 if rng.random() < 0.02 else 1
    fare = round(52.0 if rate_code_id == 2 else 2.5 + 2.5 * distance + 0.5 * minutes, 2)
    extra = rng.choice([0.0, 0.5, 1.0])
    mta_tax = 0.5
    tolls = 6.12 if rng.random() < 0.05 else 0.0
    improvement = 0.3
    congestion = 2.5 if rng.random() < 0.9 else 0.0
    tip = round(fare * rng.uniform(0.1, 0.3), 2) if payment_type == 1 else 0.0
    total = round(fare + extra + mta_tax + tip + tolls + improvement + congestion, 2)
    return {
        "vendor_id": vendor_id,
        "pickup_datetime": pickup,
        "dropoff_datetime": dropoff,
        "passenger_count": rng.choices([1, 2, 3, 4, 5, 6], weights=[70, 14, 4, 2, 6, 4])[0],
        "trip_distance": distance,
        "rate_code_id": rate_code_id,
        "store_and_fwd_flag": "Y" if rng.random() < 0.01 else "N",
        "pu_location_id": _zone(rng),
        "do_location_id": _zone(rng),
        "payment_type": payment_type,
        "fare_amount": fare,
        "extra": extra,
        "mta_tax": mta_tax,
        "tip_amount": tip,
        "tolls_amount": tolls,
        "improvement_surcharge": improvement,
        "total_amount": total,
        "congestion_surcharge": congestion,
    }


def synthetic_rides(count: int, options: SyntheticOptions = SyntheticOptions()) -> Iterator[Record]:
    """`count` rides whose pickup times move forward; a fraction can be out of order or late."""
    rng = random.Random(options.seed)
    clock = options.start
    for _ in range(count):
        clock += timedelta(seconds=rng.expovariate(1.0 / options.mean_gap_seconds))
        pickup = clock
        roll = rng.random()
        if roll < options.late_fraction:
            pickup = clock - timedelta(seconds=options.late_by_seconds)
        elif roll < options.late_fraction + options.out_of_order_fraction:
            pickup = clock - timedelta(seconds=rng.uniform(0, options.out_of_order_max_seconds))
        yield _ride(rng, pickup.replace(microsecond=0))


def synthetic_pickups(count: int, options: SyntheticOptions = SyntheticOptions()) -> Iterator[Record]:
    """`count` pickup events at the dropoff zones of recent synthetic rides, a few minutes after the dropoff.

    Uses the ride stream of the same seed, so pickups produced with seed S join rides produced with seed S.
    """
    rng = random.Random(options.seed + 1)
    for ride in synthetic_rides(count, options):
        delay = timedelta(seconds=round(rng.uniform(-120, 900)))
        yield {"pu_location_id": ride["do_location_id"], "pickup_datetime": ride["dropoff_datetime"] + delay}


#: The synthetic generators, by topic: `produce --synthetic` for any other topic says so.
_GENERATORS = {"rides": synthetic_rides, "pickup_locations": synthetic_pickups}


def synthetic_records(
    source: SourceTopic, count: int, options: SyntheticOptions = SyntheticOptions()
) -> Iterator[Record]:
    generate = _GENERATORS.get(source.topic)
    if generate is None:
        raise ConfigurationError(
            f"no synthetic generator for topic {source.topic!r} (there is one for {', '.join(_GENERATORS)}); "
            "produce it from a CSV file with --csv"
        )
    return generate(count, options)
