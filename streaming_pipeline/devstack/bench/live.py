"""`streaming-pipeline bench live`: how fresh the tables are under a steady load, as users see it through
`dagster dev`, in each LIVE_MODE and against the latency floor (`latency_floor`), with probe rides timed from their
produce call until raw_rides and vendor_counts show them."""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from streaming_pipeline.devstack.bench.common import (
    PHASE_LABELS,
    bench_stack,
    bench_stage,
    bronze_handler_steps,
    cpu_seconds,
    machine_description,
    print_rows,
    process_memory_bytes,
    process_tree,
    say,
    write_json,
)
from streaming_pipeline.devstack.engine_events import PHASES, QueryBreakdown, progress_reports, query_breakdowns
from streaming_pipeline.devstack.errors import BenchError
from streaming_pipeline.devstack.producer import produce, produce_zone_lookup, rows_from_records
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import (
    KAFKA_SASL_PASSWORD,
    KAFKA_SASL_USERNAME,
    SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO,
    LiveSettings,
    PipelineSettings,
    SensorSettings,
)
from streaming_pipeline.lakehouse.tables import PICKUPS_TOPIC, RAW_RIDES, RIDES_TOPIC

#: Probe rides carry a vendor id of their own (the synthetic rides have vendors 1 and 2): PROBE_VENDOR + k for the
#: k-th probe, so that its arrival in raw_rides and in vendor_counts can be told from the load's rides.
PROBE_VENDOR = 1000
#: The gold table the latency is read from (`defs/gold/vendor_counts`): it counts the probe vendor's rides.
VENDOR_COUNTS = "vendor_counts"
LIVE_MODES = ("triggered", "continuous")
#: `--floor`: the latency floor's figures are reported as a mode of this name.
FLOOR_MODE = "floor"


@dataclass
class LiveModeFigures:
    """One mode under steady load, with probe rides produced at their own moments (no waiting for the pipeline)."""

    mode: str
    rate: int
    load_seconds: float  # of load with probes, after the warm-up
    pickup_every: int = 0  # one pickup event per this many rides of the load (0: none)
    warmup_seconds: float = 0.0  # of the same load before the first probe
    rides_produced: int = 0
    pickups_produced: int = 0
    probes: int = 0
    first_ride_to_raw_rides_seconds: float = 0.0
    first_ride_to_vendor_counts_seconds: float = 0.0
    raw_rides_p50_seconds: float = 0.0
    raw_rides_p95_seconds: float = 0.0
    vendor_counts_p50_seconds: float = 0.0
    vendor_counts_p95_seconds: float = 0.0
    catch_up_seconds: float = 0.0  # the load's end -> raw_rides and vendor_counts hold every produced ride
    exactly_once: bool = False  # raw_rides holds each produced record once, vendor_counts counts each once
    engine_peak_rss_mib: float = 0.0  # sampled every second during the load and the catch-up
    engine_cpu_percent_under_load: float = 0.0  # of one core: the Connect server and its Python workers
    dagster_cpu_percent_under_load: float = 0.0  # dagster dev: webserver, daemon, code server and the runs
    quiet_after_seconds: float = 0.0  # the catch-up -> the idle window measured (no commit for `quiet_seconds`)
    idle_cpu_percent: float = 0.0  # the Connect server and the runs in flight, once the pipeline is quiet, of one core
    idle_windows_discarded: list[str] = field(default_factory=list)  # the work inside each (tables that committed)
    runs: int = 0  # runs the pipeline's sensors launched in this mode (not Declarative Automation's, not schedules)
    # Where the work goes, from the load's start until the pipeline is quiet (every table has taken the load). The
    # CPU of the Connect server and its Python workers, less what the idle engine takes over as long (measured after):
    engine_cpu_seconds_per_1000_rides: float = 0.0
    engine_idle_cpu_percent: float = 0.0  # of one core: the engine alone, over the idle window
    queries: dict[str, QueryBreakdown] = field(default_factory=dict)  # per streaming query, from the event log
    handler_ms: dict[str, float] = field(default_factory=dict)  # raw_rides' handler: median ms per step
    handler_batches: int = 0  # raw_rides' micro-batches those medians are over
    probe_sent_seconds: list[float] = field(default_factory=list)  # each probe's produce call, from the load's start
    raw_rides_seconds: list[float] = field(default_factory=list)
    vendor_counts_seconds: list[float] = field(default_factory=list)


@dataclass
class LiveResult:
    machine: str
    engine: str
    modes: list[LiveModeFigures] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)  # --env: what dagster dev ran with beyond the defaults
    engine_settings: dict[str, str] = field(default_factory=dict)  # --engine-conf: Spark settings beyond the profile


#: What `--env` cannot set: the stack's addresses and what the bench sets itself, and credentials (the embedded
#: stack has none, and what the bench is given it prints and writes to its JSON).
_BENCH_OWN_SETTINGS = frozenset(
    {
        "DAGSTER_HOME",
        "KAFKA_BOOTSTRAP_SERVERS",
        "LAKEHOUSE_DIR",
        "LIVE_MODE",
        "SCHEMA_REGISTRY_URL",
        "SPARK_REMOTE",
        KAFKA_SASL_USERNAME,
        KAFKA_SASL_PASSWORD,
        SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO,
    }
)


def live_settings(assignments: list[str]) -> dict[str, str]:
    """`--env KEY=VALUE` items as the settings `dagster dev` gets on top of the stack's, checked as the definitions
    will read them, so that a wrong one fails before any stack starts. The bench otherwise leaves the caller's
    pipeline settings (SPARK_*, CONTINUOUS_*, ...) out of `dagster dev`, so that a shell's exports never change a
    measurement unseen."""
    settings: dict[str, str] = {}
    for item in assignments:
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key:
            raise BenchError(f"--env {item!r} is not KEY=VALUE")
        if key in _BENCH_OWN_SETTINGS:
            raise BenchError(
                f"--env {key} cannot be set: the bench sets the stack's addresses, the lakehouse, DAGSTER_HOME and "
                "LIVE_MODE itself (--mode), and the embedded stack takes no credentials"
            )
        settings[key] = value
    try:
        LiveSettings.from_env(settings)
        SensorSettings.from_env(settings)
        PipelineSettings.from_env(settings)
    except ConfigurationError as error:
        raise BenchError(f"--env: {error}") from None
    return settings


