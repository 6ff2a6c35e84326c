"""The check every run and sensor tick starts with when the lakehouse is on an object store, against a real S3 server
(the development stack's s3proxy): the right keys pass; a wrong secret, a missing bucket and a store that is away are
each an error naming the setting, before anything is read or written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.devstack.embedded.object_store import EmbeddedObjectStore
from streaming_pipeline.devstack.embedded.ports import free_port
from streaming_pipeline.lakehouse.engine.object_store import check_reachable
from streaming_pipeline.lakehouse.errors import StorageError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedObjectStore]:
    with EmbeddedObjectStore(tmp_path_factory.mktemp("object-store")) as store:
        yield store


@pytest.fixture()
def store_env(object_store: EmbeddedObjectStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's S3 variables pointed at the store, with its own keys."""
    env = object_store.client_env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def stored_objects(store: EmbeddedObjectStore) -> list[Path]:
    """Every object of the store's bucket (the filesystem backend keeps one file per object)."""
    return sorted(p for p in (store.buckets_dir / store.bucket).rglob("*") if p.is_file())


def test_the_right_keys_pass_and_a_local_lakehouse_needs_no_store(store_env: dict[str, str], tmp_path: Path) -> None:
    check_reachable("s3a://lakehouse/check/lakehouse")
    check_reachable(str(tmp_path / "lakehouse"))  # a local path is never probed


def test_a_wrong_secret_is_refused_naming_the_keys_and_never_showing_the_secret(
    store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = store_env["AWS_SECRET_ACCESS_KEY"][::-1]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    with pytest.raises(StorageError) as raised:
        check_reachable("s3a://lakehouse/check/lakehouse")
    message = str(raised.value)
    assert "refused the keys for LAKEHOUSE_DIR=s3a://lakehouse/check/lakehouse" in message
    assert "AWS_SECRET_ACCESS_KEY" in message and f"AWS_ENDPOINT_URL={store_env['AWS_ENDPOINT_URL']}" in message
    assert wrong not in message and store_env["AWS_SECRET_ACCESS_KEY"] not in message


def test_a_missing_bucket_is_named(store_env: dict[str, str]) -> None:
    with pytest.raises(StorageError, match="names bucket 'no-such-bucket', which does not exist at AWS_ENDPOINT_URL="):
        check_reachable("s3a://no-such-bucket/lakehouse")


def test_a_store_that_is_away_is_named(store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    away = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", away)
    with pytest.raises(StorageError, match=f"does not answer at AWS_ENDPOINT_URL={away}"):
        check_reachable("s3a://lakehouse/lakehouse")


def test_a_run_with_a_wrong_secret_fails_at_its_start_and_writes_nothing(
    object_store: EmbeddedObjectStore, store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every asset of the pipeline, materialized against a lakehouse on the store with a wrong secret: the run fails
    when its lakehouse resource starts, naming the keys, before any step reaches Kafka or Spark (neither runs
    here), and the bucket holds nothing new."""
    from streaming_pipeline.definitions import pipeline_definitions
    from streaming_pipeline.lakehouse.settings import PipelineSettings
    from streaming_pipeline.resources.from_settings import build_resources

    before = stored_objects(object_store)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    nowhere = f"127.0.0.1:{free_port('127.0.0.1')}"
    settings = PipelineSettings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": nowhere,
            "SCHEMA_REGISTRY_URL": f"http://{nowhere}",
            "SPARK_REMOTE": f"sc://{nowhere}",
            "LAKEHOUSE_DIR": "s3a://lakehouse/wrong-secret/lakehouse",
        }
    )
    definitions = pipeline_definitions()
    result = dg.materialize(
        list(definitions.assets or []),  # type: ignore[arg-type]
        resources=dict(build_resources(settings)),
        raise_on_error=False,
    )
    assert not result.success
    failures = [event for event in result.all_events if event.is_failure]
    assert failures
    text = "\n".join(str(event.event_specific_data) for event in failures)
    assert "refused the keys for LAKEHOUSE_DIR=s3a://lakehouse/wrong-secret/lakehouse" in text
    assert "not-the-secret" not in text
    assert stored_objects(object_store) == before
