"""`streaming-pipeline`: the embedded stack, the producer, the demo and the benchmark."""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from streaming_pipeline.devstack.errors import exit_code
from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.sources import SourceTopic

#: `streaming-pipeline produce <name>`: the topic's name, or a shorter one.
_PRODUCE_NAMES = {"pickup_locations": "pickups", "taxi_zones": "zones"}
#: `--csv` with no file: the zone lookup shipped with the package (for `produce zones`).
_SHIPPED_CSV = Path("<shipped>")


def _produce_name(source: SourceTopic) -> str:
    return _PRODUCE_NAMES.get(source.topic, source.topic)


def _add_connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers", help="Kafka bootstrap servers (default: KAFKA_BOOTSTRAP_SERVERS or 127.0.0.1:9092)"
    )
    parser.add_argument(
        "--schema-registry-url", help="Schema registry URL (default: SCHEMA_REGISTRY_URL or http://127.0.0.1:8081)"
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the broker before giving up (default 10)"
    )


def _add_produce_parser(subparsers: argparse._SubParsersAction) -> None:
    sources = project_sources()
    produce = subparsers.add_parser("produce", help="produce records of a source topic to Kafka as Avro")
    produce.add_argument(
        "kind",
        choices=[_produce_name(s) for s in sources],
        help="; ".join(f"{_produce_name(s)} -> topic {s.topic}" for s in sources),
    )
    records = produce.add_mutually_exclusive_group(required=True)
    records.add_argument(
        "--csv",
        type=Path,
        nargs="?",
        const=_SHIPPED_CSV,
        help="a CSV file with the NYC TLC header, or the Avro field names; `produce zones --csv` with no file sends "
        "the TLC zone lookup shipped with the package",
    )
    records.add_argument("--synthetic", type=int, metavar="N", help="N synthetic records")
    produce.add_argument("--rate", type=float, help="events per second (default: as fast as possible)")
    produce.add_argument("--acks", choices=["0", "1", "all"], default="all", help="producer acks (default all)")
    produce.add_argument("--seed", type=int, default=42, help="seed of the synthetic generator (default 42)")
    produce.add_argument("--partitions", type=int, default=2, help="partitions when the topic is created (default 2)")
    produce.add_argument(
        "--schema", type=Path, help="value schema .avsc to use instead of the default (e.g. schemas/ride_value_v2.avsc)"
    )
    produce.add_argument(
        "--out-of-order-fraction", type=float, default=0.0, help="synthetic: share of rides up to 5 min out of order"
    )
    produce.add_argument("--late-fraction", type=float, default=0.0, help="synthetic: share of rides that arrive late")
    produce.add_argument("--late-by-seconds", type=float, default=3600.0, help="synthetic: how late the late rides are")
    produce.add_argument(
        "--no-progress", action="store_true", help="no progress (a bar on a terminal, else a line every 5 s)"
    )
    _add_connection_flags(produce)
    produce.set_defaults(handler=_run_produce)


