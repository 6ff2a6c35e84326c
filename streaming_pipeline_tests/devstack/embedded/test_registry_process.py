"""The schema registry process wrapper, against a stand-in with the same command line."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from streaming_pipeline.devstack.embedded.processes import pid_alive
from streaming_pipeline.devstack.embedded.registry_process import REGISTRY_MODULE, SchemaRegistryProcess
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline_tests.devstack.embedded.helpers import FAKE_REGISTRY_MODULE


def test_start_stop_with_stand_in(tmp_path: Path) -> None:
    registry = SchemaRegistryProcess(tmp_path / "registry", module=FAKE_REGISTRY_MODULE)
    assert registry.url == f"http://127.0.0.1:{registry.port}"
    assert registry.command()[1:3] == ["-m", FAKE_REGISTRY_MODULE]
    try:
        registry.start(timeout=30)
        pid = registry.pid
        assert pid and pid_alive(pid)
        with urllib.request.urlopen(f"{registry.url}/subjects", timeout=5) as response:
            assert json.load(response) == []
        assert registry.log_file == tmp_path / "registry" / "registry.log"
        assert "listening" in registry.log_file.read_text()
    finally:
        registry.stop(timeout=10)
    assert not pid_alive(pid)


def test_default_entry_point() -> None:
    command = SchemaRegistryProcess(Path("/tmp/x"), port=1234).command()
    assert command[1:] == ["-m", REGISTRY_MODULE, "--host", "127.0.0.1", "--port", "1234", "--data-dir", "/tmp/x"]


def test_start_failure_points_at_log(tmp_path: Path) -> None:
    data_dir = tmp_path / "registry"
    data_dir.mkdir()
    (data_dir / "FAIL").touch()
    registry = SchemaRegistryProcess(data_dir, module=FAKE_REGISTRY_MODULE, log_dir=tmp_path / "logs")
    with pytest.raises(StackError) as caught:
        registry.start(timeout=30)
    message = str(caught.value)
    assert str(tmp_path / "logs" / "registry.log") in message
    assert "exited during start-up with code 3" in message
    assert "refusing to start" in message
