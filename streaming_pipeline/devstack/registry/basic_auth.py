"""ASGI middleware asking every request for HTTP basic auth, as Confluent's registry does behind
`authentication.method=BASIC`: a missing or wrong 'user:password' is answered 401 with Confluent's error body."""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from pathlib import Path

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from streaming_pipeline.devstack.registry.responses import respond

UNAUTHORIZED = 40101


def read_users(path: Path) -> dict[str, str]:
    """{user: password} from a file of 'user:password' lines (blank lines and '#' comments skipped)."""
    users: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, password = line.partition(":")
        if not colon or not user or not password:
            raise ValueError(f"{path}, line {number}: not 'user:password'")
        users[user] = password
    if not users:
        raise ValueError(f"{path} names no user")
    return users


class BasicAuth:
    """Refuse any request whose Authorization header is not basic auth of one of `users` with 401."""

    def __init__(self, app: ASGIApp, users: Mapping[str, str]) -> None:
        self.app = app
        self.users = {user: password.encode() for user, password in users.items()}

    def _allowed(self, header: str) -> bool:
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        expected = self.users.get(user)
        # compared in constant time, and a wrong user takes as long as a wrong password
        return hmac.compare_digest(password.encode(), expected if expected is not None else b"\0" * 32) and (
            expected is not None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if self._allowed(request.headers.get("authorization", "")):
            await self.app(scope, receive, send)
            return
        body = {"error_code": UNAUTHORIZED, "message": "Unauthorized"}
        response = respond(request, body, 401)
        response.headers["WWW-Authenticate"] = 'Basic realm="schema-registry"'
        await response(scope, receive, send)
