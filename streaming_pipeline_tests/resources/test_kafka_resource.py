"""KafkaResource's settings for confluent-kafka and for Spark's Kafka source: the SASL credentials as given, and in
the JAAS line of Spark's source quoted so that Kafka's parser reads them back whole, whatever they hold."""

from __future__ import annotations

import pytest

from streaming_pipeline.errors import ConfigurationError
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