def _run_produce(args: argparse.Namespace) -> int:
    from streaming_pipeline.devstack.producer import produce, rows_from_records
    from streaming_pipeline.devstack.records import read_csv, shipped_zone_lookup
    from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_records
    from streaming_pipeline.lakehouse.settings import PipelineSettings
    from streaming_pipeline.lakehouse.tables import TAXI_ZONE_LOOKUP
    from streaming_pipeline.resources.from_settings import build_resources, resolved

    resources = build_resources(PipelineSettings.from_env())
    kafka = resolved(resources["kafka"]).model_copy(update={"timeout_seconds": args.timeout})
    if args.bootstrap_servers:
        kafka = kafka.model_copy(update={"bootstrap_servers": args.bootstrap_servers})
    schema_registry = resolved(resources["schema_registry"])
    if args.schema_registry_url:
        schema_registry = schema_registry.model_copy(update={"url": args.schema_registry_url})
    registry = schema_registry.get_client()
    source = next(s for s in project_sources() if _produce_name(s) == args.kind)
    topic = source.topic
    if args.csv == _SHIPPED_CSV:
        if source.topic != TAXI_ZONE_LOOKUP.topic:
            raise ConfigurationError(f"--csv needs a file for {args.kind}; only `produce zones` has one shipped")
        args.csv = shipped_zone_lookup()
    if args.csv is not None:
        rows = read_csv(args.csv, source)
        total = None
    else:
        options = SyntheticOptions(
            seed=args.seed,
            out_of_order_fraction=args.out_of_order_fraction,
            late_fraction=args.late_fraction,
            late_by_seconds=args.late_by_seconds,
        )
        rows = rows_from_records(synthetic_records(source, args.synthetic, options))
        total = args.synthetic
    value_schema = None
    if args.schema is not None:
        if not args.schema.is_file():
            raise ConfigurationError(f"--schema {args.schema}: no such file")
        value_schema = args.schema.read_text()
    result = produce(
        kafka,
        registry,
        topic,
        rows,
        total=total,
        rate=args.rate,
        acks=args.acks,
        partitions=args.partitions,
        value_schema=value_schema,
        show_progress=not args.no_progress,
        stop_on_interrupt=True,
    )
    for message in result.errors:
        print(f"failed: {message}", file=sys.stderr)
    summary = f"{topic}: {result.sent} sent, {result.failed} failed"
    if result.interrupted:
        # 130 = 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C
        print(f"{summary}, interrupted (Ctrl-C stopped reading rows)")
        return 130
    print(summary)
    return 1 if result.failed else 0


def _add_demo_parser(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="start the embedded stack, produce, materialize everything, summarize")
    demo.add_argument("--rides", type=int, default=5000, help="synthetic rides (and pickups) to produce (default 5000)")
    demo.add_argument("--csv", type=Path, help="produce rides from this TLC CSV instead (pickups at their dropoffs)")
    demo.add_argument("--seed", type=int, default=42)
    demo.add_argument("--dir", type=Path, default=None, help="embedded stack directory (default .stack/)")
    demo.add_argument(
        "--lakehouse-dir",
        default=None,
        help="Delta tables: a path or a URI (default LAKEHOUSE_DIR or .lakehouse/; with --object-store the store's "
        "bucket, s3a://lakehouse)",
    )
    demo.add_argument(
        "--object-store",
        action="store_true",
        help="the lakehouse on the stack's S3-compatible object store (`stack up --object-store`)",
    )
    demo.add_argument(
        "--secure",
        action="store_true",
        help="Kafka over SASL_SSL and the registry over HTTPS with basic auth (`stack up --secure`; a new stack "
        "directory, e.g. --dir .stack-secure, when .stack/ was made without it)",
    )
    demo.add_argument("--output-dir", type=Path, default=Path("demo-output"), help="where the chart PNG goes")
    demo.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from streaming_pipeline.devstack.demo import DemoOptions, run_demo
    from streaming_pipeline.devstack.embedded.stack import default_stack_dir

    return run_demo(
        DemoOptions(
            stack_dir=args.dir or default_stack_dir(),
            lakehouse_dir=args.lakehouse_dir,
            object_store=args.object_store,
            secure=args.secure,
            output_dir=args.output_dir,
            rides=args.rides,
            csv=args.csv,
            seed=args.seed,
        )
    )


def _add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="the benchmarks, a subcommand each (`bench` alone: throughput)",
        description="Each benchmark starts a private embedded stack, or measures on the one in --stack-dir, and "
        "compares its figures with a reference measured in the same run. `bench` alone is `bench throughput`. The "
        "flags that chose a benchmark before (`bench --live ...`) still work, deprecated, until 0.11.0.",
    )
    benches = bench.add_subparsers(dest="bench_command")
    _add_throughput_parser(benches)
    _add_live_parser(benches)
    _add_windows_parser(benches)
    _add_soak_parser(benches)
    _add_run_cost_parser(benches)


