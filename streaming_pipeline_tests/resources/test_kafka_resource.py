"""KafkaResource's settings for confluent-kafka and for Spark's Kafka source: the SASL credentials as given, and in
the JAAS line of Spark's source quoted so that Kafka's parser reads them back whole, whatever they hold."""

from __future__ import annotations

import pytest

from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.resources.kafka import KafkaResource

# A secret with what ends a JAAS value or escapes in it: quotes, backslashes (one at the end), a semicolon,
# spaces, an equals sign and a brace. Kafka 4.1.1's own parser (JaasContext.loadClientContext) reads the line
# built from these back as `us"er` and this password, checked by hand on 2026-12-05.
PASSWORD = 'p\\a"s s;w=o}rd\\'


def test_a_scram_login_quotes_what_the_jaas_parser_would_read_as_the_end_of_a_value() -> None:
    kafka = KafkaResource(
        bootstrap_servers="b1:9093,b2:9093",
        security_protocol="sasl_ssl",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username='us"er',
        sasl_password=PASSWORD,
    )
    assert kafka.spark_options() == {
        "kafka.bootstrap.servers": "b1:9093,b2:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="us\\"er" password="p\\\\a\\"s s;w=o}rd\\\\";',
    }
    # librdkafka takes the credentials as they are.
    config = kafka.client_config()
    assert (config["sasl.username"], config["sasl.password"]) == ('us"er', PASSWORD)


def test_a_plain_login_uses_the_plain_module_and_no_mechanism_means_no_jaas_line() -> None:
    plain = KafkaResource(
        bootstrap_servers="b:9092",
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="key",
        sasl_password="secret",
    )
    assert plain.spark_options()["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="key" password="secret";'
    )
    assert "kafka.sasl.jaas.config" not in KafkaResource(bootstrap_servers="b:9092").spark_options()
    with pytest.raises(ConfigurationError, match="security_protocol='TLS' is not one of"):
        KafkaResource(bootstrap_servers="b:9092", security_protocol="TLS").client_config()


def test_the_tls_files_go_to_librdkafka_and_to_spark_as_pem_stores(tmp_path) -> None:
    kafka = KafkaResource(
        bootstrap_servers="b:9093",
        security_protocol="SSL",
        ssl_ca_location="/etc/pipeline/ca.pem",
        ssl_keystore_location="/etc/pipeline/client.pem",
    )
    config = kafka.client_config()
    assert (config["ssl.ca.location"], config["ssl.certificate.location"], config["ssl.key.location"]) == (
        "/etc/pipeline/ca.pem",
        "/etc/pipeline/client.pem",
        "/etc/pipeline/client.pem",
    )
    assert kafka.spark_options() == {
        "kafka.bootstrap.servers": "b:9093",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/pipeline/ca.pem",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.location": "/etc/pipeline/client.pem",
    }
    # Without them, nothing of TLS is set: the system's CAs, no client certificate.
    plain = KafkaResource(bootstrap_servers="b:9093", security_protocol="SASL_SSL")
    assert not [key for key in {**plain.client_config(), **plain.spark_options()} if "ssl." in key]


def test_what_librdkafka_reports_is_told_apart_a_refusal_from_a_broker_away() -> None:
    import logging

    from confluent_kafka import KafkaError

    from streaming_pipeline.resources.kafka import _Refusals

    def first(*errors: KafkaError, logged: tuple[str, ...] = ()) -> tuple[str, str] | None:
        refusals = _Refusals()
        for error in errors:
            refusals(error)
        for message in logged:
            refusals.emit(logging.LogRecord("rdkafka", logging.INFO, "", 0, message, None, None))
        return refusals.first

    away = KafkaError(KafkaError._TRANSPORT, "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed")
    assert first(away, KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")) is None
    assert first(away, KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error")) == (
        "sasl",
        "SASL authentication error",
    )
    assert first(KafkaError(KafkaError._SSL, "certificate verify failed"))[0] == "tls"  # type: ignore[index]
    alert = "Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate"
    assert first(KafkaError(KafkaError._TRANSPORT, alert))[0] == "tls"  # type: ignore[index]
    closed = "b:9093/bootstrap: Disconnected: connection closed by peer (after 1ms in state APIVERSION_QUERY)"
    # A broker that closes the first request of every try, three times: a plaintext client at a TLS listener.
    assert first(logged=(closed, closed)) is None
    assert first(logged=(closed, closed, closed))[0] == "protocol"  # type: ignore[index]


def test_each_refusal_names_the_settings_and_holds_no_secret() -> None:
    kafka = KafkaResource(
        bootstrap_servers="b:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="pipeline",
        sasl_password=PASSWORD,
    )
    for what, named in (
        ("sasl", "KAFKA_SASL_PASSWORD"),
        ("tls", "KAFKA_SSL_CA_LOCATION"),
        ("protocol", "KAFKA_SECURITY_PROTOCOL=SASL_SSL"),
    ):
        message = str(kafka.refused(what, "librdkafka's words"))
        assert named in message and "b:9093" in message and "librdkafka's words" in message
        assert PASSWORD not in message
