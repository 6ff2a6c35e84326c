"""The engine's parts must match: pyspark with delta-spark, this client with the Spark Connect server. A mismatch is
an EngineVersionError naming both versions, before any Spark work (never a Py4J trace or ClassNotFoundException)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pyspark
import pytest

from streaming_pipeline.lakehouse.engine import jars
from streaming_pipeline.lakehouse.engine import spark as spark_module
from streaming_pipeline.lakehouse.errors import ConfigurationError, EngineVersionError
from streaming_pipeline.resources import SparkResource


def test_the_installed_pair_is_the_pinned_one_and_delta_accepts_it() -> None:
    assert (pyspark.__version__, importlib.metadata.version("delta-spark")) == ("4.2.0", "4.4.0")
    jars.check_engine_pair("4.2.0", "4.4.0")  # no error


def test_a_pyspark_outside_the_range_delta_spark_declares_is_refused_naming_both() -> None:
    # delta-spark 4.4.0's own metadata: Requires-Dist pyspark<=4.2.0,>=4.0.1
    with pytest.raises(EngineVersionError) as raised:
        jars.check_engine_pair("4.3.0", "4.4.0")
    message = str(raised.value)
    assert "delta-spark 4.4.0" in message and "pyspark 4.3.0 is installed" in message
    assert "<=4.2.0" in message and "pyproject.toml" in message
    with pytest.raises(EngineVersionError, match="pyspark 4.0.0 is installed"):
        jars.check_engine_pair("4.0.0", "4.4.0")
    assert isinstance(raised.value, ConfigurationError)


def test_delta_artifact_names_carry_the_spark_version_from_delta_4_1_on() -> None:
    assert jars.delta_artifact("4.2.0", "4.4.0") == "delta-spark_4.2_2.13"
    assert jars.delta_artifact("4.1.3", "4.3.1") == "delta-spark_4.1_2.13"
    assert jars.delta_artifact("4.0.0", "4.0.0") == "delta-spark_2.13"


def test_the_spark_set_is_derived_from_the_installed_pair() -> None:
    coordinates = jars.spark_artifacts().coordinates
    assert coordinates == (
        ("io.delta", "delta-spark_4.2_2.13", "4.4.0"),
        ("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0"),
        ("org.apache.spark", "spark-avro_2.13", "4.1.1"),
    )
    assert jars.spark_avro_version("4.1.1") == "4.1.1"  # without a stand-in, Avro takes Spark's own version


class _ServerAnswering:
    """A Connect session whose server answers the SparkVersion request with `version`."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.stopped = False
        self.settings: dict[str, str] = {}

    @property
    def conf(self) -> _ServerAnswering:
        return self

    def set(self, key: str, value: str) -> None:
        self.settings[key] = value

    def stop(self) -> None:
        self.stopped = True


def test_a_connect_server_of_another_spark_version_is_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _ServerAnswering("4.0.0")
    monkeypatch.setattr(spark_module, "connect_session", lambda url: server)
    resource = SparkResource(remote="sc://127.0.0.1:15002")
    with pytest.raises(EngineVersionError) as raised:
        resource.get_session()
    message = str(raised.value)
    assert "sc://127.0.0.1:15002 runs Spark 4.0.0" in message
    assert f"this client is pyspark {pyspark.__version__}" in message
    assert server.stopped and server.settings == {}  # the session is released, nothing was set on it


def test_a_connect_server_of_the_same_version_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _ServerAnswering(pyspark.__version__)
    monkeypatch.setattr(spark_module, "connect_session", lambda url: server)
    session = SparkResource(remote="sc://127.0.0.1:15002", conf={"spark.sql.shuffle.partitions": "3"}).get_session()
    assert session is server and not server.stopped
    assert server.settings == {"spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "3"}


def test_a_connect_client_whose_server_is_gone_exits_at_once() -> None:
    """pyspark 4.2's client sends a command at interpreter exit and retries it for about ten minutes when the server
    does not answer; a session from connect_session closes its channel first. (Without that this run hits its
    timeout; no duration is asserted.)"""
    from streaming_pipeline.devstack.embedded.ports import free_port

    script = (
        "from streaming_pipeline.lakehouse.engine.spark import connect_session\n"
        f"connect_session('sc://127.0.0.1:{free_port('127.0.0.1')}')\n"
        "print('created')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "created\n"), done.stderr[-2000:]


def test_a_session_is_named_in_the_connect_url_beside_its_other_parameters() -> None:
    session = "8f14e45f-ceea-467f-a0e6-1d2b3c4d5e6f"
    assert spark_module.session_url("sc://127.0.0.1:15002", session) == f"sc://127.0.0.1:15002/;session_id={session}"
    assert spark_module.session_url("sc://127.0.0.1:15002/", session) == f"sc://127.0.0.1:15002/;session_id={session}"
    assert (
        spark_module.session_url("sc://spark.example:443/;use_ssl=true", session)
        == f"sc://spark.example:443/;use_ssl=true;session_id={session}"
    )
