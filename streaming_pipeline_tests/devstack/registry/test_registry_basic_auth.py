"""The registry behind basic auth (`--users-file`, what `stack up --secure` gives it): every request without the
right 'user:password' is answered 401 with Confluent's error body, before its body is read."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streaming_pipeline.devstack.registry import create_app
from streaming_pipeline.devstack.registry.basic_auth import read_users


def _basic(user_info: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(user_info.encode()).decode()}


def test_only_a_user_of_the_file_with_its_password_is_answered(tmp_path: Path) -> None:
    users_file = tmp_path / "users"
    users_file.write_text("# the stack's client\npipeline:s3cret\n\nops:other:colon\n")
    users = read_users(users_file)
    assert users == {"pipeline": "s3cret", "ops": "other:colon"}
    with TestClient(create_app(tmp_path / "data", users=users)) as client:
        assert client.get("/subjects", headers=_basic("pipeline:s3cret")).json() == []
        assert client.get("/subjects", headers=_basic("ops:other:colon")).status_code == 200
        for headers in ({}, _basic("pipeline:wrong"), _basic("nobody:s3cret"), {"Authorization": "Basic !!"}):
            refused = client.post("/subjects/rides-value/versions", headers=headers, json={"schema": '"string"'})
            assert refused.status_code == 401, headers
            assert refused.json() == {"error_code": 40101, "message": "Unauthorized"}
            assert refused.headers["WWW-Authenticate"].startswith("Basic")
        assert client.get("/subjects", headers=_basic("pipeline:s3cret")).json() == []  # nothing was registered


def test_a_users_file_with_a_line_that_is_not_user_password_is_refused_naming_the_line(tmp_path: Path) -> None:
    users_file = tmp_path / "users"
    users_file.write_text("pipeline:s3cret\nnot a pair\n")
    with pytest.raises(ValueError, match=r"users, line 2: not 'user:password'"):
        read_users(users_file)
