"""`streaming-pipeline stack up|down|status|env [--dir DIR]`.

Wiring into the main CLI::

    subparsers = parser.add_subparsers(dest="command")
    add_stack_parser(subparsers)
    args = parser.parse_args(argv)
    return args.handler(args)          # run_stack_command; also set as args.func

Also runnable alone: ``python -m streaming_pipeline.devstack.embedded.stack_cli stack up``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from streaming_pipeline.devstack.embedded.stack import (
    STACK_DIR_ENV,
    EmbeddedStack,
    StackInfo,
    StackStatus,
    default_stack_dir,
)
from streaming_pipeline.devstack.errors import exit_code
from streaming_pipeline.lakehouse.settings import LIVE_MODES


def add_stack_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``stack`` (with ``up``, ``down``, ``status``, ``env`` and ``--dir``) on ``subparsers``."""
    dir_help = f"stack directory (default: ${STACK_DIR_ENV} or .stack/ in the current directory)"
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "stack",
        help="run the embedded Kafka broker, schema registry and Spark Connect server in the background",
        description="Start, stop and inspect the embedded stack: a Kafka broker (KRaft), the schema registry and "
        "a Spark Connect server (the warm Spark engine), running in the background with their data and logs "
        "under one directory, plus the Dagster instance directory (DAGSTER_HOME) that goes with them.",
    )
    parser.add_argument("--dir", dest="stack_dir", type=Path, default=None, help=dir_help)
    commands = parser.add_subparsers(dest="stack_command", metavar="{up,down,status,env}")
    commands.required = True

    def sub(name: str, help_text: str) -> argparse.ArgumentParser:
        child: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=help_text)
        # SUPPRESS: `stack --dir X up` and `stack up --dir X` both work.
        child.add_argument("--dir", dest="stack_dir", type=Path, default=argparse.SUPPRESS, help=dir_help)
        return child

    up = sub("up", "start every component that is not running (reusing ports and data) and print the addresses")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for all to answer (default 180)")
    up.add_argument("--no-spark", action="store_true", help="leave out the Spark Connect server (Kafka only)")
    up.add_argument(
        "--free-ports",
        action="store_true",
        help="use free ports instead of the standard 9092/9093/8081/15002 for a stack started the first time",
    )
    up.add_argument(
        "--live-mode",
        choices=LIVE_MODES,
        default=None,
        help="what `stack env` exports as LIVE_MODE for `dagster dev`: triggered (offset sensors start a run when "
        "records wait; the default for a new stack) or continuous (one long-running run keeps every query "
        "streaming); recorded in stack.json, so later `stack up` keeps it",
    )
    up.add_argument(
        "--dagster-postgres",
        action="store_true",
        help="keep Dagster's run, event-log and schedule storage in a PostgreSQL server started with the stack "
        "(from Debian's `postgresql` package; listens on 127.0.0.1, standard port 5432) instead of SQLite files; "
        "recorded in stack.json, so later `stack up` keeps it",
    )
    up.add_argument(
        "--object-store",
        action="store_true",
        help="keep the lakehouse on an S3-compatible object store started with the stack (s3proxy from Maven "
        "Central, on 127.0.0.1, standard port 9000, data under the stack directory, keys of its own): `stack env` "
        "exports LAKEHOUSE_DIR=s3a://lakehouse and the AWS_* variables S3 clients read; recorded in stack.json, so "
        "later `stack up` keeps it",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="secure Kafka and the registry as a managed service is: the broker takes SASL_SSL only (SCRAM-SHA-512 "
        "users, TLS with a CA of the stack's own, client certificates required) and the registry HTTPS with basic "
        "auth; `stack env` exports the protocol, mechanism, users, passwords and files clients need (secrets "
        "under the stack's secure/, mode 0600). Chosen when the stack's Kafka is first made; recorded in stack.json",
    )
    up.add_argument(
        "--kafka-brokers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="run Kafka as N nodes (KRaft, each a broker and a voter of the controller quorum): topics get N "
        "replicas, writes need 2 in sync, producers wait for them. Chosen when the stack's Kafka is first made "
        "(1 by default); recorded in stack.json",
    )
    up.add_argument(
        "--spark-workers",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help="run a Spark standalone master and N workers (pyspark's own distribution, on 127.0.0.1) and make the "
        "Spark Connect server the driver of that cluster, so executors run in JVMs of their own; each worker gets "
        "its share of the cores and memory. 0 means a local driver (the default for a new stack); recorded in "
        "stack.json, so later `stack up` keeps it",
    )
    up.add_argument(
        "--spark-worker-cores",
        type=_positive_int,
        default=None,
        metavar="C",
        help="cores of each Spark worker (default: the machine's cores split among the workers, at least 1)",
    )
    up.add_argument(
        "--spark-worker-memory",
        default=None,
        metavar="SIZE",
        help="memory of each Spark worker and of its executor, e.g. 1g or 1536m (default: a quarter of the "
        "machine's memory split among the workers, between 1g and 2g each)",
    )
    down = sub("down", "stop every component (the data is kept)")
    down.add_argument("--timeout", type=float, default=30.0, help="seconds before a component is killed (default 30)")
    status = sub("status", "show whether each component runs, its pid, address and log file")
    status.add_argument("--json", action="store_true", help="print the status as one JSON object")
    sub("env", 'print export lines for the running stack: eval "$(streaming-pipeline stack env)"')
    parser.set_defaults(handler=run_stack_command, func=run_stack_command)
    return parser


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected 1 or more, got 0")
    return value


