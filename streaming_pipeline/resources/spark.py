"""The Spark resource: the run's SparkSession, a Spark Connect client when SPARK_REMOTE is set, else an in-process
session from a `spark_conf/` profile (the sessions themselves: `streaming_pipeline.lakehouse.engine.spark`).

Not dagster-pyspark's PySparkResource: it builds its session with `SparkSession.builder...getOrCreate()` when the
run starts, with no place to resolve the Kafka, Avro and Delta jars before a local JVM starts, no check that a
Spark Connect server runs the client's Spark version, and no teardown, so every run would leave its Connect session
on the server until the server's idle timeout (docs/design.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field, PrivateAttr

from streaming_pipeline.lakehouse.engine.spark import engine_conf, open_remote_session, start_local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
        return open_remote_session(str(self.remote), self.conf)

    def _start_local(self) -> SparkSession:
        return start_local_session(self.session_conf())

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._session is not None and self.stop_on_teardown:
            self._session.stop()
            self._session = None
