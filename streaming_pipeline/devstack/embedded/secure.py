"""What a secured stack (`stack up --secure`) is made of: a private CA, the servers' and the clients' certificates,
and the users and passwords of Kafka (SCRAM) and of the registry (basic auth), under ``<stack>/secure/``.

    material = SecureMaterial.read_or_make(stack_dir / "secure")
    material.ca_file          # the CA (PEM) every client trusts
    material.server_keystore  # the servers' private key and certificate chain (PEM, 0600): the broker, the registry
    material.client_keystore  # the clients' key and certificate chain (PEM, 0600): mutual TLS
    material.client_env()     # what `stack env` exports

Made once and kept across restarts (a client configured earlier keeps working), each file written with mode 0600
where it holds a key or a password. The certificates name 127.0.0.1 and localhost, and last ten years.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KAFKA_CLIENT_USER = "pipeline"
KAFKA_BROKER_USER = "broker"  # the brokers' own user, for their traffic among themselves
REGISTRY_USER = "pipeline"
SCRAM_MECHANISM = "SCRAM-SHA-512"
_VALID_DAYS = 3650


def write_private(path: Path, text: str) -> None:
    """`text` into a new file readable by its owner only (an existing one is replaced)."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


def _password() -> str:
    """A random password of URL-safe characters only: Kafka's SCRAM format parser splits on ',' and '=' with no
    escape, and a JAAS line or a 'user:password' pair would need escapes for others."""
    return secrets.token_urlsafe(24)


@dataclass(frozen=True)
class Passwords:
    kafka_client: str
    kafka_broker: str
    registry: str


@dataclass(frozen=True)
class SecureMaterial:
    """The files of a secured stack in `directory`."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_keystore(self) -> Path:
        return self.directory / "server.pem"

    @property
    def client_keystore(self) -> Path:
        return self.directory / "client.pem"

    @property
    def passwords_file(self) -> Path:
        return self.directory / "passwords.json"

    @property
    def registry_users_file(self) -> Path:
        """The registry's users: one 'user:password' line each (0600)."""
        return self.directory / "registry-users"

    @classmethod
    def read_or_make(cls, directory: Path) -> SecureMaterial:
        material = cls(Path(directory).resolve())
        files = (material.ca_file, material.server_keystore, material.client_keystore, material.passwords_file)
        if not all(path.is_file() for path in files):
            material._make()
        return material

    def passwords(self) -> Passwords:
        stored = json.loads(self.passwords_file.read_text())
        return Passwords(stored["kafka_client"], stored["kafka_broker"], stored["registry"])

    def client_env(self, *, kafka: bool = True, registry: bool = True) -> dict[str, str]:
        """The variables a client of the secured stack sets (`stack env`): protocol, mechanism, the CA and the
        client's keystore, users and passwords."""
        passwords = self.passwords()
        env: dict[str, str] = {}
        if kafka:
            env.update(
                KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                KAFKA_SASL_MECHANISM=SCRAM_MECHANISM,
                KAFKA_SASL_USERNAME=KAFKA_CLIENT_USER,
                KAFKA_SASL_PASSWORD=passwords.kafka_client,
                KAFKA_SSL_CA_LOCATION=str(self.ca_file),
                KAFKA_SSL_KEYSTORE_LOCATION=str(self.client_keystore),
            )
        if registry:
            env.update(
                SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO=f"{REGISTRY_USER}:{passwords.registry}",
                SCHEMA_REGISTRY_SSL_CA_LOCATION=str(self.ca_file),
                SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION=str(self.client_keystore),
            )
        return env

    def librdkafka_config(self) -> dict[str, str]:
        """The same as confluent-kafka's settings, for the stack's own probes and tools."""
        env = self.client_env(registry=False)
        return {
            "security.protocol": env["KAFKA_SECURITY_PROTOCOL"],
            "sasl.mechanism": env["KAFKA_SASL_MECHANISM"],
            "sasl.username": env["KAFKA_SASL_USERNAME"],
            "sasl.password": env["KAFKA_SASL_PASSWORD"],
            "ssl.ca.location": env["KAFKA_SSL_CA_LOCATION"],
            "ssl.certificate.location": env["KAFKA_SSL_KEYSTORE_LOCATION"],
            "ssl.key.location": env["KAFKA_SSL_KEYSTORE_LOCATION"],
        }

    def _make(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        until = now + datetime.timedelta(days=_VALID_DAYS)

        def name(common_name: str) -> x509.Name:
            return x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "streaming-pipeline development stack"),
                    x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                ]
            )

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = name(f"streaming-pipeline stack CA {secrets.token_hex(4)}")
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, _sha256())
        )

        def leaf(common_name: str, *, server: bool) -> str:
            key = ec.generate_private_key(ec.SECP256R1())
            # A server's certificate also authenticates it as a client: the brokers connect to each other.
            usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
            builder = (
                x509.CertificateBuilder()
                .subject_name(name(common_name))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now)
                .not_valid_after(until)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            )
            if server:
                builder = builder.add_extension(
                    x509.SubjectAlternativeName(
                        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                    ),
                    critical=False,
                )
            cert = builder.sign(ca_key, _sha256())
            # Unencrypted PKCS#8 first, then the chain: the form Kafka's PEM keystore, librdkafka, OpenSSL and
            # Python's ssl module all read from one file.
            return _pem_key(key) + _pem_cert(cert) + _pem_cert(ca_cert)

        self.ca_file.write_text(_pem_cert(ca_cert))
        write_private(self.server_keystore, leaf("127.0.0.1", server=True))
        write_private(self.client_keystore, leaf("streaming-pipeline client", server=False))
        passwords = {"kafka_client": _password(), "kafka_broker": _password(), "registry": _password()}
        write_private(self.passwords_file, json.dumps(passwords))
        write_private(self.registry_users_file, f"{REGISTRY_USER}:{passwords['registry']}\n")


def _sha256() -> hashes.SHA256:
    return hashes.SHA256()


def _pem_cert(cert: x509.Certificate) -> str:
    return cert.public_bytes(Encoding.PEM).decode()


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
