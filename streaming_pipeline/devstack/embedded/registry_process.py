"""Run the project's schema registry (``python -m streaming_pipeline.devstack.registry``) as a background process."""

from __future__ import annotations

import base64
import functools
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

from streaming_pipeline.devstack.embedded.ports import LOOPBACK, free_port
from streaming_pipeline.devstack.embedded.processes import ManagedProcess, python_env_with_project
from streaming_pipeline.devstack.embedded.secure import REGISTRY_USER, SecureMaterial

REGISTRY_MODULE = "streaming_pipeline.devstack.registry"


def registry_answers(url: str, timeout: float = 1.0, secure: SecureMaterial | None = None) -> bool:
    """True when ``GET {url}/subjects`` answers 200 (as the secured stack's client, with ``secure``)."""
    request = urllib.request.Request(f"{url}/subjects")
    context = None
    if secure is not None:
        context = ssl.create_default_context(cafile=str(secure.ca_file))
        context.load_cert_chain(str(secure.client_keystore))
        user_info = f"{REGISTRY_USER}:{secure.passwords().registry}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(user_info).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class SchemaRegistryProcess(ManagedProcess):
    """``python -m streaming_pipeline.devstack.registry --host H --port P --data-dir DIR`` in the background; with
    ``secure``, over HTTPS with the stack's certificate, asking for basic auth and a client certificate."""

    title = "the schema registry"
    poll_seconds = 0.1
    cleanup_seconds = 5.0

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        host: str = LOOPBACK,
        *,
        log_dir: Path | None = None,
        module: str = REGISTRY_MODULE,
        extra_args: Sequence[str] = (),
        secure: SecureMaterial | None = None,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port: int = port if port is not None else free_port(host)
        self.log_dir = Path(log_dir).resolve() if log_dir else self.data_dir
        self.module = module
        self.extra_args = list(extra_args)  # more options of the registry's CLI, e.g. --max-request-bytes
        self.secure = secure

    @property
    def url(self) -> str:
        return f"{'https' if self.secure else 'http'}://{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "registry.log"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            self.module,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            *self._secure_args(),
            *self.extra_args,
        ]

    def _secure_args(self) -> list[str]:
        if self.secure is None:
            return []
        return [
            "--users-file",
            str(self.secure.registry_users_file),
            "--tls-keystore",
            str(self.secure.server_keystore),
            "--tls-client-ca",
            str(self.secure.ca_file),
        ]

    def start(self, timeout: float = 30.0) -> Self:
        """Start the registry and wait until ``GET /subjects`` answers 200 (StackError naming the log if not)."""
        if self.running:
            return self
        self._check_port_free(self.port)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._start_process(
            self.command(),
            env=python_env_with_project(),
            cwd=self.data_dir,
            label=f"schema registry ({self.module}) on {self.url}",
            timeout=timeout,
        )
        return self

    def _readiness_probe(self) -> Callable[[], bool]:
        return functools.partial(registry_answers, self.url, secure=self.secure)

    def _not_ready_in_time(self, timeout: float) -> str:
        return f"did not answer GET {self.url}/subjects within {timeout:.0f}s"

    def _described(self) -> tuple[object, ...]:
        return (self.url, self.data_dir)
