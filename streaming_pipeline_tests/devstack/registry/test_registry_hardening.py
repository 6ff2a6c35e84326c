"""Hardening of the schema registry: references that block deletes, request size limits, hostile input.

Every request here would have been answered 500 (or let a referenced schema be deleted) before; each must
now get Confluent's 4xx status and error code. The registry runs as a real subprocess.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryError

from streaming_pipeline_tests.devstack.registry.conftest import REPO_ROOT, RegistryProcess, start_registry

pytestmark = pytest.mark.timeout(120)

VND = "application/vnd.schemaregistry.v1+json"
DEFAULT_LIMIT = 16 * 1024 * 1024
SMALL_LIMIT = 1024


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def customer_schema(name: str = "Customer") -> str:
    return json.dumps(
        {
            "type": "record",
            "name": name,
            "namespace": "test.refs",
            "fields": [
                {"name": "id", "type": "long"},
            ],
        }
    )


def order_schema(customer: str = "test.refs.Customer") -> str:
    return json.dumps(
        {
            "type": "record",
            "name": "Order",
            "namespace": "test.refs",
            "fields": [
                {"name": "customer", "type": customer},
            ],
        }
    )


def nested_arrays(levels: int, inner: Any = "int") -> Any:
    for _ in range(levels):
        inner = {"type": "array", "items": inner}
    return inner


def assert_error(response: httpx.Response, status: int, error_code: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text[:500])
    body = response.json()
    assert body["error_code"] == error_code, body
    assert isinstance(body["message"], str) and body["message"], body
    return body


def register(http: httpx.Client, subject: str, schema: str, references: list[dict] | None = None) -> int:
    body: dict[str, Any] = {"schema": schema}
    if references is not None:
        body["references"] = references
    response = http.post(f"/subjects/{subject}/versions", json=body)
    assert response.status_code == 200, response.text
    return int(response.json()["id"])


def raw_exchange(url: str, request: bytes) -> tuple[int, bytes, Any]:
    """Send `request` bytes as they are; return the status, the raw head and the JSON body of the answer."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed before a response head; got {data!r}"
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
        length = int(headers[b"content-length"])
        while len(rest) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed in the middle of the response body"
            rest += chunk
    return int(lines[0].split()[1]), head.lower(), json.loads(rest[:length])


@pytest.fixture
def small_limit_registry(tmp_path: Path) -> Iterator[RegistryProcess]:
    registry = start_registry(
        tmp_path / "small-data", tmp_path / "small-logs", ["--max-request-bytes", str(SMALL_LIMIT)]
    )
    yield registry
    registry.stop_gracefully()


# ---------------------------------------------------------------------------
# 1. a referenced version cannot be deleted (42206)


def test_referenced_version_cannot_be_deleted(http: httpx.Client) -> None:
    customer, order = unique("customer"), unique("order")
    register(http, customer, customer_schema())
    reference = {"name": "test.refs.Customer", "subject": customer, "version": 1}
    order_id = register(http, order, order_schema(), [reference])
    assert http.get(f"/subjects/{customer}/versions/1/referencedby").json() == [order_id]
    message = f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={customer},version=1}}."

    for path in (
        f"/subjects/{customer}/versions/1",
        f"/subjects/{customer}/versions/latest",
        f"/subjects/{customer}/versions/1?permanent=true",  # refused for the reference before "not soft-deleted"
        f"/subjects/{customer}",
        f"/subjects/{customer}?permanent=true",
    ):
        assert assert_error(http.delete(path), 422, 42206)["message"] == message, path
    assert http.get(f"/subjects/{customer}/versions").json() == [1]

    # once the referrer is (soft) deleted, nothing references the version any more: Confluent's rule
    assert http.delete(f"/subjects/{order}/versions/1").json() == 1
    assert http.get(f"/subjects/{customer}/versions/1/referencedby").json() == []
    assert http.delete(f"/subjects/{customer}/versions/1").json() == 1
    assert http.delete(f"/subjects/{customer}/versions/1?permanent=true").json() == 1
    assert_error(http.get(f"/subjects/{customer}/versions", params={"deleted": "true"}), 404, 40401)


