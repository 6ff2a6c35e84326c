"""Serve the schema registry: `python -m streaming_pipeline.devstack.registry --host H --port P --data-dir DIR`.

`--max-request-bytes N` caps request bodies (default 16 MiB); larger ones are answered 413. `--users-file F` asks
every request for basic auth of a 'user:password' line of F. `--tls-keystore F` serves HTTPS with the private key
and certificate chain in the PEM file F; `--tls-client-ca F` then asks every client for a certificate signed by the
CA in F (mutual TLS).

Ready once `GET /subjects` answers 200; SIGTERM or Ctrl-C stops it cleanly.
"""

from __future__ import annotations

import argparse
import copy
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

from streaming_pipeline.devstack.registry.app import DEFAULT_MAX_REQUEST_BYTES
from streaming_pipeline.devstack.registry.basic_auth import read_users

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
DEFAULT_DATA_DIR = "./.registry-data"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m streaming_pipeline.devstack.registry",
        description="A small Confluent-Schema-Registry-compatible server (Avro), persisting to a data directory.",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"interface to bind (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(DEFAULT_DATA_DIR),
        help=f"directory of the registry's SQLite database (default {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        help=f"largest request body accepted; larger ones get 413 (default {DEFAULT_MAX_REQUEST_BYTES})",
    )
    parser.add_argument("--users-file", type=Path, help="'user:password' lines: every request needs basic auth")
    parser.add_argument("--tls-keystore", type=Path, help="PEM file of the private key and certificate chain: HTTPS")
    parser.add_argument("--tls-client-ca", type=Path, help="PEM file of the CA that signs client certificates")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (default info; requests are logged to stderr)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"registry: --port {args.port} is not a TCP port (0-65535)", file=sys.stderr)
        return 2
    if args.max_request_bytes < 1:
        print(f"registry: --max-request-bytes {args.max_request_bytes} is not a positive size", file=sys.stderr)
        return 2

    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from streaming_pipeline.devstack.registry import create_app

    if args.tls_client_ca and not args.tls_keystore:
        print("registry: --tls-client-ca needs --tls-keystore (mutual TLS is over HTTPS)", file=sys.stderr)
        return 2
    try:
        users = read_users(args.users_file) if args.users_file else None
    except (OSError, ValueError) as exc:
        print(f"registry: cannot use --users-file: {exc}", file=sys.stderr)
        return 2
    try:
        app = create_app(args.data_dir, max_request_bytes=args.max_request_bytes, users=users)
    except OSError as exc:
        print(f"registry: cannot use data directory {args.data_dir}: {exc}", file=sys.stderr)
        return 2

    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    keystore = str(args.tls_keystore) if args.tls_keystore else None
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_config=log_config,
        log_level=args.log_level,
        ssl_certfile=keystore,
        ssl_keyfile=keystore,
        ssl_ca_certs=str(args.tls_client_ca) if args.tls_client_ca else None,
        ssl_cert_reqs=ssl.CERT_REQUIRED if args.tls_client_ca else ssl.CERT_NONE,
    )
    server = uvicorn.Server(config)
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal with the
    # handler found at start: make that an ordinary exit (0 for SIGTERM) instead of death by signal.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    server.run()
    return 0 if server.started else 1


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(0 if signum == signal.SIGTERM else 128 + signum)


if __name__ == "__main__":
    sys.exit(main())
