"""Fixtures: the registry started as a real subprocess on a free port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from streaming_pipeline.embedded.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 20.0


@dataclass
class RegistryProcess:
    process: subprocess.Popen
    url: str
    data_dir: Path
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int:
        """SIGTERM, wait, and return the exit code (killing it if it does not stop)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
                raise AssertionError(f"registry did not stop on SIGTERM; log:\n{self.log()}") from None
        return int(self.process.returncode)

    def client(self) -> SchemaRegistryClient:
        """A new client (fresh caches, so every call reaches the server)."""
        return SchemaRegistryClient({"url": self.url})


def start_registry(data_dir: Path, log_dir: Path, extra_args: Sequence[str] = ()) -> RegistryProcess:
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"registry-{port}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streaming_pipeline.registry",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                *extra_args,
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    registry = RegistryProcess(process=process, url=f"http://127.0.0.1:{port}", data_dir=data_dir, log_path=log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with httpx.Client(timeout=1.0, trust_env=False) as http:
        while True:
            if process.poll() is not None:
                raise AssertionError(f"registry exited with {process.returncode}; log:\n{registry.log()}")
            try:
                if http.get(registry.url + "/subjects").status_code == 200:
                    return registry
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                registry.stop()
                raise AssertionError(f"registry not ready after {STARTUP_TIMEOUT_S}s; log:\n{registry.log()}")
            time.sleep(0.05)


@pytest.fixture
def registry_factory(tmp_path: Path) -> Iterator[Callable[[Path], RegistryProcess]]:
    """Start registries on given data directories; all are stopped at the end of the test."""
    started: list[RegistryProcess] = []

    def factory(data_dir: Path) -> RegistryProcess:
        registry = start_registry(data_dir, tmp_path / "logs")
        started.append(registry)
        return registry

    yield factory
    for registry in started:
        registry.stop()


@pytest.fixture
def fresh_registry(registry_factory: Callable[[Path], RegistryProcess], tmp_path: Path) -> RegistryProcess:
    """A registry of its own, on an empty data directory (exact ids are predictable)."""
    return registry_factory(tmp_path / "data")


@pytest.fixture(scope="module")
def shared_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    """One registry for the tests of a module that use their own subjects."""
    base = tmp_path_factory.mktemp("shared-registry")
    registry = start_registry(base / "data", base / "logs")
    yield registry
    registry.stop()


@pytest.fixture
def http(shared_registry: RegistryProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=shared_registry.url, timeout=10.0, trust_env=False) as client:
        yield client