def test_subject_delete_refused_for_any_referenced_version(shared_registry: RegistryProcess) -> None:
    client = shared_registry.client()
    customer, order = unique("customer"), unique("order")
    client.register_schema(customer, Schema(customer_schema(), "AVRO"))
    with httpx.Client(base_url=shared_registry.url, timeout=10.0, trust_env=False) as http:
        http.put(f"/config/{customer}", json={"compatibility": "NONE"}).raise_for_status()
        register(http, customer, customer_schema("Client"))
        register(http, order, order_schema(), [{"name": "test.refs.Customer", "subject": customer, "version": 1}])

    with pytest.raises(SchemaRegistryError) as info:
        client.delete_subject(customer)
    assert (info.value.http_status_code, info.value.error_code) == (422, 42206)
    assert f"subject={customer},version=1}}" in info.value.error_message
    # the unreferenced version 2 goes, the referenced version 1 stays
    assert client.delete_version(customer, 2) == 2
    assert client.get_versions(customer) == [1]

    client.delete_subject(order)
    assert client.delete_subject(customer) == [1]
    assert client.delete_subject(customer, permanent=True) == [1, 2]


# ---------------------------------------------------------------------------
# 2. request size limit (413)


def test_declared_oversized_body_is_refused_before_it_is_read(shared_registry: RegistryProcess) -> None:
    subject = unique("big")
    head = (
        f"POST /subjects/{subject}/versions HTTP/1.1\r\nHost: registry\r\nContent-Type: {VND}\r\n"
        f"Content-Length: {DEFAULT_LIMIT + 1}\r\n\r\n"
    ).encode()
    # no body is sent at all: an answer proves the registry did not wait for it
    status, raw_head, body = raw_exchange(shared_registry.url, head)
    assert status == 413
    assert body["error_code"] == 413 and str(DEFAULT_LIMIT) in body["message"], body
    assert b"connection: close" in raw_head
    assert b"content-type: " + VND.encode() in raw_head


def test_request_size_limit_is_configurable_and_covers_streamed_bodies(
    small_limit_registry: RegistryProcess,
) -> None:
    subject = unique("limit")
    padding = " " * SMALL_LIMIT
    with httpx.Client(base_url=small_limit_registry.url, timeout=10.0, trust_env=False) as http:
        assert http.post(f"/subjects/{subject}/versions", json={"schema": '"string"'}).status_code == 200
        oversized = json.dumps({"schema": '"int"'}) + padding
        body = assert_error(
            http.post(f"/subjects/{subject}/versions", content=oversized, headers={"Content-Type": VND}), 413, 413
        )
        assert str(SMALL_LIMIT) in body["message"]
        # no Content-Length: the body arrives chunked and is cut off once it passes the limit
        chunks = iter([oversized[:600].encode(), oversized[600:].encode()])
        response = http.post(f"/subjects/{subject}/versions", content=chunks, headers={"Content-Type": VND})
        assert "content-length" not in response.request.headers
        assert_error(response, 413, 413)
        assert_error(http.put("/config", content=b"{" + b" " * SMALL_LIMIT + b"}"), 413, 413)
    assert small_limit_registry.client().get_versions(subject) == [1]

    client = small_limit_registry.client()
    with pytest.raises(SchemaRegistryError) as info:
        client.register_schema(subject, Schema(json.dumps({"type": "string", "doc": padding}), "AVRO"))
    assert (info.value.http_status_code, info.value.error_code) == (413, 413)


