"""Contract tests of the project's schema registry through confluent-kafka's real client.

The registry runs as a real subprocess (`python -m streaming_pipeline.devstack.registry`).
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from streaming_pipeline_tests.devstack.registry.conftest import RegistryProcess

pytestmark = pytest.mark.timeout(60)

VND = "application/vnd.schemaregistry.v1+json"


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def record(*fields: dict[str, Any], name: str = "Ride") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "test.rides", "fields": list(fields)})


def avro(schema_str: str) -> Schema:
    return Schema(schema_str, "AVRO")


V1 = record(field("vendor_id", "int"), field("total_amount", "double"))
V2_OPTIONAL = record(
    field("vendor_id", "int"), field("total_amount", "double"), field("tip", ["null", "double"], default=None)
)
V2_TYPE_CHANGE = record(field("vendor_id", "string"), field("total_amount", "double"))
V2_REQUIRED = record(field("vendor_id", "int"), field("total_amount", "double"), field("tip", "double"))


def unique_subject(prefix: str = "subject") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}-value"


def expect_error(call: Callable[[], Any], http_status: int, error_code: int) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as info:
        call()
    assert (info.value.http_status_code, info.value.error_code) == (http_status, error_code), info.value
    return info.value


# ---------------------------------------------------------------------------
# register / lookup / get / list


def test_register_lookup_get_list(fresh_registry: RegistryProcess) -> None:
    client = fresh_registry.client()
    assert client.get_subjects() == []
    assert client.register_schema("rides-value", avro(V1)) == 1

    # identical schema (other whitespace and key order, new client: no cache) -> same id, no new version
    same_v1 = json.dumps(json.loads(V1), indent=4, sort_keys=True)
    assert fresh_registry.client().register_schema("rides-value", avro(same_v1)) == 1
    assert client.get_versions("rides-value") == [1]

    # the same schema under another subject keeps its global id
    assert fresh_registry.client().register_schema("other-value", avro(V1)) == 1
    assert client.register_schema("rides-value", avro(V2_OPTIONAL)) == 2

    latest = fresh_registry.client().get_latest_version("rides-value")
    assert (latest.subject, latest.version, latest.schema_id) == ("rides-value", 2, 2)
    assert json.loads(latest.schema.schema_str) == json.loads(V2_OPTIONAL) | {
        "fields": [
            {"name": "vendor_id", "type": "int"},
            {"name": "total_amount", "type": "double"},
            {"name": "tip", "type": ["null", "double"], "default": None},
        ]
    }
    assert latest.schema.schema_type == "AVRO"
    first = fresh_registry.client().get_version("rides-value", 1)
    assert (first.version, first.schema_id) == (1, 1)

    assert client.get_versions("rides-value") == [1, 2]
    assert client.get_versions("other-value") == [1]
    assert client.get_subjects() == ["other-value", "rides-value"]

    found = fresh_registry.client().lookup_schema("rides-value", avro(same_v1))
    assert (found.subject, found.version, found.schema_id) == ("rides-value", 1, 1)
    found = fresh_registry.client().lookup_schema("other-value", avro(V1))
    assert (found.subject, found.version, found.schema_id) == ("other-value", 1, 1)

    schema = fresh_registry.client().get_schema(2)
    assert json.loads(schema.schema_str)["fields"][2]["name"] == "tip"
    assert client.get_subjects_by_schema_id(1) == ["other-value", "rides-value"]
    assert client.get_subjects_by_schema_id(2) == ["rides-value"]
    versions = client.get_schema_versions(1)
    assert [(v.subject, v.version) for v in versions] == [("other-value", 1), ("rides-value", 1)]
    assert client.get_schema_types() == ["AVRO"]


def test_delete_soft_and_permanent(fresh_registry: RegistryProcess) -> None:
    client = fresh_registry.client()
    assert client.register_schema("rides-value", avro(V1)) == 1
    assert client.register_schema("rides-value", avro(V2_OPTIONAL)) == 2

    assert client.delete_version("rides-value", 2) == 2
    assert client.get_versions("rides-value") == [1]
    expect_error(lambda: fresh_registry.client().get_version("rides-value", 2), 404, 40402)
    assert fresh_registry.client().get_version("rides-value", 2, deleted=True).schema_id == 2
    # a soft-deleted version is deleted again only permanently; a live one is not hard-deleted first
    expect_error(lambda: client.delete_version("rides-value", 2), 404, 40406)
    expect_error(lambda: client.delete_version("rides-value", 1, permanent=True), 404, 40407)

    assert client.delete_subject("rides-value") == [1]
    assert client.get_subjects() == []
    assert client.get_subjects(deleted=True) == ["rides-value"]
    expect_error(lambda: client.get_versions("rides-value"), 404, 40401)
    assert client.get_versions("rides-value", deleted=True) == [1, 2]
    # consumers of old messages still resolve soft-deleted ids
    assert json.loads(fresh_registry.client().get_schema(1).schema_str)["name"] == "Ride"
    expect_error(lambda: client.delete_subject("rides-value"), 404, 40404)

    # re-registering after a soft delete continues the version numbers, same global id
    assert fresh_registry.client().register_schema("rides-value", avro(V1)) == 1
    assert client.get_versions("rides-value") == [3]
    expect_error(lambda: client.delete_subject("rides-value", permanent=True), 404, 40405)
    assert client.delete_subject("rides-value") == [3]
    assert client.delete_subject("rides-value", permanent=True) == [1, 2, 3]
    assert client.get_subjects(deleted=True) == []
    expect_error(lambda: fresh_registry.client().get_schema(2), 404, 40403)

    # after a hard delete numbering restarts; the global id of identical schemas is kept
    assert fresh_registry.client().register_schema("rides-value", avro(V2_OPTIONAL)) == 2
    registered = fresh_registry.client().get_latest_version("rides-value")
    assert (registered.version, registered.schema_id) == (1, 2)
    assert fresh_registry.client().register_schema("rides-value", avro(V2_OPTIONAL + "  ")) == 2


# ---------------------------------------------------------------------------
# compatibility


def test_backward_default_accepts_optional_field_rejects_breaking(shared_registry: RegistryProcess) -> None:
    client = shared_registry.client()
    subject = unique_subject("backward")
    first_id = client.register_schema(subject, avro(V1))
    assert client.get_compatibility() == "BACKWARD"

    error = expect_error(lambda: client.register_schema(subject, avro(V2_TYPE_CHANGE)), 409, 409)
    assert subject in error.error_message and "TYPE_MISMATCH" in error.error_message
    error = expect_error(lambda: client.register_schema(subject, avro(V2_REQUIRED)), 409, 409)
    assert subject in error.error_message and "READER_FIELD_MISSING_DEFAULT_VALUE" in error.error_message
    assert client.get_versions(subject) == [1]

    assert client.test_compatibility(subject, avro(V2_OPTIONAL)) is True
    assert client.test_compatibility(subject, avro(V2_TYPE_CHANGE)) is False
    second_id = client.register_schema(subject, avro(V2_OPTIONAL))
    assert second_id != first_id
    assert client.get_versions(subject) == [1, 2]


WITH_A = record(field("a", "int"))
WITH_A_B = record(field("a", "int"), field("b", "string"))
WITH_A_B_DEFAULT = record(field("a", "int"), field("b", "string", default=""))
WITH_A_B_INT = record(field("a", "int"), field("b", "int"))
WITH_A_STRING = record(field("a", "string"))


@pytest.mark.parametrize(
    ("level", "old", "new", "compatible"),
    [
        # adding a field without a default: old data lacks it (BACKWARD breaks), old readers ignore it
        ("BACKWARD", WITH_A, WITH_A_B, False),
        ("FORWARD", WITH_A, WITH_A_B, True),
        ("FULL", WITH_A, WITH_A_B, False),
        # removing a field without a default: new readers ignore it, old readers miss it
        ("BACKWARD", WITH_A_B, WITH_A, True),
        ("FORWARD", WITH_A_B, WITH_A, False),
        ("FULL", WITH_A_B, WITH_A, False),
        # with a default both directions work
        ("FULL", WITH_A, WITH_A_B_DEFAULT, True),
        ("FULL", WITH_A_B_DEFAULT, WITH_A, True),
        # NONE accepts anything
        ("NONE", WITH_A, WITH_A_STRING, True),
        ("NONE", WITH_A, record(field("x", "boolean"), name="Other"), True),
        ("BACKWARD", WITH_A, WITH_A_STRING, False),
        ("FORWARD", WITH_A, WITH_A_STRING, False),
    ],
)
def test_compatibility_modes(
    shared_registry: RegistryProcess, level: str, old: str, new: str, compatible: bool
) -> None:
    client = shared_registry.client()
    subject = unique_subject(level.lower())
    assert client.set_compatibility(subject_name=subject, level=level) == {"compatibility": level}
    assert client.get_compatibility(subject) == level
    old_id = client.register_schema(subject, avro(old))

    assert client.test_compatibility(subject, avro(new)) is compatible
    assert client.test_compatibility(subject, avro(new), version=1) is compatible
    assert client.test_compatibility_all_versions(subject, avro(new)) is compatible
    if compatible:
        new_id = client.register_schema(subject, avro(new))
        assert new_id != old_id  # global ids: other tests may have registered `new` already
        latest = shared_registry.client().get_latest_version(subject)
        assert (latest.version, latest.schema_id) == (2, new_id)
        assert client.get_versions(subject) == [1, 2]
    else:
        expect_error(lambda: client.register_schema(subject, avro(new)), 409, 409)
        assert client.get_versions(subject) == [1]


TRANSITIVE_CASES = {
    # v3 is compatible with v2 but not with v1 (field b: string in v1, int in v3)
    "BACKWARD": (WITH_A_B, WITH_A, record(field("a", "int"), field("b", "int", default=0))),
    "FORWARD": (WITH_A_B_DEFAULT, WITH_A, WITH_A_B_INT),
    "FULL": (WITH_A_B_DEFAULT, WITH_A, record(field("a", "int"), field("b", "int", default=0))),
}


@pytest.mark.parametrize("base_level", sorted(TRANSITIVE_CASES))
def test_transitive_checks_all_versions(shared_registry: RegistryProcess, base_level: str) -> None:
    v1, v2, v3 = TRANSITIVE_CASES[base_level]
    client = shared_registry.client()

    plain = unique_subject(base_level.lower())
    client.set_compatibility(subject_name=plain, level=base_level)
    client.register_schema(plain, avro(v1))
    client.register_schema(plain, avro(v2))
    client.register_schema(plain, avro(v3))
    assert client.get_versions(plain) == [1, 2, 3]

    transitive = unique_subject(base_level.lower() + "-transitive")
    client.set_compatibility(subject_name=transitive, level=base_level + "_TRANSITIVE")
    client.register_schema(transitive, avro(v1))
    client.register_schema(transitive, avro(v2))
    assert client.test_compatibility(transitive, avro(v3)) is True  # against the latest version only
    assert client.test_compatibility_all_versions(transitive, avro(v3)) is False
    error = expect_error(lambda: client.register_schema(transitive, avro(v3)), 409, 409)
    assert "oldSchemaVersion: 1" in error.error_message
    assert client.get_versions(transitive) == [1, 2]

    # soft-deleted versions are no longer checked
    client.delete_version(transitive, 1)
    client.register_schema(transitive, avro(v3))
    assert client.get_versions(transitive) == [2, 3]


def test_compatibility_verbose_messages(http: httpx.Client) -> None:
    subject = unique_subject("verbose")
    assert http.post(f"/subjects/{subject}/versions", json={"schema": WITH_A}).status_code == 200
    response = http.post(
        f"/compatibility/subjects/{subject}/versions/latest", params={"verbose": "true"}, json={"schema": WITH_A_B}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in message and "b" in message for message in body["messages"])
    assert "{compatibility: 'BACKWARD'}" in body["messages"]
    response = http.post(
        f"/compatibility/subjects/{subject}/versions", params={"verbose": "true"}, json={"schema": WITH_A}
    )
    assert response.json() == {"is_compatible": True, "messages": []}
    # nothing registered yet: anything is compatible
    response = http.post(f"/compatibility/subjects/{unique_subject()}/versions", json={"schema": WITH_A})
    assert response.json() == {"is_compatible": True}


# ---------------------------------------------------------------------------
# config


def test_config_global_and_subject(fresh_registry: RegistryProcess) -> None:
    client = fresh_registry.client()
    assert client.get_compatibility() == "BACKWARD"
    assert client.get_config().compatibility_level == "BACKWARD"
    expect_error(lambda: client.get_compatibility("rides-value"), 404, 40408)

    assert client.set_compatibility(level="full") == {"compatibility": "FULL"}
    assert client.get_compatibility() == "FULL"
    with httpx.Client(base_url=fresh_registry.url, trust_env=False) as http:
        response = http.get("/config/rides-value", params={"defaultToGlobal": "true"})
        assert response.json() == {"compatibilityLevel": "FULL"}
        response = http.put("/config", json={"compatibility": "SIDEWAYS"})
        assert response.status_code == 422 and response.json()["error_code"] == 42203

    assert client.set_compatibility(subject_name="rides-value", level="NONE") == {"compatibility": "NONE"}
    assert client.get_compatibility("rides-value") == "NONE"
    assert client.get_compatibility() == "FULL"
    expect_error(lambda: client.set_compatibility(subject_name="rides-value", level="SIDEWAYS"), 422, 42203)
    assert client.delete_config("rides-value").compatibility_level == "NONE"
    expect_error(lambda: client.get_compatibility("rides-value"), 404, 40408)
    assert client.delete_config().compatibility_level == "FULL"
    assert client.get_compatibility() == "BACKWARD"


# ---------------------------------------------------------------------------
# error codes


def test_error_codes(shared_registry: RegistryProcess) -> None:
    client = shared_registry.client()
    subject = unique_subject("errors")
    expect_error(lambda: client.get_versions(subject), 404, 40401)
    expect_error(lambda: client.get_latest_version(subject), 404, 40401)
    expect_error(lambda: client.lookup_schema(subject, avro(V1)), 404, 40401)
    expect_error(lambda: client.delete_subject(subject), 404, 40401)
    client.register_schema(subject, avro(V1))
    expect_error(lambda: client.get_version(subject, 7), 404, 40402)
    expect_error(lambda: client.delete_version(subject, 7), 404, 40402)
    expect_error(lambda: client.get_version(subject, 0), 422, 42202)
    expect_error(lambda: client.lookup_schema(subject, avro(V2_OPTIONAL)), 404, 40403)
    expect_error(lambda: client.get_schema(987654), 404, 40403)

    invalid = [
        Schema("{not json", "AVRO"),
        Schema(json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nosuchtype"}]}), "AVRO"),
        Schema(record(field("a", "int", default="not an int")), "AVRO"),
        Schema('syntax = "proto3"; message M { int32 a = 1; }', "PROTOBUF"),
        Schema(json.dumps({"type": "object"}), "JSON"),
    ]
    for schema in invalid:
        error = expect_error(lambda schema=schema: client.register_schema(subject, schema), 422, 42201)
        assert error.error_message.startswith("Invalid schema"), error.error_message
    assert client.get_versions(subject) == [1]


def test_raw_http_like_confluent_curl_examples(http: httpx.Client) -> None:
    subject = unique_subject("curl")
    assert http.get("/").json() == {}
    body = json.dumps({"schema": WITH_A})
    ids = set()
    for content_type in (VND, "application/json", "application/x-www-form-urlencoded"):  # curl -d default
        response = http.post(f"/subjects/{subject}/versions", content=body, headers={"Content-Type": content_type})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == VND
        ids.add(response.json()["id"])
    assert len(ids) == 1
    schema_id = ids.pop()
    assert http.get(f"/subjects/{subject}/versions").json() == [1]
    assert http.get(f"/schemas/ids/{schema_id}/schema").json() == json.loads(WITH_A)
    assert http.get(f"/subjects/{subject}/versions/latest/schema").json() == json.loads(WITH_A)
    assert http.get(f"/subjects/{subject}/versions/-1").json()["version"] == 1
    assert http.get(f"/subjects/{subject}/versions/abc").json()["error_code"] == 42202
    assert http.get("/schemas/ids/notanumber").json()["error_code"] == 40403
    looked_up = http.post(f"/subjects/{subject}", content=body, headers={"Content-Type": VND}).json()
    assert (looked_up["subject"], looked_up["version"], looked_up["id"]) == (subject, 1, schema_id)
    response = http.get("/config", headers={"Accept": "application/json"})
    assert response.headers["content-type"] == "application/json"
    response = http.post(f"/subjects/{subject}/versions", content=b"{oops", headers={"Content-Type": VND})
    assert response.status_code == 400 and response.json()["error_code"] == 400


def test_concurrent_registrations(shared_registry: RegistryProcess) -> None:
    subject = unique_subject("concurrent")
    schemas = [record(field(f"f{i}", "int")) for i in range(6)]

    def register(schema: str) -> int:
        with httpx.Client(base_url=shared_registry.url, timeout=10.0, trust_env=False) as http:
            response = http.post(
                f"/subjects/{subject}/versions",
                json={"schema": schema, "schemaType": "AVRO", "references": [], "metadata": None, "unknown": 1},
            )
            assert response.status_code == 200, response.text
            return int(response.json()["id"])

    with ThreadPoolExecutor(max_workers=12) as pool:
        # the same schema 12 times at once: one id, one version
        assert len(set(pool.map(register, [schemas[0]] * 12))) == 1
        assert shared_registry.client().get_versions(subject) == [1]
        shared_registry.client().set_compatibility(subject_name=subject, level="NONE")
        ids = list(pool.map(register, schemas[1:] * 2))
    assert len(set(ids)) == 5
    assert shared_registry.client().get_versions(subject) == [1, 2, 3, 4, 5, 6]


# ---------------------------------------------------------------------------
# serializer round trip


def test_avro_serializer_deserializer_round_trip(shared_registry: RegistryProcess) -> None:
    topic = f"rides-{uuid.uuid4().hex[:8]}"
    ride = {"vendor_id": 2, "total_amount": 17.5, "tip": None}
    ctx = SerializationContext(topic, MessageField.VALUE)

    serializer = AvroSerializer(shared_registry.client(), V2_OPTIONAL)
    payload = serializer(ride, ctx)
    registered = shared_registry.client().get_latest_version(f"{topic}-value")
    assert registered.version == 1
    assert payload[0] == 0 and struct.unpack(">I", payload[1:5])[0] == registered.schema_id

    deserializer = AvroDeserializer(shared_registry.client())
    assert deserializer(payload, ctx) == ride
    assert deserializer(serializer({**ride, "tip": 2.25}, ctx), ctx) == {**ride, "tip": 2.25}


# ---------------------------------------------------------------------------
# persistence


def test_data_and_ids_survive_restart(registry_factory: Callable[[Path], RegistryProcess], tmp_path: Path) -> None:
    data_dir = tmp_path / "registry-data"
    first = registry_factory(data_dir)
    client = first.client()
    assert client.register_schema("rides-value", avro(V1)) == 1
    assert client.register_schema("rides-value", avro(V2_OPTIONAL)) == 2
    assert client.register_schema("pickups-value", avro(WITH_A)) == 3
    assert client.register_schema("gone-value", avro(WITH_A_B)) == 4
    client.delete_subject("gone-value")
    client.set_compatibility(subject_name="pickups-value", level="FORWARD_TRANSITIVE")
    client.set_compatibility(level="FULL")
    assert first.stop_gracefully() == 0, first.log()

    second = registry_factory(data_dir)
    client = second.client()
    assert client.get_subjects() == ["pickups-value", "rides-value"]
    assert client.get_subjects(deleted=True) == ["gone-value", "pickups-value", "rides-value"]
    assert client.get_versions("rides-value") == [1, 2]
    latest = client.get_latest_version("rides-value")
    assert (latest.version, latest.schema_id) == (2, 2)
    assert json.loads(client.get_schema(3).schema_str) == json.loads(WITH_A)
    assert client.get_compatibility("pickups-value") == "FORWARD_TRANSITIVE"
    assert client.get_compatibility() == "FULL"
    assert second.client().register_schema("rides-value", avro(V1)) == 1  # v1 is still live: no new version
    assert client.get_versions("rides-value") == [1, 2]
    # ids keep increasing, never reused
    assert second.client().register_schema("new-value", avro(record(field("z", "long")))) == 5
    assert second.stop_gracefully() == 0, second.log()