def _add_bench_stack_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stack-dir",
        type=Path,
        help="measure on the embedded stack in this directory (started if it is not running, left running; its "
        "topics must hold no record) instead of a private stack started and stopped for the bench",
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")


def _add_throughput_parser(benches: argparse._SubParsersAction) -> None:
    throughput = benches.add_parser(
        "throughput", help="measure throughput beside a plain Spark job and the raw consume rate (the default)"
    )
    throughput.add_argument(
        "--rides",
        type=int,
        nargs="+",
        default=[300_000, 1_000_000],
        help="the sizes to measure, in synthetic rides on one growing topic (default 300000 1000000)",
    )
    throughput.add_argument("--rounds", type=int, default=2, help="timed rounds per job and size (default 2)")
    _add_bench_stack_flags(throughput)
    throughput.set_defaults(handler=_run_throughput_bench)


def _run_throughput_bench(args: argparse.Namespace) -> int:
    from streaming_pipeline.devstack.bench.throughput import run_bench

    run_bench(args.rides, args.json, rounds=args.rounds, stack_dir=args.stack_dir)
    return 0


def _add_live_parser(benches: argparse._SubParsersAction) -> None:
    live = benches.add_parser("live", help="measure produce -> visible through `dagster dev`, under a steady load")
    live.add_argument(
        "--mode",
        choices=["triggered", "continuous", "both"],
        default="both",
        help="the LIVE_MODE to measure; both: triggered, then continuous on the same lakehouse (default)",
    )
    live.add_argument(
        "--floor",
        action="store_true",
        help="then measure the latency floor on a fresh stack of its own (on the --stack-dir stack when given): a "
        "bare Kafka -> Delta query and a chained count on the engine, with the same load (rides only) and probes, "
        "no Dagster",
    )
    live.add_argument("--rate", type=int, default=1000, help="rides per second of the load (default 1000)")
    live.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure this many times, each on a fresh stack, and print the median and range of the figures "
        "(default 1)",
    )
    live.add_argument(
        "--seconds",
        type=float,
        default=180.0,
        help="seconds of load with probes per mode, after the warm-up (default 180)",
    )
    live.add_argument(
        "--probe-every",
        type=float,
        default=6.0,
        help="mean seconds between probe rides, each at a random moment (default 6)",
    )
    live.add_argument(
        "--warmup",
        type=float,
        default=60.0,
        help="seconds of the same load before the first probe, so that every mode and the floor are measured in "
        "steady state (default 60)",
    )
    live.add_argument(
        "--idle-seconds",
        type=float,
        default=60.0,
        help="seconds of idle CPU measured after the catch-up, with no commit in them (a window a commit interrupts "
        "is measured again)",
    )
    live.add_argument(
        "--quiet-seconds",
        type=float,
        default=150.0,
        help="the idle window starts once no table has had a commit for this long (default 150: longer than the "
        "continuous mode's downstream trigger, 2 minutes)",
    )
    live.add_argument(
        "--pickup-every",
        type=int,
        default=10,
        help="one pickup event per this many rides of the load, at its dropoff zone and time, on the pickups topic "
        "(the ride-pickup join's other side); 0 for none (default 10)",
    )
    live.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pipeline setting for dagster dev, e.g. CONTINUOUS_RECONCILE_SECONDS=60 (repeatable; recorded with "
        "the figures). Without it the bench runs the defaults, whatever the shell exports",
    )
    live.add_argument(
        "--engine-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting of the bench's own engine on top of its profile, e.g. spark.master=local[4] "
        "(repeatable; recorded with the figures; the floor's engine has them too)",
    )
    _add_bench_stack_flags(live)
    live.set_defaults(handler=_run_live_bench)