def _progress(message: str) -> None:
    print(message, flush=True)


def _print_info(info: StackInfo, stack: EmbeddedStack) -> None:
    state = "already running" if info.already_running else "running"
    dir_arg = "" if stack.directory == default_stack_dir().resolve() else f" --dir {stack.directory}"
    print(f"Embedded stack {state} in {stack.directory}")
    print(f"  KAFKA_BOOTSTRAP_SERVERS={info.bootstrap_servers}")
    print(f"  SCHEMA_REGISTRY_URL={info.schema_registry_url}")
    if info.spark_remote:
        print(f"  SPARK_REMOTE={info.spark_remote}")
    if info.dagster_home:
        print(f"  DAGSTER_HOME={info.dagster_home}")
    print(f"  LIVE_MODE={info.live_mode}")
    if info.secure_env:
        print(
            f"  secured: Kafka SASL_SSL ({info.secure_env['KAFKA_SASL_MECHANISM']}, user "
            f"{info.secure_env['KAFKA_SASL_USERNAME']}), the registry over HTTPS with basic auth, client "
            f"certificates; CA {info.secure_env['KAFKA_SSL_CA_LOCATION']} (passwords: `stack env`)"
        )
    if len(info.kafka_node_pids) > 1:
        print(f"  Kafka: {len(info.kafka_node_pids)} nodes, topics replicated to each, 2 in sync for a write")
    if info.spark_master_url:
        print(
            f"  Spark master: {info.spark_master_url} ({info.spark_workers} worker(s) alive; `stack status` shows them)"
        )
    if info.lakehouse_dir:
        print(
            f"  LAKEHOUSE_DIR={info.lakehouse_dir} on the object store {info.object_store_url} "
            f"(its keys: `stack env`, {stack.object_store_dir / 'credentials'})"
        )
    if info.postgres_url:
        print(f"  Dagster storage: PostgreSQL {info.postgres_url} (password file {stack.postgres_dir / 'pgpass'})")
    print(f"  logs: {stack.logs_dir}")
    print(f'Export them in this shell with: eval "$(streaming-pipeline stack env{dir_arg})"')


def _print_status(stack: EmbeddedStack, as_json: bool) -> None:
    status = stack.status()
    if as_json:
        print(json.dumps(status.as_json(), indent=2))
        return
    rows = [("COMPONENT", "STATE", "PID", "ADDRESS", "LOG")]
    for component in status.components:
        rows.append(
            (
                component.name,
                ("running" if component.running else "stopped") if component.enabled else "disabled",
                str(component.pid) if component.pid else "-",
                component.address or "-",
                str(component.log_file),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    print(f"Embedded stack in {status.directory}")
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1])
    _print_spark_cluster(status)


def _print_spark_cluster(status: StackStatus) -> None:
    """The standalone cluster the engine drives: master URL, alive workers and their cores."""
    cluster = status.spark_cluster
    if cluster is None:
        return
    if cluster.master_url is None:
        print(f"Spark standalone cluster: stopped ({cluster.workers_wanted} worker(s) recorded)")
        return
    print(f"Spark master: {cluster.master_url} (web UI {cluster.webui_url})")
    print(f"Spark workers: {cluster.alive_workers} of {cluster.workers_wanted} alive, {cluster.cores} core(s) in all")
    for worker in cluster.alive:
        print(
            f"  {worker.address}  {worker.cores} core(s) ({worker.cores_used} in use), {worker.memory_mb} MiB  "
            f"{worker.webui_url}"
        )


def run_stack_command(args: argparse.Namespace) -> int:
    """Run ``stack <command>``; returns the exit code (errors: one ``error:`` line on stderr, code 1)."""
    commands = {"up": _up, "down": _down, "status": _status, "env": _env}
    command = commands.get(getattr(args, "stack_command", None) or "")
    if command is None:
        print("error: choose a stack command: up, down, status or env", file=sys.stderr)
        return 1
    directory = getattr(args, "stack_dir", None) or default_stack_dir()
    return exit_code(lambda: command(args, directory), first_line_only=True)


def _up(args: argparse.Namespace, directory: Path) -> int:
    stack = EmbeddedStack(
        directory,
        prefer_standard_ports=not args.free_ports,
        spark=not args.no_spark,
        dagster_postgres=args.dagster_postgres,
        object_store=args.object_store,
        spark_workers=args.spark_workers,
        spark_worker_cores=args.spark_worker_cores,
        spark_worker_memory=args.spark_worker_memory,
        live_mode=args.live_mode,
        secure=args.secure,
        kafka_brokers=args.kafka_brokers,
    )
    if args.no_spark and args.spark_workers:
        print("error: --spark-workers needs the Spark Connect server; leave out --no-spark", file=sys.stderr)
        return 1
    info = stack.up(timeout=args.timeout, progress=_progress)
    _print_info(info, stack)
    return 0


def _down(args: argparse.Namespace, directory: Path) -> int:
    stack = EmbeddedStack(directory)
    if stack.down(timeout=args.timeout, progress=_progress):
        print(f"Embedded stack stopped (data kept in {stack.directory})")
    else:
        print(f"Embedded stack in {stack.directory} was not running")
    return 0


def _status(args: argparse.Namespace, directory: Path) -> int:
    _print_status(EmbeddedStack(directory), args.json)
    return 0


def _env(_args: argparse.Namespace, directory: Path) -> int:
    for line in EmbeddedStack(directory).env_lines():
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streaming-pipeline")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_stack_parser(subparsers)
    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
