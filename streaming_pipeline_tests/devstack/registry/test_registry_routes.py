"""Every route of the registry's API is served by the app `create_app` builds (in process, no server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streaming_pipeline.devstack.registry import create_app

pytestmark = pytest.mark.timeout(60)

ROUTES = [
    ("GET", "/"),
    ("GET", "/schemas/types"),
    ("GET", "/contexts"),
    ("GET", "/mode"),
    ("GET", "/mode/s"),
    ("GET", "/schemas/ids/1"),
    ("GET", "/schemas/ids/1/schema"),
    ("GET", "/schemas/ids/1/versions"),
    ("GET", "/schemas/ids/1/subjects"),
    ("GET", "/schemas/guids/g"),
    ("GET", "/subjects"),
    ("POST", "/subjects/s/versions"),
    ("POST", "/subjects/s"),
    ("GET", "/subjects/s/versions"),
    ("GET", "/subjects/s/versions/1"),
    ("GET", "/subjects/s/versions/1/schema"),
    ("GET", "/subjects/s/versions/1/referencedby"),
    ("DELETE", "/subjects/s"),
    ("DELETE", "/subjects/s/versions/1"),
    ("POST", "/compatibility/subjects/s/versions/1"),
    ("POST", "/compatibility/subjects/s/versions"),
    ("GET", "/config"),
    ("PUT", "/config"),
    ("DELETE", "/config"),
    ("GET", "/config/s"),
    ("PUT", "/config/s"),
    ("DELETE", "/config/s"),
]
NO_ROUTE = {"error_code": 404, "message": "Not Found"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(tmp_path / "data"), raise_server_exceptions=False) as client:
        yield client


def test_unknown_route_and_method_answers(client: TestClient) -> None:
    missing = client.get("/nothing-here")
    assert (missing.status_code, missing.json()) == (404, NO_ROUTE)
    wrong_method = client.put("/subjects/s")
    not_allowed = {"error_code": 405, "message": "Method Not Allowed"}
    assert (wrong_method.status_code, wrong_method.json()) == (405, not_allowed)


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_is_served(client: TestClient, method: str, path: str) -> None:
    response = client.request(method, path, json={} if method in ("POST", "PUT") else None)
    assert response.status_code != 405, response.text
    assert response.json() != NO_ROUTE
    assert response.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