def engine_conf_settings(assignments: list[str]) -> dict[str, str]:
    """`--engine-conf KEY=VALUE` items as Spark settings, checked before any stack starts."""
    settings: dict[str, str] = {}
    for item in assignments:
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key.startswith("spark."):
            raise BenchError(f"--engine-conf {item!r} is not spark.KEY=VALUE")
        settings[key] = value
    return settings


#: When the bench's `dagster dev` runs the checks' schedule, unless `--env CONTINUOUS_CHECKS_CRON=...` says otherwise:
#: at midnight on January 1, so never in a measurement. At its default, hourly, its run scans every table on the
#: engine: in a run whose load spanned the full hour, raw_rides' micro-batches took about twice as long meanwhile.
BENCH_CHECKS_CRON = "0 0 1 1 *"


def dagster_dev_env(
    settings: Mapping[str, str], stack_env: Mapping[str, str], lakehouse: Path, mode: str
) -> dict[str, str]:
    """What the bench's `dagster dev` runs with (on top of what `DagsterDev` keeps of the caller's environment): the
    checks' schedule out of the measurement, the `--env` settings, then the stack's addresses, the bench's lakehouse
    and the mode measured."""
    return {
        "CONTINUOUS_CHECKS_CRON": BENCH_CHECKS_CRON,
        **settings,
        **stack_env,
        "LAKEHOUSE_DIR": str(lakehouse),
        "LIVE_MODE": mode,
    }


#: The figures of a mode that `--repeat` sums up over its runs, with the label it prints for each.
SPREAD_FIGURES = {
    "raw_rides_p50_seconds": "produce -> raw_rides p50 (s)",
    "raw_rides_p95_seconds": "produce -> raw_rides p95 (s)",
    "vendor_counts_p50_seconds": "produce -> vendor_counts p50 (s)",
    "vendor_counts_p95_seconds": "produce -> vendor_counts p95 (s)",
    "catch_up_seconds": "catch-up after the load (s)",
    "engine_peak_rss_mib": "engine peak RSS (MiB)",
    "idle_cpu_percent": "CPU idle, engine + runs (% of a core)",
    "engine_cpu_seconds_per_1000_rides": "engine CPU s per 1,000 rides",
}


@dataclass
class Spread:
    """One figure over repeated runs: their median, lowest and highest."""

    median: float
    low: float
    high: float
    values: list[float]


@dataclass
class LiveRepeats:
    """`bench live --repeat N`: every run, and per mode the spread of each figure of SPREAD_FIGURES over them."""

    runs: list[LiveResult]
    spreads: dict[str, dict[str, Spread]]  # per mode, per figure
    exactly_once: dict[str, bool]  # per mode: in every run


def live_repeats(results: list[LiveResult]) -> LiveRepeats:
    """The runs, and per mode the median, lowest and highest of each figure of SPREAD_FIGURES over them."""
    spreads: dict[str, dict[str, Spread]] = {}
    exactly_once: dict[str, bool] = {}
    for mode in dict.fromkeys(m.mode for result in results for m in result.modes):
        measured = [m for result in results for m in result.modes if m.mode == mode]
        spreads[mode] = {}
        for name in SPREAD_FIGURES:
            values = [float(getattr(m, name)) for m in measured]
            spreads[mode][name] = Spread(statistics.median(values), min(values), max(values), values)
        exactly_once[mode] = all(m.exactly_once for m in measured)
    return LiveRepeats(results, spreads, exactly_once)


def _print_spreads(repeats: LiveRepeats) -> None:
    rows: list[tuple[str, str]] = []
    for mode, figures in repeats.spreads.items():
        for name, spread in figures.items():
            values = ", ".join(f"{value:,.1f}" for value in spread.values)
            rows.append(
                (
                    f"{mode}: {SPREAD_FIGURES[name]}",
                    f"median {spread.median:,.1f}, {spread.low:,.1f} to {spread.high:,.1f} ({values})",
                )
            )
        rows.append((f"{mode}: every ride once, in every run", str(repeats.exactly_once[mode])))
    print_rows(rows, [f"over {len(repeats.runs)} runs, each on a fresh stack with the same load and probe moments"])


class _ProbeWatcher:
    """When each probe ride first shows in raw_rides and in vendor_counts, read from the tables' Delta logs and files
    (Spark-free, in this process): only the files that raw_rides' new commits added are read, and vendor_counts is
    a few rows."""

    def __init__(self, lakehouse: Path) -> None:
        self.raw_path = lakehouse / RAW_RIDES.name
        self.counts_path = lakehouse / VENDOR_COUNTS
        self.raw_seen: dict[int, float] = {}
        self.counted: dict[int, float] = {}
        self._raw_version = -1

    def poll(self) -> None:
        now = time.monotonic()
        for probe in self._new_raw_probes():
            self.raw_seen.setdefault(probe, now)
        for probe in self._counted_probes():
            self.counted.setdefault(probe, now)

    def _new_raw_probes(self) -> set[int]:
        import pyarrow.parquet as pq

        found: set[int] = set()
        while True:
            commit = self.raw_path / "_delta_log" / f"{self._raw_version + 1:020d}.json"
            try:
                lines = commit.read_text().splitlines()
            except FileNotFoundError:
                return found
            for line in lines:
                action = json.loads(line)
                if "add" in action:
                    table = pq.read_table(
                        self.raw_path / action["add"]["path"],
                        columns=["vendor_id"],
                        filters=[("vendor_id", ">=", PROBE_VENDOR)],
                    )
                    found.update(int(v) - PROBE_VENDOR for v in table.column("vendor_id").to_pylist())
            self._raw_version += 1

    def _counted_probes(self) -> set[int]:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            table = DeltaTable(str(self.counts_path)).to_pyarrow_table(columns=["vendor_id"])
        except (TableNotFoundError, OSError):
            return set()
        return {int(v) - PROBE_VENDOR for v in table.column("vendor_id").to_pylist() if v and v >= PROBE_VENDOR}