def _run_live_bench(args: argparse.Namespace) -> int:
    from streaming_pipeline.devstack.bench.live import run_live_bench

    modes = ("triggered", "continuous") if args.mode == "both" else (args.mode,)
    run_live_bench(
        modes,
        args.json,
        repeat=args.repeat,
        rate=args.rate,
        seconds=args.seconds,
        probe_every=args.probe_every,
        warmup_seconds=args.warmup,
        idle_seconds=args.idle_seconds,
        pickup_every=args.pickup_every,
        quiet_seconds=args.quiet_seconds,
        env=args.env,
        engine_conf=args.engine_conf,
        floor=args.floor,
        stack_dir=args.stack_dir,
    )
    return 0


def _add_windows_parser(benches: argparse._SubParsersAction) -> None:
    windows = benches.add_parser(
        "windows", help="measure a windows run (stream + reconcile) of --new-rides rides after each --history size"
    )
    windows.add_argument(
        "--history",
        type=int,
        nargs="+",
        default=[10_000, 1_000_000],
        help="rides already in raw_rides (default 10000 1000000)",
    )
    windows.add_argument("--new-rides", type=int, default=1_000, help="new rides per timed run (default 1000)")
    windows.add_argument("--runs", type=int, default=5, help="timed runs per history size (default 5)")
    _add_bench_stack_flags(windows)
    windows.set_defaults(handler=_run_windows_bench)


def _run_windows_bench(args: argparse.Namespace) -> int:
    from streaming_pipeline.devstack.bench.windows import run_windows_bench

    run_windows_bench(tuple(args.history), args.new_rides, args.runs, args.json, stack_dir=args.stack_dir)
    return 0


def _add_soak_parser(benches: argparse._SubParsersAction) -> None:
    soak = benches.add_parser(
        "soak",
        help="drive many small live runs and record tick time, run time, files, count(*) time and DAGSTER_HOME size",
    )
    soak.add_argument("--commits", type=int, default=1_000, help="micro-batch commits per bronze table (default 1000)")
    soak.add_argument(
        "--records-per-round",
        type=int,
        default=20,
        help="records per topic and live run, one commit each (default 20)",
    )
    soak.add_argument("--sample-every", type=int, default=5, help="rounds between samples (default 5)")
    soak.add_argument("--maintain-every", type=int, default=10, help="rounds between maintenance passes (default 10)")
    soak.add_argument(
        "--chart", type=Path, default=Path("docs/soak.png"), help="the chart to write (default docs/soak.png)"
    )
    _add_bench_stack_flags(soak)
    soak.set_defaults(handler=_run_soak_bench)


def _run_soak_bench(args: argparse.Namespace) -> int:
    from streaming_pipeline.devstack.bench.soak import run_soak_bench

    run_soak_bench(
        args.commits,
        args.json,
        args.chart,
        records_per_round=args.records_per_round,
        sample_every=args.sample_every,
        maintain_every=args.maintain_every,
        stack_dir=args.stack_dir,
    )
    return 0


def _add_run_cost_parser(benches: argparse._SubParsersAction) -> None:
    run = benches.add_parser(
        "run",
        help="measure what a whole run of every asset and check costs on the warm engine (wall, engine CPU, by step), "
        "after --rides new rides each, --runs times",
    )
    run.add_argument("--rides", type=int, default=200, help="new rides before each run (default 200)")
    run.add_argument("--runs", type=int, default=5, help="timed runs (default 5)")
    run.add_argument(
        "--baseline-ref",
        metavar="REF",
        help="measure a git worktree of REF too, on the same rides in the same run, and print the ratios",
    )
    run.add_argument(
        "--object-store",
        action="store_true",
        help="measure each run with the lakehouse on the stack's S3-compatible object store too, beside the same run "
        "on the local disk, and print the ratio",
    )
    _add_bench_stack_flags(run)
    run.set_defaults(handler=_run_cost_bench)


def _run_cost_bench(args: argparse.Namespace) -> int:
    from streaming_pipeline.devstack.bench.run_cost import run_cost_bench

    run_cost_bench(
        args.rides,
        args.runs,
        args.json,
        baseline_ref=args.baseline_ref,
        stack_dir=args.stack_dir,
        object_store=args.object_store,
    )
    return 0


