"""Spark resource: a Spark Connect client when SPARK_REMOTE is set, else an in-process local session.

The warm engine is a Spark Connect server (`streaming-pipeline stack up` starts one and `stack env`
exports SPARK_REMOTE=sc://host:port); a run then connects in well under a second instead of starting a
JVM. Without SPARK_REMOTE (unit tests, a laptop without the stack) the resource starts a classic session
from a `spark_conf/` profile, with the project's jars given explicitly: nothing resolves at session start.
"""

from __future__ import annotations

import atexit
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field, PrivateAttr

from streaming_pipeline.errors import ConfigurationError, EngineVersionError, SparkUnavailableError, first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROFILES = ("local", "cluster")
SESSION_TIME_ZONE = "UTC"


def spark_conf_dir() -> Path:
    override = os.environ.get("STREAMING_PIPELINE_SPARK_CONF_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "spark_conf"


def read_profile(profile: str) -> dict[str, str]:
    """Settings of `spark_conf/<profile>.conf` (spark-defaults.conf format)."""
    if profile not in PROFILES:
        raise ConfigurationError(f"Spark profile {profile!r} is unknown; choose one of {', '.join(PROFILES)}")
    path = spark_conf_dir() / f"{profile}.conf"
    if not path.is_file():
        raise ConfigurationError(f"Spark profile file not found: {path}")
    settings: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise ConfigurationError(f"{path}:{number}: expected 'key value', got {line!r}")
        settings[parts[0]] = parts[1].strip()
    return settings


def engine_conf(profile: str, master: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The settings a Spark driver of this project starts with: the profile, the master, the project's jars."""
    from streaming_pipeline.embedded.jars import spark_jars

    settings = read_profile(profile)
    if master:
        settings["spark.master"] = master
    if "spark.master" not in settings:
        raise ConfigurationError(f"Spark profile {profile!r} has no master: set SPARK_MASTER (e.g. spark://host:7077)")
    settings["spark.jars"] = ",".join(str(jar) for jar in spark_jars())
    settings.update(extra or {})
    return settings


def validate_remote(url: str) -> str:
    if not url.startswith("sc://"):
        raise ConfigurationError(f"SPARK_REMOTE={url!r} is not a Spark Connect URL; expected sc://host:port")
    return url


def connect_session(url: str) -> SparkSession:
    """A new Spark Connect session to `url`; from then on this process is a Spark Connect client.

    pyspark lets a process be a Connect client or a classic driver, not both: its functions (F.col, ...) build
    Connect expressions once SPARK_CONNECT_MODE_ENABLED is set, as its own builder does. `create`, because
    `getOrCreate` could hand back a session bound to another server.
    """
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = RemoteSparkSession.builder.remote(url).create()
    # pyspark 4.2's client sends one more command when the interpreter exits (a cleanup of Spark ML's cache) and,
    # when the server is gone by then (a stack stopped first, a server that died), retries it for about ten
    # minutes. This project uses no Spark ML: close the channel at exit instead, which sends nothing. (Registered
    # after the client's own hook, so it runs first; the session itself is released by `stop()` or expires.)
    atexit.register(_close_channel_at_exit, weakref.ref(session.client))
    return session  # type: ignore[return-value]


def _close_channel_at_exit(client_ref: weakref.ref[Any]) -> None:
    client = client_ref()
    if client is not None and not client.is_closed:
        client.close()


def check_server_version(url: str, server_version: str) -> None:
    """Raise EngineVersionError unless the Connect server runs the Spark version of this client's pyspark.

    The server runs the project's foreachBatch handlers in its own Python workers and loads the project's Delta,
    Kafka and Avro jars, all resolved for one Spark version; a server of another version (one started from an
    older install and left running, another image) fails later and far less clearly.
    """
    from pyspark import __version__ as client_version

    if server_version != client_version:
        raise EngineVersionError(
            f"the Spark Connect server at {url} runs Spark {server_version}, but this client is pyspark "
            f"{client_version}: start a server of Spark {client_version} (`streaming-pipeline stack down` and "
            f"`stack up` with this installation), or install pyspark {server_version} with its Delta pair"
        )


class SparkResource(dg.ConfigurableResource):
    """The run's SparkSession, made on first use and closed when the run ends.

    `remote` (SPARK_REMOTE) selects Spark Connect; otherwise `profile` picks `spark_conf/<profile>.conf`,
    `master` (SPARK_MASTER) overrides its master and `conf` overrides single settings.
    """

    remote: str | None = Field(default=None, description="Spark Connect URL sc://host:port (SPARK_REMOTE).")
    profile: str = Field(default="local", description="local or cluster (see spark_conf/), without `remote`.")
    master: str | None = Field(default=None, description="Spark master URL for an in-process driver.")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings, applied last.")
    stop_on_teardown: bool = Field(
        default=True, description="Close the session when the run ends (tests sharing one session set False)."
    )

    _session: Any = PrivateAttr(default=None)

    @property
    def is_remote(self) -> bool:
        return bool(self.remote)

    def session_conf(self) -> dict[str, str]:
        return engine_conf(self.profile, self.master, self.conf)

    def get_session(self) -> SparkSession:
        if self._session is None:
            self._session = self._connect() if self.remote else self._start_local()
        return self._session

    def _connect(self) -> SparkSession:
        from pyspark.errors import PySparkException

        url = validate_remote(str(self.remote))
        try:
            session = connect_session(url)
            server_version = session.version
        except (PySparkException, OSError) as exc:
            raise SparkUnavailableError(
                f"the Spark Connect server at {url} (SPARK_REMOTE) did not answer: {first_line(exc)}. "
                "Start it with `streaming-pipeline stack up`, or unset SPARK_REMOTE to run Spark in-process."
            ) from exc
        try:
            check_server_version(url, server_version)
        except EngineVersionError:
            session.stop()
            raise
        try:
            session.conf.set("spark.sql.session.timeZone", SESSION_TIME_ZONE)
            for key, value in self.conf.items():
                session.conf.set(key, value)
        except (PySparkException, OSError) as exc:
            raise SparkUnavailableError(
                f"the Spark Connect server at {url} refused a setting: {first_line(exc)}"
            ) from exc
        return session

    def _start_local(self) -> SparkSession:
        from pyspark.errors import PySparkRuntimeError
        from pyspark.sql import SparkSession

        if "SPARK_CONNECT_MODE_ENABLED" in os.environ:
            raise SparkUnavailableError(
                "this process is already a Spark Connect client, and pyspark cannot also start an in-process Spark "
                "session in it: set SPARK_REMOTE (sc://host:port) for every session, or use another process"
            )
        builder = SparkSession.builder.appName("streaming-pipeline")
        for key, value in self.session_conf().items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        except PySparkRuntimeError as exc:
            raise SparkUnavailableError(
                f"the local Spark driver JVM did not start ({first_line(exc)}). Check `java -version` (17+) "
                "and JAVA_HOME; the JVM's own messages are printed above."
            ) from exc
        session.sparkContext.setLogLevel("WARN")
        return session

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._session is not None and self.stop_on_teardown:
            self._session.stop()
            self._session = None
