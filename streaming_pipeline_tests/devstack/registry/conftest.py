"""Fixtures: the registry started as a real subprocess on a free port (the embedded stack's own
`SchemaRegistryProcess`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from streaming_pipeline.devstack.embedded.registry_process import SchemaRegistryProcess

REPO_ROOT = Path(__file__).resolve().parents[3]


class RegistryProcess(SchemaRegistryProcess):
    """The registry process, with what its tests read: its log and a client."""

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def client(self) -> SchemaRegistryClient:
        """A new client (fresh caches, so every call reaches the server)."""
        return SchemaRegistryClient({"url": self.url})

    def stop_gracefully(self) -> int:
        """SIGTERM, wait, and return the exit code; AssertionError naming the log when it had to be killed."""
        if self.stop(timeout=10):
            raise AssertionError(f"registry did not stop on SIGTERM; log:\n{self.log()}")
        assert self.returncode is not None
        return self.returncode


def start_registry(data_dir: Path, log_dir: Path, extra_args: Sequence[str] = ()) -> RegistryProcess:
    """A registry on ``data_dir``, its log in ``log_dir``, ready to answer (StackError naming the log if not)."""
    return RegistryProcess(data_dir, log_dir=log_dir, extra_args=extra_args).start(timeout=20)


@pytest.fixture
def registry_factory(tmp_path: Path) -> Iterator[Callable[[Path], RegistryProcess]]:
    """Start registries on given data directories; all are stopped at the end of the test."""
    started: list[RegistryProcess] = []

    def factory(data_dir: Path) -> RegistryProcess:
        registry = start_registry(data_dir, tmp_path / "logs" / f"{len(started)}")
        started.append(registry)
        return registry

    yield factory
    for registry in started:
        registry.stop_gracefully()


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
    registry.stop_gracefully()


@pytest.fixture
def http(shared_registry: RegistryProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=shared_registry.url, timeout=10.0, trust_env=False) as client:
        yield client
