"""The broker classpath: resolved once from Maven Central (Maven, or Ivy from pyspark), then cached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streaming_pipeline.embedded import jars


def _names(classpath: list[Path]) -> list[str]:
    return [p.name.split("__")[-1] for p in classpath]


def _check_broker_classpath(classpath: list[Path]) -> None:
    names = _names(classpath)
    assert all(p.is_file() for p in classpath)
    assert f"kafka_2.13-{jars.KAFKA_VERSION}.jar" in names
    assert f"kafka-clients-{jars.KAFKA_VERSION}.jar" in names
    # the logging backend Kafka's artifacts do not bring
    assert f"log4j-core-{jars.LOG4J_VERSION}.jar" in names
    assert f"log4j-slf4j2-impl-{jars.LOG4J_VERSION}.jar" in names
    slf4j = [n for n in names if n.startswith("slf4j-api-")]
    assert slf4j == [f"slf4j-api-{jars.SLF4J_VERSION}.jar"], slf4j


@pytest.mark.integration
def test_default_resolution_is_cached() -> None:
    classpath = jars.resolve_broker_classpath()
    _check_broker_classpath(classpath)
    cache_file = jars.kafka_cache_dir() / "classpath.txt"
    assert cache_file.is_file()
    assert [Path(line) for line in cache_file.read_text().split()] == classpath
    assert jars.resolve_broker_classpath(progress=None) == classpath


@pytest.mark.integration
def test_cache_dir_override_and_stale_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jars.CACHE_DIR_ENV, str(tmp_path / "cache"))
    directory = jars.kafka_cache_dir()
    assert directory == tmp_path / "cache" / f"kafka-{jars.KAFKA_VERSION}"
    # a cached classpath naming a jar that is gone is resolved again
    directory.mkdir(parents=True)
    (directory / "classpath.txt").write_text(str(tmp_path / "gone.jar") + "\n")
    (directory / "classpath.key").write_text(jars._fingerprint(jars.broker_coordinates()) + "\n")
    messages: list[str] = []
    classpath = jars.resolve_broker_classpath(progress=messages.append)
    _check_broker_classpath(classpath)
    assert any("Resolving" in m for m in messages)
    assert (directory / "classpath.txt").read_text().split() == [str(p) for p in classpath]


@pytest.mark.integration
@pytest.mark.slow
def test_ivy_fallback_without_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No `mvn` on PATH: Ivy's standalone jar from pyspark resolves the same jars with one call."""
    ivy = jars.find_ivy_jar()
    if ivy is None:
        pytest.skip("pyspark's jars/ folder has no ivy-*.jar")
    maven_or_cached = sorted(_names(jars.resolve_broker_classpath()))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    from streaming_pipeline.embedded.processes import find_java

    (bin_dir / "java").symlink_to(find_java())
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv(jars.RESOLVER_ENV, raising=False)
    monkeypatch.setenv(jars.CACHE_DIR_ENV, str(tmp_path / "cache"))
    messages: list[str] = []
    classpath = jars.resolve_broker_classpath(progress=messages.append)
    assert any("Apache Ivy" in m for m in messages), messages
    _check_broker_classpath(classpath)
    assert all(p.parent == jars.kafka_cache_dir() / "lib" for p in classpath)
    assert sorted(_names(classpath)) == maven_or_cached


@pytest.mark.integration
def test_module_cli_prefetches() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streaming_pipeline.embedded.jars"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=Path(__file__).resolve().parents[2],
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "jars" in done.stdout
