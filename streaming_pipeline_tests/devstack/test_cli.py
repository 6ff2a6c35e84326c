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


def test_jars_fetch_takes_every_set_by_default_the_named_ones_else_and_refuses_an_unknown_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from streaming_pipeline.engine import jars

    resolved: list[str] = []

    def resolve(artifacts: jars.ArtifactSet, force: bool = False) -> list[object]:
        resolved.append(artifacts.name)
        return []

    monkeypatch.setattr(jars, "resolve", resolve)
    monkeypatch.setattr("streaming_pipeline.engine.log_store.log_store_jar", lambda *a: None)
    assert list(jars.artifact_sets()) == ["kafka", "spark", "object-store", "s3a", "metastore-jdbc"]
    every = [artifacts.name for artifacts in jars.artifact_sets().values()]
    assert cli.main(["jars", "fetch"]) == 0 and resolved == every
    resolved.clear()
    assert cli.main(["jars", "fetch", "s3a"]) == 0 and resolved == [jars.s3a_artifacts().name]
    with pytest.raises(SystemExit):
        cli.main(["jars", "fetch", "bogus"])
    assert (
        "'bogus' is no artifact set; choose from kafka, spark, object-store, s3a, metastore-jdbc"
        in capsys.readouterr().err
    )
