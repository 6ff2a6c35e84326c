"""The command line without the development stack installed: a clear error, not a traceback from a server."""

from __future__ import annotations

import importlib.util

import pytest

from streaming_pipeline.devstack import cli


@pytest.mark.parametrize("command", ["stack", "demo", "bench"])
def test_a_stack_command_without_the_stack_extra_names_the_extra(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    argv = {"stack": ["stack", "status"], "demo": ["demo"], "bench": ["bench"]}[command]
    assert cli.main(argv) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: `streaming-pipeline {command}` runs the development stack")
    assert "(no fastapi)" in error and "pip install 'streaming-pipeline[stack]'" in error