class _LoadThread:
    """One producer of the load (the rides', the pickups') on a daemon thread. `result()` waits for it and raises
    what it raised, so that a load that could not be produced stops the bench with its own error instead of a
    catch-up that waits for rides never sent."""

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        import threading

        self.error: Exception | None = None
        self._target = target
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            self._target()
        except Exception as error:  # handed to the main thread by result()
            self.error = error

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def result(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise BenchError(f"the load stopped: {self.error}") from self.error


class _Sampler:
    """The peak RSS of one process, sampled every second on a thread."""

    def __init__(self, rss_pid: int | None) -> None:
        import threading

        self._rss_pid = rss_pid
        self.peak_rss_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.peak_rss_mib = max(self.peak_rss_mib, process_memory_bytes(self._rss_pid, "VmRSS") / 2**20)


class _CpuMeter:
    """CPU of process trees over an interval, as a percentage of one core; trees are looked up again at each read,
    so that processes started meanwhile (runs, Python workers) count from when they are first seen."""

    def __init__(self, roots: Callable[[], list[int | None]]) -> None:
        self._roots = roots
        self._seen: dict[int, float] = {}
        self._started = time.monotonic()
        self._used = 0.0
        self.read()

    def read(self) -> float:
        pids = [pid for root in self._roots() for pid in process_tree(root)]
        for pid in pids:
            now = cpu_seconds([pid])
            self._used += now - self._seen.get(pid, now)
            self._seen[pid] = now
        elapsed = time.monotonic() - self._started
        return round(100 * self._used / elapsed, 1) if elapsed > 0 else 0.0

    def seconds(self) -> float:
        """CPU seconds used since the meter started."""
        self.read()
        return self._used


def _probe_ride(probe: int, seed: int) -> dict[str, Any]:
    ride = next(synthetic_rides(1, SyntheticOptions(seed=seed)))
    return {**ride, "vendor_id": PROBE_VENDOR + probe}


def run_live_bench(
    modes: tuple[str, ...],
    json_path: Path | None,
    *,
    repeat: int = 1,
    rate: int = 1000,
    seconds: float = 180.0,
    probe_every: float = 6.0,
    warmup_seconds: float = 60.0,
    idle_seconds: float = 60.0,
    pickup_every: int = 10,
    quiet_seconds: float = 150.0,
    timeout: float = 300.0,
    env: list[str] | None = None,
    engine_conf: list[str] | None = None,
    floor: bool = False,
    stack_dir: Path | None = None,
) -> LiveResult | LiveRepeats:
    """What a user sees through `dagster dev`, in each mode in turn on one stack and one lakehouse (the switch
    between modes is part of the run): a steady load for `warmup_seconds` and then `seconds` more, and in those
    `seconds` single probe rides at random moments, each timed from its produce call until it shows in raw_rides and
    in vendor_counts. The warm-up measures every mode and the floor in steady state: not while a mode's queries
    start, the engine's JIT compiles their code, or a backlog of the load's first seconds drains. Beside the rides,
    pickup events go to the pickups topic in step with them, as a deployment's pickups stream would: the ride-pickup
    join's watermark is the slower side's, so without pickups the join would keep every ride in its state. Then the
    catch-up, the exactness of both tables, and `idle_seconds` of the idle pipeline with no commit in them, from when
    no table has had a commit for `quiet_seconds` (longer than the continuous mode's downstream trigger interval, 2
    minutes by default, so that every query took the last rides too); a window a commit interrupts (the window
    reconcile after the load), or after which the engine was busier than under the load, is discarded for a new one.

    Args:
        modes: the LIVE_MODEs to measure, in turn (`--mode`).
        json_path: where to write every figure as JSON, after each mode too (`--json`); None for none.
        repeat: measure this many times, each on a fresh stack and lakehouse with the same load and probe moments,
            and sum the runs up as the median and range of each figure (`--repeat`): two runs of the same code on
            this kind of machine differ by 1 to 3 s at the median (docs/freshness.md).
        rate: rides per second of the load (`--rate`).
        seconds: seconds of load with probes per mode, after the warm-up (`--seconds`).
        probe_every: mean seconds between probe rides (`--probe-every`).
        warmup_seconds: seconds of the load before the first probe (`--warmup`).
        idle_seconds: seconds of idle CPU measured (`--idle-seconds`).
        pickup_every: one pickup event per this many rides of the load, 0 for none (`--pickup-every`).
        quiet_seconds: no commit for this long before the idle window starts (`--quiet-seconds`).
        timeout: seconds to wait for the first ride, the catch-up, and the quiet beyond `quiet_seconds`.
        env: pipeline settings for `dagster dev` (`--env KEY=VALUE`), recorded with the figures.
        engine_conf: Spark settings of the bench's own engine (`--engine-conf spark.KEY=VALUE`), recorded too.
        floor: after the modes, the same load (rides only) and probes through the latency floor (`latency_floor`: a
            bare Kafka -> Delta query and a chained count, no Dagster) on a fresh stack of its own with the same
            engine settings (on the stack of `stack_dir` when given), reported as the mode `floor`: what the engine
            itself gives on this machine in the same run (`--floor`).
        stack_dir: the embedded stack to measure on (`--stack-dir`); None for a private one.

    Returns:
        With `repeat` 1, the figures of each mode; else every run and the spread of each figure over them.
    """
    settings = live_settings(env or [])
    engine_settings = engine_conf_settings(engine_conf or [])
    if engine_settings and stack_dir is not None:
        raise BenchError("--engine-conf sets the bench's own engine: leave out --stack-dir")
    if repeat < 1:
        raise BenchError("--repeat must be 1 or more")
    if repeat > 1 and stack_dir is not None:
        raise BenchError("--repeat measures each run on a fresh stack: leave out --stack-dir")
    for mode in modes:
        if mode not in LIVE_MODES:
            raise BenchError(f"--mode {mode!r} is not one of {', '.join(LIVE_MODES)}")
    if rate <= 0 or seconds <= 0 or probe_every <= 0:
        raise BenchError("--rate, --seconds and --probe-every must be positive")
    if warmup_seconds < 0:
        raise BenchError("--warmup must be 0 (none) or positive")
    if pickup_every < 0:
        raise BenchError("--pickup-every must be 0 (no pickups) or positive")
    results: list[LiveResult] = []
    for number in range(repeat):
        if repeat > 1:
            say(f"run {number + 1} of {repeat}, on a fresh stack")
        results.append(
            _live_run(
                modes,
                rate=rate,
                seconds=seconds,
                probe_every=probe_every,
                warmup_seconds=warmup_seconds,
                idle_seconds=idle_seconds,
                pickup_every=pickup_every,
                quiet_seconds=quiet_seconds,
                timeout=timeout,
                settings=settings,
                engine_settings=engine_settings,
                floor=floor,
                stack_dir=stack_dir,
                # One run: its JSON holds each mode as soon as it is measured, so a later mode's failure keeps it.
                on_mode=(lambda partial: write_json(json_path, partial)) if repeat == 1 else lambda partial: None,
            )
        )
        _print_live(results[-1])
    if repeat == 1:
        return results[0]  # its JSON was written after its last mode
    repeats = live_repeats(results)
    _print_spreads(repeats)
    write_json(json_path, repeats)
    return repeats


def _live_run(
    modes: tuple[str, ...],
    *,
    rate: int,
    seconds: float,
    probe_every: float,
    warmup_seconds: float,
    idle_seconds: float,
    pickup_every: int,
    quiet_seconds: float,
    timeout: float,
    settings: dict[str, str],
    engine_settings: dict[str, str],
    floor: bool,
    stack_dir: Path | None,
    on_mode: Callable[[LiveResult], object],
) -> LiveResult:
    """One measurement of `run_live_bench`, on a stack of its own (and the floor on a second one), or on the stack
    in `stack_dir` (the floor too), each with a lakehouse of its own; `on_mode` is given the result so far after
    each mode."""
    from streaming_pipeline.devstack.embedded.spark_connect import driver_memory_for
    from streaming_pipeline.lakehouse.registry_client import RegistryClient
    from streaming_pipeline.resources import KafkaResource

    heap = driver_memory_for(modes[0])
    result = LiveResult(
        machine=machine_description(),
        engine=f"Spark Connect server, {engine_settings.get('spark.master', 'local[*]')}, {heap} heap",
        settings=settings,
        engine_settings=engine_settings,
    )
    timing = _Timing(probe_every=probe_every, idle_seconds=idle_seconds, quiet_seconds=quiet_seconds, timeout=timeout)

    def measure_floor(stack: Any, work: Path, events: Path | None) -> None:
        # On the rides topic from its end offsets (it reads only its own load and probes) and in a lakehouse of its
        # own; the pipeline's queries are stopped by then.
        kafka = KafkaResource(bootstrap_servers=stack.bootstrap_servers)
        kafka.ensure_topic(RIDES_TOPIC)
        figures = LiveModeFigures(mode=FLOOR_MODE, rate=rate, load_seconds=seconds, warmup_seconds=warmup_seconds)
        pipeline = _FloorPipeline(stack, work / "floor", kafka.end_offsets(RIDES_TOPIC))
        traffic = _Traffic(
            kafka, RegistryClient(stack.schema_registry_url), _ProbeWatcher(work / "floor"), {"rides": 0, "probes": 0}
        )
        _live_mode(pipeline, traffic, figures, seed=6000, timing=timing, events=events)
        result.modes.append(figures)
        on_mode(result)

    # The stack starts in the first mode measured, as `stack up --live-mode` would: the engine's heap follows it.
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        work = Path(tmp)
        with bench_stack(
            work, stack_dir, live_mode=modes[0], event_log=work / "spark-events", engine_conf=engine_settings
        ) as stack:
            assert stack.spark_remote and stack.dagster_home
            kafka = KafkaResource(bootstrap_servers=stack.bootstrap_servers)
            registry = RegistryClient(stack.schema_registry_url)
            kafka.ensure_topic(RIDES_TOPIC)
            # The zones the enrichment reads, which the taxi_zones sensor loads as the user's `produce zones` would.
            if produce_zone_lookup(kafka, registry).failed:
                raise BenchError("producing the taxi zones failed")
            lakehouse = work / "lakehouse"
            # The engine's event log, where Spark writes each micro-batch's progress (a stack of --stack-dir has none).
            events = work / "spark-events" if stack_dir is None else None
            traffic = _Traffic(kafka, registry, _ProbeWatcher(lakehouse), {"rides": 0, "probes": 0})
            for number, mode in enumerate(modes):
                env = dagster_dev_env(settings, stack.env(), lakehouse, mode)
                figures = LiveModeFigures(
                    mode=mode, rate=rate, load_seconds=seconds, warmup_seconds=warmup_seconds, pickup_every=pickup_every
                )
                _live_mode(
                    _DagsterPipeline(stack, env, work / f"dagster-dev-{mode}.log", mode),
                    traffic,
                    figures,
                    seed=7000 + 1000 * number,
                    timing=timing,
                    events=events,
                )
                result.modes.append(figures)
                on_mode(result)
            if floor and stack_dir is not None:
                measure_floor(stack, work, events=None)  # a stack of --stack-dir is shared: the floor runs on it too
        if floor and stack_dir is None:
            # On a fresh stack of its own, as the pipeline's first mode had: an engine that has already worked for
            # some minutes runs the same queries 1.3 to 1.5x faster (docs/freshness.md), which would favour the
            # floor measured last.
            floor_work = work / "floor-stack"
            floor_events = floor_work / "spark-events"
            with bench_stack(
                floor_work, None, live_mode=modes[0], event_log=floor_events, engine_conf=engine_settings
            ) as floor_stack:
                measure_floor(floor_stack, floor_work, events=floor_events)
    return result


@dataclass(frozen=True)
class _Timing:
    probe_every: float  # mean seconds between probes
    idle_seconds: float  # of idle CPU measured
    quiet_seconds: float  # no commit for this long before the idle window starts
    timeout: float  # for the first ride, the catch-up, and the quiet beyond its own `quiet_seconds`


class _DagsterPipeline:
    """The pipeline in one LIVE_MODE, through `dagster dev` with its daemon and the sensors as they ship."""

    def __init__(self, stack: Any, env: dict[str, str], log_file: Path, mode: str) -> None:
        self.stack, self.env, self.log_file, self.mode = stack, env, log_file, mode
        self.instance = dg.DagsterInstance.from_config(str(stack.dagster_home))
        self._runs_before: set[str] = set()
        self._dagster_dev: Any = None

    def __enter__(self) -> _DagsterPipeline:
        from streaming_pipeline.devstack.embedded.dagster_dev import DagsterDev

        self._runs_before = {record.dagster_run.run_id for record in self.instance.get_run_records()}
        say(f"{self.mode}: starting dagster dev (LIVE_MODE={self.mode})")
        self._dagster_dev = DagsterDev(self.env, self.log_file).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._dagster_dev.__exit__(*exc)

    def cpu_roots_beside_the_engine(self) -> list[int | None]:
        """dagster dev: webserver, daemon, code server and the runs."""
        return [self._dagster_dev.pid]

    def idle_cpu_roots(self) -> list[int | None]:
        """The engine and the runs in flight (the continuous run; a triggered run, while one works)."""
        return [self.stack.spark_pid, *_run_pids(self.instance)]

    def runs(self) -> int:
        return _sensor_runs(self.instance, self._runs_before)


class _FloorPipeline:
    """The latency floor (`latency_floor`): two bare queries on the engine, started by this process over Spark
    Connect, stopped when the mode's measurement ends."""

    mode = FLOOR_MODE

    def __init__(self, stack: Any, lakehouse: Path, starting_offsets: dict[int, int]) -> None:
        self.stack, self.lakehouse, self.starting_offsets = stack, lakehouse, starting_offsets
        self._spark: Any = None
        self._queries: list[Any] = []

    def __enter__(self) -> _FloorPipeline:
        from streaming_pipeline.devstack.latency_floor import start_floor_queries
        from streaming_pipeline.lakehouse.engine.spark import connect_session

        say(f"{FLOOR_MODE}: starting its two queries on the engine")
        self._spark = connect_session(self.stack.spark_remote)
        self._queries = start_floor_queries(
            self._spark, self.stack.bootstrap_servers, RIDES_TOPIC, self.starting_offsets, self.lakehouse
        )
        return self

    def __exit__(self, *exc: object) -> None:
        for query in self._queries:
            query.stop()
        errors = {query.name: query.exception() for query in self._queries}  # one call to the engine each
        failures = [f"{name}: {error}" for name, error in errors.items() if error]
        self._spark.stop()
        if failures and exc[0] is None:
            raise BenchError(f"the floor's queries failed: {'; '.join(failures)}")

    def cpu_roots_beside_the_engine(self) -> list[int | None]:
        return []  # the queries run in the engine; this process only asks after them

    def idle_cpu_roots(self) -> list[int | None]:
        return [self.stack.spark_pid]

    def runs(self) -> int:
        return 0


@dataclass(frozen=True)
class _Traffic:
    """A measurement's rides: where they go (its topics, through the registry) and where its probes show
    (`watcher`); `produced` counts the load's rides and the probes of every mode so far, which the tables hold."""

    kafka: Any
    registry: Any
    watcher: _ProbeWatcher
    produced: dict[str, int]


@dataclass
class _Load:
    """A mode's load with its probes, as the figures after it need it."""

    rides: int  # of the load, the probes not counted
    pickups: int
    started: float  # time.time() at its start: the event log's and the quiet's clock
    raw_version_before: int | None  # raw_rides' version before it
    engine_cpu: _CpuMeter  # from its start
    began: float = 0.0  # time.monotonic() when the loaders started: the probes' clock
    sent_at: dict[int, float] = field(default_factory=dict)  # per probe, when its produce call began (monotonic)


def _live_mode(
    pipeline: _DagsterPipeline | _FloorPipeline,
    traffic: _Traffic,
    figures: LiveModeFigures,
    *,
    seed: int,
    timing: _Timing,
    events: Path | None = None,
) -> None:
    """One mode: the first ride on the idle pipeline, the load with its probes, the catch-up, the idle window; and
    where the work went from the load's start until the pipeline was quiet: the engine's CPU per 1,000 rides, each
    query's micro-batches from the engine's event log `events`, and raw_rides' handler steps from its commits."""
    with pipeline:
        _first_ride(traffic, figures, seed=seed, timeout=timing.timeout)
        load = _load_with_probes(pipeline, traffic, figures, seed=seed, timing=timing)
        _probe_figures(figures, traffic.watcher, load)
        quiet_at, quiet_cpu_seconds = _idle_figures(pipeline, traffic.watcher, figures, load, timing)
        figures.runs = pipeline.runs()
        thousands = (load.rides + len(load.sent_at)) / 1000
        idle_cpu_seconds = figures.engine_idle_cpu_percent / 100 * (quiet_at - load.started)
        figures.engine_cpu_seconds_per_1000_rides = round((quiet_cpu_seconds - idle_cpu_seconds) / thousands, 3)
        if events is not None:
            figures.queries = query_breakdowns(progress_reports(events), load.started, quiet_at)
        raw_rides = str(traffic.watcher.raw_path)
        figures.handler_ms, figures.handler_batches = bronze_handler_steps(raw_rides, load.raw_version_before)
        say(
            f"{figures.mode}: raw_rides p50 {figures.raw_rides_p50_seconds:.1f} s, vendor_counts p50 "
            f"{figures.vendor_counts_p50_seconds:.1f} s over {figures.probes} probes; caught up in "
            f"{figures.catch_up_seconds:.0f} s; exactly once: {figures.exactly_once}"
        )


def _first_ride(traffic: _Traffic, figures: LiveModeFigures, *, seed: int, timeout: float) -> None:
    """One probe ride on the idle pipeline: the seconds until raw_rides and vendor_counts show it."""
    first = traffic.produced["probes"]
    started = time.monotonic()
    _send(traffic.kafka, traffic.registry, [_probe_ride(first, seed)])
    traffic.produced["probes"] += 1
    with bench_stage(f"{figures.mode}: the first ride, on the idle pipeline"):
        _wait_for(
            lambda: first in traffic.watcher.counted,
            traffic.watcher,
            timeout,
            "the first ride did not reach vendor_counts",
        )
    figures.first_ride_to_raw_rides_seconds = round(traffic.watcher.raw_seen[first] - started, 2)
    figures.first_ride_to_vendor_counts_seconds = round(traffic.watcher.counted[first] - started, 2)


def _load_with_probes(
    pipeline: _DagsterPipeline | _FloorPipeline,
    traffic: _Traffic,
    figures: LiveModeFigures,
    *,
    seed: int,
    timing: _Timing,
) -> _Load:
    """The load with its probes, under which the engine's peak RSS and the CPU are measured, then the catch-up until
    the tables hold every ride produced, and whether they hold each once."""
    stack = pipeline.stack
    load_rides = int(figures.rate * (figures.warmup_seconds + figures.load_seconds))
    records = list(synthetic_rides(load_rides, SyntheticOptions(seed=seed + 1)))
    pickups = _pickups_for(records, figures.pickup_every, seed)
    loaders = (
        _LoadThread("bench-load", lambda: _send(traffic.kafka, traffic.registry, records, rate=figures.rate)),
        _LoadThread(
            "bench-pickups",
            lambda: _send(
                traffic.kafka, traffic.registry, pickups, rate=figures.rate / figures.pickup_every, topic=PICKUPS_TOPIC
            ),
        ),
    )
    raw_version_before = latest_version(str(traffic.watcher.raw_path))
    started = time.time()
    load = _Load(len(records), len(pickups), started, raw_version_before, _CpuMeter(lambda: [stack.spark_pid]))
    dagster_cpu = _CpuMeter(pipeline.cpu_roots_beside_the_engine)
    with _Sampler(stack.spark_pid) as sampler:
        _probe_under_load(traffic, figures, load, loaders, seed=seed, probe_every=timing.probe_every)
        load_ended = time.monotonic()
        figures.engine_cpu_percent_under_load = load.engine_cpu.read()
        figures.dagster_cpu_percent_under_load = dagster_cpu.read()
        traffic.produced["rides"] += len(records)
        total = traffic.produced["rides"] + traffic.produced["probes"]
        tables = _LiveTables(traffic.watcher.raw_path.parent)
        with bench_stage(f"{figures.mode}: catching up ({total:,} rides in all)"):
            _wait_for(
                lambda: tables.caught_up(total) and set(load.sent_at) <= set(traffic.watcher.counted),
                traffic.watcher,
                timing.timeout,
                f"raw_rides and vendor_counts did not reach {total:,} rides",
            )
        figures.catch_up_seconds = round(time.monotonic() - load_ended, 2)
        figures.engine_peak_rss_mib = round(sampler.peak_rss_mib, 1)
    figures.exactly_once = tables.exactly_once(total)
    return load


def _probe_under_load(
    traffic: _Traffic,
    figures: LiveModeFigures,
    load: _Load,
    loaders: tuple[_LoadThread, _LoadThread],
    *,
    seed: int,
    probe_every: float,
) -> None:
    """Start the loaders (the rides', the pickups') and, from the warm-up's end until the rides are sent, produce a
    probe ride at random moments about `probe_every` s apart, each in `load.sent_at`; then raise what a loader
    raised."""
    rng = random.Random(seed)
    loader, pickup_loader = loaders
    load.began = time.monotonic()
    loader.start()
    if load.pickups:
        pickup_loader.start()
    say(
        f"{figures.mode}: {load.rides:,} rides at {figures.rate:,}/s and {load.pickups:,} pickups, probes about "
        f"{probe_every:g} s apart after {figures.warmup_seconds:g} s of warm-up"
    )
    next_probe = load.began + figures.warmup_seconds + rng.uniform(0.5, 1.5) * probe_every
    while loader.is_alive() and pickup_loader.error is None:
        traffic.watcher.poll()
        if time.monotonic() >= next_probe:
            probe = traffic.produced["probes"]
            load.sent_at[probe] = time.monotonic()
            _send(traffic.kafka, traffic.registry, [_probe_ride(probe, seed + 2 + probe)])
            traffic.produced["probes"] += 1
            next_probe = time.monotonic() + rng.uniform(0.5, 1.5) * probe_every
        time.sleep(0.25)
    if pickup_loader.error is not None:
        pickup_loader.result()  # raises now: the rides' load may still run for its whole length
    loader.result()
    if load.pickups:
        pickup_loader.result()


def _probe_figures(figures: LiveModeFigures, watcher: _ProbeWatcher, load: _Load) -> None:
    """What the load produced, and each probe's seconds until raw_rides and vendor_counts showed it, with their p50
    and p95."""
    sent_at = sorted(load.sent_at.items())
    figures.rides_produced, figures.pickups_produced, figures.probes = load.rides, load.pickups, len(sent_at)
    figures.probe_sent_seconds = [round(t - load.began, 2) for _, t in sent_at]
    figures.raw_rides_seconds = [round(watcher.raw_seen[p] - t, 2) for p, t in sent_at]
    figures.vendor_counts_seconds = [round(watcher.counted[p] - t, 2) for p, t in sent_at]
    if sent_at:
        figures.raw_rides_p50_seconds = round(statistics.median(figures.raw_rides_seconds), 2)
        figures.raw_rides_p95_seconds = round(_percentile(figures.raw_rides_seconds, 0.95), 2)
        figures.vendor_counts_p50_seconds = round(statistics.median(figures.vendor_counts_seconds), 2)
        figures.vendor_counts_p95_seconds = round(_percentile(figures.vendor_counts_seconds, 0.95), 2)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _idle_figures(
    pipeline: _DagsterPipeline | _FloorPipeline,
    watcher: _ProbeWatcher,
    figures: LiveModeFigures,
    load: _Load,
    timing: _Timing,
) -> tuple[float, float]:
    """The idle window once the pipeline is quiet (`_measure_idle`), and the engine's own CPU over it; the time the
    measured window started (time.time()) and the engine's CPU seconds from the load's start until then."""
    stack = pipeline.stack
    with bench_stage(
        f"{figures.mode}: {timing.idle_seconds:g} s of the idle pipeline, once no table has had a commit for "
        f"{timing.quiet_seconds:g} s"
    ):
        quiet: dict[str, Any] = {}

        def at_quiet() -> None:
            quiet.update(cpu_seconds=load.engine_cpu.seconds(), at=time.time())
            quiet["idle"] = _CpuMeter(lambda: [stack.spark_pid])

        def engine_at_work() -> str | None:
            # Idle, the engine cannot be busier than it was on average under the load: if it is, something
            # ran through the window (a micro-batch longer than the quiet) and would make the CPU per ride
            # (`_live_mode`) less than the engine's own idle share.
            idle_percent = quiet["idle"].read()
            loaded_percent = 100 * quiet["cpu_seconds"] / max(quiet["at"] - load.started, 1e-9)
            if idle_percent < loaded_percent:
                return None
            return f"the engine at {idle_percent:.0f}% of a core, {loaded_percent:.0f}% under the load"

        idle = _measure_idle(
            watcher.raw_path.parent,
            pipeline.idle_cpu_roots,
            timing,
            mode=figures.mode,
            on_quiet=at_quiet,
            at_work=engine_at_work,
        )
        figures.engine_idle_cpu_percent = quiet["idle"].read()
    figures.idle_cpu_percent = idle.cpu_percent
    figures.quiet_after_seconds = idle.quiet_after_seconds
    figures.idle_windows_discarded = idle.discarded
    return quiet["at"], quiet["cpu_seconds"]


@dataclass(frozen=True)
class _IdleWindow:
    cpu_percent: float  # of one core, over the window that no commit interrupted
    quiet_after_seconds: float  # from the catch-up to the start of that window
    discarded: list[str]  # per window a commit interrupted, the tables that committed


def _measure_idle(
    lakehouse: Path,
    roots: Callable[[], list[int | None]],
    timing: _Timing,
    *,
    mode: str,
    sleep: Callable[[float], object] = time.sleep,
    on_quiet: Callable[[], object] = lambda: None,
    at_work: Callable[[], str | None] = lambda: None,
) -> _IdleWindow:
    """The CPU of the process trees of `roots` over `timing.idle_seconds` in which no table of `lakehouse` has a
    commit, starting once none has had one for `timing.quiet_seconds`. A commit inside the window (a downstream
    trigger taking the load's last rides, the window reconcile that follows them) means the pipeline was still at
    work: that window is discarded and a new one starts after the next quiet. So is a window after which `at_work`
    names work the commits do not show (an engine busier than under load: a micro-batch that outlasted the quiet).
    It gives up `timing.timeout` seconds after the quiet could first have come. `on_quiet` is called when each
    window starts (the last call: the one measured)."""
    started = time.monotonic()
    deadline = started + timing.quiet_seconds + timing.timeout
    discarded: list[str] = []
    while True:
        _wait_until_quiet(lakehouse, timing.quiet_seconds, max(0.0, deadline - time.monotonic() - timing.quiet_seconds))
        logs_before, quiet_after = _log_times(lakehouse), round(time.monotonic() - started, 1)
        on_quiet()
        meter = _CpuMeter(roots)
        window_ends = time.monotonic() + timing.idle_seconds
        committed: list[str] = []
        while not committed and (left := window_ends - time.monotonic()) > 0:
            sleep(min(1.0, left))
            logs_now = _log_times(lakehouse)
            committed = sorted(table for table, when in logs_now.items() if logs_before.get(table) != when)
        if not committed and (busy := at_work()) is None:
            return _IdleWindow(meter.read(), quiet_after, discarded)
        discarded.append(", ".join(committed) + " committed" if committed else str(busy))
        if time.monotonic() > deadline:
            raise BenchError(
                f"no idle window of {timing.idle_seconds:g} s in the {timing.quiet_seconds + timing.timeout:.0f} s "
                f"after the catch-up, each with work in it: {'; then '.join(discarded)}"
            )
        say(f"{mode}: the idle window had work in it ({discarded[-1]}); measuring a new one after the next quiet")


def _log_times(lakehouse: Path) -> dict[str, int]:
    """When each table of `lakehouse` last had a file added to its Delta log (the directory's mtime, ns). A commit
    shows as a change of it, not as a time after the window's start: the file system stamps with a coarser clock
    than `time.time()`, so a commit just after the start can carry a time before it."""
    return {log.parent.name: log.stat().st_mtime_ns for log in lakehouse.glob("*/_delta_log") if log.is_dir()}


def _wait_until_quiet(lakehouse: Path, quiet_seconds: float, timeout: float) -> float:
    """Seconds until no table of `lakehouse` has had a commit for `quiet_seconds` (the queries that trigger less
    often than the bronze ones have written the load's last rides too): only then is the pipeline idle. It gives
    up `timeout` seconds after the quiet could first have been reached."""
    started = time.monotonic()
    deadline = started + quiet_seconds + timeout
    while True:
        newest = max(_log_times(lakehouse).values(), default=0) / 1e9
        if time.time() - newest >= quiet_seconds:
            return round(time.monotonic() - started, 1)
        if time.monotonic() > deadline:
            raise BenchError(
                f"the tables of {lakehouse} never went {quiet_seconds:g} s without a commit in the "
                f"{quiet_seconds + timeout:.0f} s after the catch-up"
            )
        time.sleep(1.0)


def _pickups_for(load: list[dict[str, Any]], every: int, seed: int) -> list[dict[str, Any]]:
    """A pickup event for every `every`-th ride of `load`, at its dropoff zone, 2 minutes before to 15 minutes after
    its dropoff (as `produce --synthetic` makes them): in step with the rides' event times."""
    if not every:
        return []
    rng = random.Random(seed)
    return [
        {
            "pu_location_id": ride["do_location_id"],
            "pickup_datetime": ride["dropoff_datetime"] + timedelta(seconds=round(rng.uniform(-120, 900))),
        }
        for ride in load[::every]
    ]


def _send(
    kafka: Any, registry: Any, records: list[dict[str, Any]], rate: float | None = None, topic: str = RIDES_TOPIC
) -> None:
    result = produce(kafka, registry, topic, rows_from_records(records), rate=rate, show_progress=False)
    if result.sent != len(records):
        raise BenchError(f"{len(records) - result.sent} of {len(records)} records could not be produced to {topic}")


def _wait_for(condition: Callable[[], bool], watcher: _ProbeWatcher, timeout: float, failure: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        watcher.poll()
        if condition():
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{failure} within {timeout:.0f} s")
        time.sleep(0.25)


#: The tag Dagster gives a run Declarative Automation launched (its sensor also sets the sensor's name).
AUTOMATION_CONDITION_TAG = "dagster/from_automation_condition"


def _sensor_runs(instance: dg.DagsterInstance, before: set[str]) -> int:
    """Runs the pipeline's sensors launched since `before` (run ids): the offset sensors' triggered runs or the
    continuous run, not the runs of Declarative Automation, nor a schedule's."""
    from streaming_pipeline.defs.run_retention import SENSOR_NAME_TAG

    return sum(
        1
        for record in instance.get_run_records()
        if record.dagster_run.run_id not in before
        and SENSOR_NAME_TAG in record.dagster_run.tags
        and record.dagster_run.tags.get(AUTOMATION_CONDITION_TAG) != "true"
    )


def _run_pids(instance: dg.DagsterInstance) -> list[int | None]:
    """The processes of the runs in flight (the continuous run; a triggered run, while one works)."""
    from streaming_pipeline.components.live_runs import IN_FLIGHT, run_pid

    return [run_pid(instance, run.run_id) for run in instance.get_runs(dg.RunsFilter(statuses=IN_FLIGHT))]


class _LiveTables:
    """raw_rides and vendor_counts read with delta-rs (Spark-free)."""

    def __init__(self, lakehouse: Path) -> None:
        self.raw = str(lakehouse / RAW_RIDES.name)
        self.counts = str(lakehouse / VENDOR_COUNTS)

    def _rides(self) -> int:
        from streaming_pipeline.lakehouse.engine.table_snapshot import row_count

        version = latest_version(self.raw)
        return 0 if version is None else row_count(self.raw, version) or 0

    def _counted(self) -> int:
        from deltalake import DeltaTable

        column = DeltaTable(self.counts).to_pyarrow_table(columns=["trip_count"]).column("trip_count")
        return int(sum(v or 0 for v in column.to_pylist()))

    def caught_up(self, total: int) -> bool:
        try:
            return self._rides() >= total and self._counted() >= total
        except Exception:  # a table not written yet
            return False

    def exactly_once(self, total: int) -> bool:
        from deltalake import DeltaTable

        keys = DeltaTable(self.raw).to_pyarrow_table(columns=["kafka_partition", "kafka_offset"])
        distinct = len(set(zip(keys.column(0).to_pylist(), keys.column(1).to_pylist(), strict=True)))
        return keys.num_rows == distinct == total and self._counted() == total


def _print_live(result: LiveResult) -> None:
    rows: list[tuple[str, str]] = []
    for m in result.modes:
        rows += [
            (
                f"{m.mode}: load",
                f"{m.rides_produced:,} rides at {m.rate:,}/s: {m.warmup_seconds:g} s of warm-up, then "
                f"{m.load_seconds:g} s with {m.probes} probes; {m.pickups_produced:,} pickups",
            ),
            (
                f"{m.mode}: produce -> raw_rides p50 / p95 (s)",
                f"{m.raw_rides_p50_seconds:.1f} / {m.raw_rides_p95_seconds:.1f}",
            ),
            (
                f"{m.mode}: produce -> vendor_counts p50 / p95 (s)",
                f"{m.vendor_counts_p50_seconds:.1f} / {m.vendor_counts_p95_seconds:.1f}",
            ),
            (
                f"{m.mode}: first ride -> raw_rides / vendor_counts (s)",
                f"{m.first_ride_to_raw_rides_seconds:.1f} / {m.first_ride_to_vendor_counts_seconds:.1f}",
            ),
            (f"{m.mode}: catch-up after the load (s)", f"{m.catch_up_seconds:.1f}"),
            (f"{m.mode}: every ride once in raw_rides and vendor_counts", str(m.exactly_once)),
            (f"{m.mode}: engine peak RSS (MiB)", f"{m.engine_peak_rss_mib:,.0f}"),
            (
                f"{m.mode}: CPU under load, engine / dagster dev (% of a core)",
                f"{m.engine_cpu_percent_under_load:.0f} / {m.dagster_cpu_percent_under_load:.0f}",
            ),
            (
                f"{m.mode}: CPU idle, engine + runs (% of a core)",
                f"{m.idle_cpu_percent:.1f} (from {m.quiet_after_seconds:.0f} s after the catch-up"
                + (
                    f"; {len(m.idle_windows_discarded)} earlier window(s) discarded for work in them"
                    if m.idle_windows_discarded
                    else ""
                )
                + ")",
            ),
            (f"{m.mode}: runs", str(m.runs)),
            (
                f"{m.mode}: engine CPU s per 1,000 rides, load start -> quiet, less idle",
                f"{m.engine_cpu_seconds_per_1000_rides:.2f}",
            ),
            *_breakdown_rows(m),
        ]
    if result.settings:
        rows.append(("settings (--env)", ", ".join(f"{k}={v}" for k, v in sorted(result.settings.items()))))
    if result.engine_settings:
        engine = ", ".join(f"{k}={v}" for k, v in sorted(result.engine_settings.items()))
        rows.append(("engine settings (--engine-conf)", engine))
    rows.append(("machine", result.machine))
    print_rows(rows, [])


def _breakdown_rows(m: LiveModeFigures) -> list[tuple[str, str]]:
    """Per query: micro-batches, rows, and the mean ms per batch of each phase Spark reports; raw_rides' handler."""
    short = {**PHASE_LABELS, "triggerExecution": "batch"}
    rows = []
    for name, q in m.queries.items():
        phases = ", ".join(
            f"{short.get(phase, phase)} {1000 * q.seconds_per_batch(phase):,.0f}"
            for phase in PHASES
            if q.phase_seconds.get(phase)
        )
        rows.append(
            (
                f"{m.mode}: {name}",
                f"{q.micro_batches} batches, {q.input_rows:,} rows, "
                f"{q.phase_seconds.get('triggerExecution', 0):,.1f} s in all; ms per batch: {phases}",
            )
        )
    if m.handler_ms:
        steps = ", ".join(f"{step} {ms:,.0f}" for step, ms in m.handler_ms.items())
        rows.append(
            (f"{m.mode}: raw_rides handler before its append, median ms", f"{steps} ({m.handler_batches} batches)")
        )
    return rows
