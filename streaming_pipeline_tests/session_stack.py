"""The test session's one embedded stack: a Kafka broker and a schema registry for every test that needs them, and
the warm Spark Connect engine, added the first time a test asks for it (tests of Kafka alone never wait for it), and
the object store, added before the engine when the session's materialized lakehouse is on it (conftest.py).

Tests isolate themselves by names and by clearing what they use, not by processes of their own: each takes the
stack with `clear()` (no topic, no subject) and its own DAGSTER_HOME and lakehouse. A test that stops a server on
purpose (test_live stops each) needs do nothing more: `up()` starts whatever is not running again, on its port, so
the tests after it find the stack whole.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import httpx

from streaming_pipeline.devstack.embedded.stack import EmbeddedStack, StackInfo
from streaming_pipeline_tests.kafka_helpers import delete_every_topic


class SessionStack:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._engine = False
        self._object_store = False

    def up(self, *, engine: bool = False, object_store: bool = False) -> StackInfo:
        """The stack's addresses, with the engine when `engine` and the object store when `object_store` (each
        stays up once started); starts whatever is not running (the first call, or after a test stopped a
        server)."""
        self._engine = self._engine or engine
        self._object_store = self._object_store or object_store
        stack = EmbeddedStack(
            self.directory, prefer_standard_ports=False, spark=self._engine, object_store=self._object_store
        )
        return stack.up(timeout=240)

    def clear(self, *, engine: bool = False, dagster_home: Path | None = None) -> StackInfo:
        """`up()`, then no topic on the broker and no subject in the registry (deleted for good, so that their
        versions start from 1 again; schema ids go on counting). With `dagster_home`, the returned info names it
        instead of the stack's own: a new instance with the stack's dagster.yaml."""
        info = self.up(engine=engine)
        delete_every_topic(info.bootstrap_servers)
        with httpx.Client(base_url=info.schema_registry_url, timeout=30.0, trust_env=False) as registry:
            subjects = registry.get("/subjects", params={"deleted": "true"}).raise_for_status().json()
            for subject in subjects:
                registry.delete(f"/subjects/{subject}")  # a soft delete first, as the registry API requires
                registry.delete(f"/subjects/{subject}", params={"permanent": "true"}).raise_for_status()
        if dagster_home is None:
            return info
        assert info.dagster_home is not None
        dagster_home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(info.dagster_home / "dagster.yaml", dagster_home / "dagster.yaml")
        return dataclasses.replace(info, dagster_home=dagster_home)

    def clear_secured(self, secured: StackInfo, dagster_home: Path) -> StackInfo:
        """The session's secured stack (conftest.py's `secured_stack`) with no topic and no subject, and the engine
        of this stack: the info names both, and `dagster_home`, a new instance with the secured stack's
        dagster.yaml."""
        from streaming_pipeline_tests.kafka_helpers import clear_registry, clients_of

        engine = self.up(engine=True)
        kafka, registry = clients_of(secured)
        delete_every_topic(kafka)
        clear_registry(registry)
        assert secured.dagster_home is not None
        dagster_home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(secured.dagster_home / "dagster.yaml", dagster_home / "dagster.yaml")
        return dataclasses.replace(
            secured, spark_remote=engine.spark_remote, spark_pid=engine.spark_pid, dagster_home=dagster_home
        )

    def down(self) -> None:
        EmbeddedStack(self.directory).down()