#: The flags that chose a benchmark before `bench` had subcommands: aliases of them, deprecated, until 0.11.0.
BENCH_FLAGS = {"--live": "live", "--windows": "windows", "--soak": "soak", "--run": "run"}


def bench_aliases(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` with a benchmark named as `bench`'s subcommand: `bench --live ...` as `bench live ...` (likewise the
    other BENCH_FLAGS, wherever it stands among the options), and `bench` without one as `bench throughput`; and for
    a deprecated flag, the line that names its new form."""
    if argv[:1] != ["bench"] or (len(argv) > 1 and not argv[1].startswith("-")) or argv[1:2] in (["-h"], ["--help"]):
        return argv, None
    options = argv[1:]
    flag = next((option for option in options if option in BENCH_FLAGS), None)
    if flag is None:
        return ["bench", "throughput", *options], None
    options.remove(flag)
    rewritten = ["bench", BENCH_FLAGS[flag], *options]
    return rewritten, f"`bench {flag}` is deprecated (gone in 0.11.0); use: streaming-pipeline {shlex.join(rewritten)}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (`argv`, else sys.argv's), its deprecated bench flags read as subcommands (`bench_aliases`)."""
    arguments, deprecated = bench_aliases(list(sys.argv[1:] if argv is None else argv))
    if deprecated:
        print(f"warning: {deprecated}", file=sys.stderr)
    return build_parser().parse_args(arguments)


def _add_sql_parser(subparsers: argparse._SubParsersAction) -> None:
    sql = subparsers.add_parser(
        "sql",
        help="run Spark SQL over the lakehouse: every table by its catalog name (gold.vendor_counts) or its asset's",
        description='Runs on SPARK_REMOTE when set (`eval "$(streaming-pipeline stack env)"`), else an in-process '
        "Spark. Tables: every asset of the lakehouse that exists, by its name in the catalog (bronze.raw_rides, "
        "silver.rides_enriched, gold.vendor_counts) or by its asset's (raw_rides, vendor_counts).",
    )
    sql.add_argument("query", help='e.g. "SELECT vendor_id, trip_count FROM gold.vendor_counts"')
    sql.add_argument("--format", choices=["table", "csv", "json"], default="table", help="table (default), csv, json")
    sql.set_defaults(handler=_run_sql)


def _run_sql(args: argparse.Namespace) -> int:
    # pyspark logs each failed query's context as a long JSON line; the error line below says what went wrong.
    import dagster as dg
    from pyspark.logger import PySparkLogger

    from streaming_pipeline.definitions import defs
    from streaming_pipeline.lakehouse.settings import PipelineSettings
    from streaming_pipeline.lakehouse.sql import format_rows, run_sql
    from streaming_pipeline.resources.from_settings import build_resources

    PySparkLogger.getLogger("SQLQueryContextLogger").disabled = True
    resources = build_resources(PipelineSettings.from_env())
    lakehouse = resources["lakehouse"]
    with warnings.catch_warnings():
        # Attaching the jobs to the sensors, Dagster 1.13 passes each sensor's `owners` on and warns that the
        # parameter is in beta, though no sensor here has owners: not the user's concern.
        warnings.simplefilter("ignore", dg.BetaWarning)
        graph = defs.resolve_asset_graph()
    names = [key.to_user_string() for key in graph.get_all_asset_keys()]
    catalog_names = {  # the `dagster/table_name` each table's asset declares
        key.to_user_string(): str(graph.get(key).metadata["dagster/table_name"])
        for key in graph.get_all_asset_keys()
        if "dagster/table_name" in graph.get(key).metadata
    }
    spark = resources["spark"].get_session()
    try:
        table_paths = {name: lakehouse.table_path(name) for name in names}
        columns, rows = run_sql(spark, table_paths, args.query, catalog_names)
    finally:
        spark.stop()
    sys.stdout.write(format_rows(columns, rows, args.format))
    return 0


def _add_replay_parser(subparsers: argparse._SubParsersAction) -> None:
    replay = subparsers.add_parser(
        "replay",
        help="rebuild a bronze table, and every table downstream of it, from Kafka exactly once",
        description="Moves the checkpoints aside, empties the tables in one Delta commit each (the old content stays "
        "readable with VERSION AS OF) and runs the bronze asset and everything downstream once. Uses the same "
        "environment as the definitions (KAFKA_BOOTSTRAP_SERVERS, LAKEHOUSE_DIR, SPARK_REMOTE, DAGSTER_HOME, ...). "
        "The way out when a table and its checkpoint disagree, or a topic's offsets went backwards.",
    )
    replay.add_argument("asset", help="the bronze table to rebuild")
    replay.add_argument(
        "--project",
        metavar="DIR",
        type=Path,
        help="a dg project whose tables to rebuild (a directory in it; its package installed): its sources, streaming "
        "tables and resources (default: this package's own project)",
    )
    start = replay.add_mutually_exclusive_group()
    start.add_argument(
        "--from",
        dest="from_",
        choices=["earliest"],
        default="earliest",
        help="start at the earliest offsets the topic still keeps (default)",
    )
    start.add_argument(
        "--from-time", metavar="T", help="start at the first record at or after T (ISO-8601, UTC if no zone)"
    )
    start.add_argument("--from-offsets", metavar="P:O,...", help="start at these offsets (other partitions: earliest)")
    replay.set_defaults(handler=_run_replay)


def _run_replay(args: argparse.Namespace) -> int:
    import dagster as dg

    from streaming_pipeline.components.kafka_delta_source.component import declared_sources
    from streaming_pipeline.definitions import build_definitions
    from streaming_pipeline.devstack.replay import ReplayStart, replay
    from streaming_pipeline.lakehouse import settings

    start = ReplayStart.parse(from_time=args.from_time, from_offsets=args.from_offsets)
    if args.project is None:
        defs, sources = build_definitions(), project_sources()
    else:
        tree = dg.ComponentTree.for_project(args.project.resolve())
        defs, sources = tree.build_defs(), declared_sources(tree)
    instance = dg.DagsterInstance.get() if settings.dagster_home() else dg.DagsterInstance.ephemeral()
    report = replay(
        args.asset, start, defs=defs, sources=sources, instance=instance, progress=lambda m: print(m, flush=True)
    )
    print(report.summary())
    return 0


def _add_maintain_parser(subparsers: argparse._SubParsersAction) -> None:
    from streaming_pipeline.devstack.maintain import TableNames

    maintain = subparsers.add_parser(
        "maintain",
        help="OPTIMIZE and VACUUM lakehouse tables now, as the daily table_maintenance_job does",
        description="Runs the maintenance job's ops for the tables named (every table without any) on the Dagster "
        "instance of DAGSTER_HOME (an ephemeral one when unset), one line per table. Refuses while a run that writes "
        "one of them is queued or running. VACUUM keeps DELTA_VACUUM_RETENTION_HOURS (168, the minimum) of history.",
    )
    maintain.add_argument("tables", nargs="*", action=TableNames, metavar="TABLE", help="a lakehouse table")
    maintain.add_argument(
        "--retain-hours",
        type=float,
        metavar="H",
        help="hours of history VACUUM keeps, at least 168 (default: DELTA_VACUUM_RETENTION_HOURS or 168)",
    )
    maintain.set_defaults(handler=_run_maintain)


def _run_maintain(args: argparse.Namespace) -> int:
    import dagster as dg

    from streaming_pipeline.definitions import build_definitions
    from streaming_pipeline.devstack.maintain import maintain
    from streaming_pipeline.lakehouse import settings
    from streaming_pipeline.lakehouse.engine.maintenance import check_retention

    if args.retain_hours is not None:
        check_retention(args.retain_hours, what="--retain-hours")  # before anything else is loaded or touched
    defs = build_definitions()
    instance = dg.DagsterInstance.get() if settings.dagster_home() else dg.DagsterInstance.ephemeral()
    maintain(args.tables, defs=defs, instance=instance, retain_hours=args.retain_hours, progress=print)
    return 0


def _add_jars_parser(subparsers: argparse._SubParsersAction) -> None:
    jars = subparsers.add_parser(
        "jars",
        help="resolve the Java artifacts (Kafka broker, Spark's Delta/Kafka/Avro packages) once, for offline use, "
        "and build the engine's log store for local disks",
        description="Every Java artifact comes from Maven Central (or $STREAMING_PIPELINE_MAVEN_REPOSITORY) through "
        "Apache Ivy into the project cache ($STREAMING_PIPELINE_CACHE_DIR or ~/.cache/streaming-pipeline).",
    )
    commands = jars.add_subparsers(dest="jars_command", required=True)
    from streaming_pipeline.lakehouse.engine.jars import artifact_sets

    sets = list(artifact_sets())
    fetch = commands.add_parser("fetch", help="resolve artifact sets now (later runs work offline)")

    def artifact_set(name: str) -> str:
        if name not in sets:
            raise argparse.ArgumentTypeError(f"{name!r} is no artifact set; choose from {', '.join(sets)}")
        return name

    # A type, not choices: argparse checks an empty `*` list against choices and refuses it (Python 3.11).
    fetch.add_argument(
        "sets",
        nargs="*",
        type=artifact_set,
        metavar="SET",
        help=f"the sets to resolve: {', '.join(sets)} (default: all)",
    )
    fetch.add_argument("--force", action="store_true", help="resolve again even when the cache is complete")
    path = commands.add_parser("path", help="print the classpath of one artifact set")
    path.add_argument("set", choices=sets)
    jars.set_defaults(handler=_run_jars)


def _run_jars(args: argparse.Namespace) -> int:
    from streaming_pipeline.lakehouse.engine import jars

    sets = jars.artifact_sets()
    if args.jars_command == "path":
        print(":".join(str(jar) for jar in jars.resolve(sets[args.set])))
        return 0
    resolved = {}
    for name in args.sets or sets:
        artifacts = sets[name]
        resolved[name] = jars.resolve(artifacts, force=args.force)
        print(f"{artifacts.name}: {len(resolved[name])} jars in {jars.set_dir(artifacts)}")
    if "spark" in resolved:
        from streaming_pipeline.lakehouse.engine.log_store import LOG_STORE_CLASS, log_store_jar

        store_jar = log_store_jar(resolved["spark"], jars.pyspark_home() / "jars")
        print(f"{LOG_STORE_CLASS}: {store_jar or 'not built (no javac; Delta keeps its own log store)'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from streaming_pipeline.devstack.embedded.stack_cli import add_stack_parser

    parser = argparse.ArgumentParser(prog="streaming-pipeline", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_stack_parser(subparsers)
    _add_jars_parser(subparsers)
    _add_sql_parser(subparsers)
    _add_replay_parser(subparsers)
    _add_maintain_parser(subparsers)
    _add_produce_parser(subparsers)
    _add_demo_parser(subparsers)
    _add_bench_parser(subparsers)
    return parser


#: The commands that start the embedded servers, which need the `stack` extra (the schema registry is FastAPI).
NEEDS_STACK_EXTRA = ("stack", "demo", "bench")


def _check_stack_installed(command: str) -> None:
    import importlib.util

    missing = [name for name in ("fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if command in NEEDS_STACK_EXTRA and missing:
        raise ConfigurationError(
            f"`streaming-pipeline {command}` runs the development stack, which is not installed here "
            f"(no {', '.join(missing)}): pip install 'streaming-pipeline[stack]' -c constraints.txt"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def run() -> int:
        _check_stack_installed(args.command)
        return int(args.handler(args) or 0)

    return exit_code(run)


if __name__ == "__main__":
    sys.exit(main())
