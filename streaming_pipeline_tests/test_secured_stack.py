"""The session's secured stack (conftest.py: `stack up --secure`, Kafka over SASL_SSL with SCRAM users and client
certificates, the registry over HTTPS with basic auth): a client it refuses gets a CredentialsError naming the
setting to fix, never a hang and never the secret; a run with a wrong password fails and loses nothing; the offset
sensor says why it skips; and no log the stack, the engine or the runs wrote holds a password.

The materialized lakehouse (materialized_lakehouse.py) is the pipeline's scenario on this stack, exact."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.components.kafka_delta_source.sensors import build_offset_sensor, live_job
from streaming_pipeline.devstack.embedded.secure import SecureMaterial
from streaming_pipeline.devstack.embedded.stack import StackInfo
from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.errors import BrokerUnavailableError, CredentialsError
from streaming_pipeline.lakehouse.registry_client import RegistryClient
from streaming_pipeline.lakehouse.schemas import load_schema
from streaming_pipeline.lakehouse.settings import SensorSettings
from streaming_pipeline.lakehouse.tables import RIDES
from streaming_pipeline.resources import KafkaResource
from streaming_pipeline_tests.kafka_helpers import clients_of, delete_every_topic, environ, produce_raw
from streaming_pipeline_tests.pipeline_assets import pipeline_asset

pytestmark = pytest.mark.integration

# Long enough that a refusal told apart only by the timeout would show as BrokerUnavailableError, not as a refusal.
PATIENT = 30.0


def _passwords(stack: StackInfo) -> list[str]:
    stored = json.loads((stack.directory / "secure" / "passwords.json").read_text())
    return sorted(stored.values())


def _other_ca(tmp_path: Path) -> str:
    return str(SecureMaterial.read_or_make(tmp_path / "another-stack").ca_file)


KAFKA_REFUSALS: dict[str, tuple[Callable[[KafkaResource, Path], dict[str, object]], str]] = {
    # what is changed in the stack's own client settings -> the setting the message must name
    "a wrong password": (lambda k, _: {"sasl_password": "not-the-password"}, "KAFKA_SASL_PASSWORD"),
    "an unknown user": (lambda k, _: {"sasl_username": "nobody"}, "KAFKA_SASL_USERNAME"),
    "a CA that did not sign the broker's certificate": (
        lambda k, tmp: {"ssl_ca_location": _other_ca(tmp)},
        "KAFKA_SSL_CA_LOCATION",
    ),
    "no client certificate (mutual TLS)": (lambda k, _: {"ssl_keystore_location": None}, "KAFKA_SSL_KEYSTORE_LOCATION"),
    "a plaintext client": (
        lambda k, _: {"security_protocol": "PLAINTEXT", "sasl_mechanism": None, "ssl_ca_location": None},
        "KAFKA_SECURITY_PROTOCOL",
    ),
}


@pytest.mark.parametrize("case", sorted(KAFKA_REFUSALS))
def test_kafka_refuses_a_client_with_an_error_naming_the_setting(
    secured_stack: StackInfo, tmp_path: Path, case: str
) -> None:
    kafka, _ = clients_of(secured_stack)
    change, setting = KAFKA_REFUSALS[case]
    refused = kafka.model_copy(update={**change(kafka, tmp_path), "timeout_seconds": PATIENT})
    with pytest.raises(CredentialsError) as caught:
        refused.topic_partitions(RIDES.topic)
    message = str(caught.value)
    assert setting in message and secured_stack.bootstrap_servers in message
    assert not any(password in message for password in [*_passwords(secured_stack), "not-the-password"])
    assert kafka.topic_partitions("a-topic-nobody-made") == []  # the stack's own settings are taken


REGISTRY_REFUSALS: dict[str, tuple[Callable[[RegistryClient, Path], dict[str, object]], str]] = {
    "a wrong password": (lambda r, _: {"basic_auth_user_info": "pipeline:not-the-password"}, "BASIC_AUTH_USER_INFO"),
    "no basic auth": (lambda r, _: {"basic_auth_user_info": None}, "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"),
    "a CA that did not sign the registry's certificate": (
        lambda r, tmp: {"ssl_ca_location": _other_ca(tmp)},
        "SCHEMA_REGISTRY_SSL_CA_LOCATION",
    ),
    "no client certificate (mutual TLS)": (
        lambda r, _: {"ssl_keystore_location": None},
        "SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION",
    ),
    "http:// for an HTTPS registry": (
        lambda r, _: {"url": r.url.replace("https://", "http://")},
        "SCHEMA_REGISTRY_URL",
    ),
}


@pytest.mark.parametrize("case", sorted(REGISTRY_REFUSALS))
def test_the_registry_refuses_a_client_with_an_error_naming_the_setting(
    secured_stack: StackInfo, tmp_path: Path, case: str
) -> None:
    import dataclasses

    _, registry = clients_of(secured_stack)
    change, setting = REGISTRY_REFUSALS[case]
    refused = dataclasses.replace(registry, **change(registry, tmp_path))  # type: ignore[arg-type]
    with pytest.raises(CredentialsError) as caught:
        refused.latest("rides-value")
    message = str(caught.value)
    assert setting in message
    assert not any(password in message for password in [*_passwords(secured_stack), "not-the-password"])
    registry.latest("a-subject-nobody-made")  # the stack's own settings are taken (None: no such subject)


@pytest.mark.slow  # two pipeline runs
def test_a_run_with_a_wrong_password_fails_naming_it_and_loses_nothing(
    secured_stack: StackInfo, spark: object, spark_test_conf: dict[str, str], tmp_path: Path
) -> None:
    """A first run takes three records; with a wrong KAFKA_SASL_PASSWORD the next run fails at the start of its
    step, naming the variable and not the password, and the table keeps its version and rows; the offset sensor
    skips, saying which settings to fix."""
    from streaming_pipeline.lakehouse.engine.delta_tables import read_table
    from streaming_pipeline_tests.conftest import pipeline_resources_for

    kafka, registry = clients_of(secured_stack)
    topic = RIDES.topic
    delete_every_topic(kafka)
    kafka.ensure_topic(topic)
    registry.register(RIDES.value_subject, load_schema(RIDES.value_schema))  # a bronze batch needs its versions
    lakehouse = tmp_path / "lakehouse"
    resources = pipeline_resources_for(secured_stack, lakehouse, spark_test_conf)
    raw_rides, dead_letters = pipeline_asset(RIDES.bronze_table), pipeline_asset("dead_letter_records")
    produce_raw(kafka, topic, [(b"k", b"not avro")] * 3)
    with environ(secured_stack.secure_env):
        first = dg.materialize([raw_rides, dead_letters], resources=resources, raise_on_error=False)
    assert first.success
    version = latest_version(str(lakehouse / "dead_letter_records"))
    produce_raw(kafka, topic, [(b"k", b"not avro either")])

    with environ({**secured_stack.secure_env, "KAFKA_SASL_PASSWORD": "not-the-password"}):
        failed = dg.materialize([raw_rides, dead_letters], resources=resources, raise_on_error=False)
        key = dg.AssetKey(RIDES.bronze_table)
        sensor = build_offset_sensor(key, topic, live_job(key), SensorSettings(), [RIDES.bronze_table])
        context = dg.build_sensor_context(
            resources={"kafka": resources["kafka"], "lakehouse": resources["lakehouse"]},
            instance=dg.DagsterInstance.ephemeral(),
        )
        skipped = sensor(context)
    assert not failed.success
    errors = "\n".join(
        event.step_failure_data.error.to_string()  # type: ignore[union-attr]
        for event in failed.all_events
        if event.is_step_failure
    )
    assert "KAFKA_SASL_PASSWORD" in errors and "refused the SASL credentials" in errors
    assert isinstance(skipped, dg.SkipReason) and "KAFKA_SASL_PASSWORD" in (skipped.skip_message or "")
    for text in (errors, skipped.skip_message or ""):
        assert not any(password in text for password in [*_passwords(secured_stack), "not-the-password"])
    assert latest_version(str(lakehouse / "dead_letter_records")) == version
    dead = read_table(spark, str(lakehouse / "dead_letter_records")).toPandas()
    assert sorted(dead["raw_value"].map(bytes)) == [b"not avro"] * 3


def test_the_secured_client_waits_for_a_broker_that_is_away_instead_of_calling_it_refused(tmp_path: Path) -> None:
    """Only a refusal fails fast: a secured client of a broker that does not run times out as before."""
    kafka = KafkaResource(
        bootstrap_servers="127.0.0.1:1",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="pipeline",
        sasl_password="secret",
        ssl_ca_location=_other_ca(tmp_path),
        timeout_seconds=2,
    )
    with pytest.raises(BrokerUnavailableError):
        kafka.topic_partitions("rides")


@pytest.mark.slow  # it reads what the materialized lakehouse's runs wrote: the whole scenario runs first
def test_no_log_of_the_stack_the_engine_or_the_runs_holds_a_password(
    secured_stack: StackInfo, materialized_lakehouse, session_stack
) -> None:
    """After the scenario's runs on the secured stack and the refusals above: every file the secured stack wrote
    (its logs, the registry's data), the session stack's logs (the engine's, when a test started it) and the runs'
    Dagster instance (event logs, compute logs), searched for each password. Only the files that hold them on
    purpose are left out."""
    holders = {"passwords.json", "registry-users", "server.properties", "client.pem", "server.pem"}
    # the materialized lakehouse's root: its registry's data and log, and its runs' Dagster instance
    roots = [secured_stack.directory, materialized_lakehouse.dagster_home.parent, session_stack.directory / "logs"]
    files = [path for root in roots for path in root.rglob("*") if path.is_file() and path.name not in holders]
    assert any(path.suffix == ".db" for path in files), files  # the runs' event logs
    passwords = [password.encode() for password in _passwords(secured_stack)]
    assert [path for path in files if any(password in path.read_bytes() for password in passwords)] == []
