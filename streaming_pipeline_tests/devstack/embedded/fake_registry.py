"""A stand-in for `python -m streaming_pipeline.devstack.registry` used to test the process wrappers.

Same command line (--host, --port, --data-dir); answers `GET /subjects` with `[]`.
`--fail` prints an error and exits 3 instead (to test start-up failures).
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if self.path.rstrip("/") == "/subjects":
            body = json.dumps([]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()
    if args.fail or (args.data_dir / "FAIL").exists():
        print("fake registry: refusing to start (asked to fail)", file=sys.stderr, flush=True)
        return 3
    args.data_dir.mkdir(parents=True, exist_ok=True)
    server = ThreadingHTTPServer((args.host, args.port), _Handler)
    print(f"fake registry listening on {args.host}:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