def test_max_request_bytes_flag_must_be_positive(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming_pipeline.devstack.registry",
            "--data-dir",
            str(tmp_path),
            "--max-request-bytes",
            "0",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--max-request-bytes 0" in result.stderr


# ---------------------------------------------------------------------------
# 3. hostile JSON and out-of-range ids


def test_deeply_nested_request_bodies_are_bad_json(http: httpx.Client) -> None:
    subject = unique("deep-body")
    register(http, subject, '"string"')
    deep_array = "[" * 100_000 + "]" * 100_000
    for method, path in (
        ("POST", f"/subjects/{subject}/versions"),
        ("POST", f"/subjects/{subject}"),
        ("POST", f"/compatibility/subjects/{subject}/versions/latest"),
        ("PUT", "/config"),
    ):
        response = http.request(method, path, content=deep_array, headers={"Content-Type": VND})
        assert "nested" in assert_error(response, 400, 400)["message"], path
    # nested just deeply enough for Python's parser, inside a field the registry reads
    references = json.dumps({"schema": '"int"', "references": [json.loads("[" * 900 + "]" * 900)]})
    response = http.post(f"/subjects/{subject}/versions", content=references, headers={"Content-Type": VND})
    assert_error(response, 400, 400)


def test_hostile_schemas_are_invalid_schemas(http: httpx.Client) -> None:
    subject = unique("deep-schema")
    register(http, subject, '"string"')
    hostile = {
        "nested 100000 levels": "[" * 100_000 + "]" * 100_000,
        "nested 400 levels": json.dumps(nested_arrays(400)),
        "NaN default": '{"type":"record","name":"N","fields":[{"name":"a","type":"double","default":NaN}]}',
        "overflowing default": '{"type":"record","name":"N","fields":[{"name":"a","type":"double","default":1e999}]}',
        "lone surrogate": '{"type":"record","name":"S","doc":"\\ud800","fields":[]}',
    }
    for label, schema in hostile.items():
        for path in (
            f"/subjects/{subject}/versions",
            f"/subjects/{subject}",
            f"/compatibility/subjects/{subject}/versions",
            f"/compatibility/subjects/{subject}/versions/1",
        ):
            response = http.post(path, json={"schema": schema})
            assert (response.status_code, response.json()["error_code"]) == (422, 42201), (label, path, response.text)
    assert http.get(f"/subjects/{subject}/versions").json() == [1]

    # nesting within the limit still works end to end: register, serve back, check compatibility
    deep_ok = json.dumps(nested_arrays(100))
    other = unique("deep-ok")
    schema_id = register(http, other, deep_ok)
    assert http.get(f"/schemas/ids/{schema_id}/schema").json() == json.loads(deep_ok)
    response = http.post(f"/compatibility/subjects/{other}/versions/latest", json={"schema": deep_ok})
    assert response.json() == {"is_compatible": True}


def test_reference_chains_nested_too_deeply_are_invalid_schemas(http: httpx.Client) -> None:
    """Each schema stays within the nesting limit, but references chain them ever deeper."""
    prefix = unique("chain")
    inner: str = "int"
    references: list[dict] = []
    refusals = []
    for link in range(30):
        subject = f"{prefix}-{link}"
        fields = [{"name": "f", "type": nested_arrays(100, inner)}]
        record = {"type": "record", "name": f"Link{link}", "namespace": "test.chain", "fields": fields}
        body = {"schema": json.dumps(record), "references": references}
        response = http.post(f"/subjects/{subject}/versions", json=body)
        if response.status_code != 200:
            refusals.append(assert_error(response, 422, 42201)["message"])
            break
        # a second version is checked for compatibility against the first, through the whole chain
        fields.append({"name": "g", "type": ["null", "int"], "default": None})
        response = http.post(f"/subjects/{subject}/versions", json=body | {"schema": json.dumps(record)})
        if response.status_code != 200:
            refusals.append(assert_error(response, 422, 42201)["message"])
            break
        inner = f"test.chain.Link{link}"
        references = [{"name": inner, "subject": subject, "version": 1}]
    assert refusals and "nested too deeply" in refusals[0], refusals


def test_out_of_range_schema_ids_are_not_found(http: httpx.Client) -> None:
    for schema_id in ("99999999999999999999999", "9223372036854775808", "2147483648", "0", "-1", "9" * 5000):
        for suffix in ("", "/schema", "/versions", "/subjects"):
            assert_error(http.get(f"/schemas/ids/{schema_id}{suffix}"), 404, 40403)


def test_out_of_range_versions_are_invalid(http: httpx.Client) -> None:
    subject = unique("versions")
    register(http, subject, '"string"')
    for version in ("99999999999999999999", "2147483648", "0", "-2", "-99999999999999999999", "9" * 5000):
        base = f"/subjects/{subject}/versions/{version}"
        for response in (
            http.get(base),
            http.get(base + "/schema"),
            http.get(base + "/referencedby"),
            http.delete(base),
            http.delete(base + "?permanent=true"),
            http.post(f"/compatibility/subjects/{subject}/versions/{version}", json={"schema": '"string"'}),
        ):
            assert_error(response, 422, 42202)
    references = [{"name": "x", "subject": subject, "version": 10**30}]
    response = http.post(f"/subjects/{unique('refs')}/versions", json={"schema": '"int"', "references": references})
    assert_error(response, 422, 42201)
    huge = "99999999999999999999999"
    assert http.get("/subjects", params={"offset": huge, "limit": huge}).status_code == 200
